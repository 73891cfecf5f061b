"""The dialects of chat completions: what differs between servers that speak it, as data.

`Dialect` says where a server sends reasoning, how its usage counts it,
what goes back on a later turn and which optional request features it
honours; `DIALECTS` holds the built-in ones by name. The stream decoder and
the body builder (`llmrt.adapters._openai_wire`) read them; the presets
(`llmrt.adapters._presets`) name them. Data only: no I/O, and nothing of
the wire code, so loading the ``openai_chat`` plugin stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from llmrt.vocabulary import JSON_OBJECT, JSON_SCHEMA, STRICT_TOOLS, TOOL_CHOICE

__all__ = ["DIALECTS", "Dialect", "ReasoningField", "UsageRule", "dialect_of"]

ReasoningField = Literal["reasoning_content", "reasoning"]
UsageRule = Literal["included", "excluded", "by-total"]

#: Every optional request feature: OpenAI's own API, and servers known only as
#: "OpenAI-compatible" (llmrt sends what OpenAI's API defines; such a server
#: answers for itself).
_ALL_FEATURES = frozenset({TOOL_CHOICE, JSON_SCHEMA, JSON_OBJECT, STRICT_TOOLS})
#: Tool choice and both response formats, without strict tool schemas.
_COMMON_FEATURES = frozenset({TOOL_CHOICE, JSON_SCHEMA, JSON_OBJECT})


@attrs.frozen
class Dialect:
    """How one family of servers speaks chat completions: data the decoder and body builder read.

    ``name`` labels failures (``"groq HTTP 429 ..."``) and picks the error
    classification (every dialect here is classified like OpenAI's).
    """

    name: str
    #: Delta fields that carry reasoning text, in priority order. Per delta the
    #: first non-empty one is read (a server that mirrors one text into two
    #: fields counts once). Typed ``thinking`` content parts are always reasoning.
    reasoning_fields: tuple[ReasoningField, ...] = ("reasoning_content", "reasoning")
    #: How ``completion_tokens`` counts reasoning: ``included`` (OpenAI's rule),
    #: ``excluded`` (reasoning is added to it), or ``by-total`` (excluded
    #: exactly when ``total_tokens`` = prompt + completion + reasoning).
    usage_reasoning: UsageRule = "included"
    #: The assistant-message field that sends a tool-calling turn's reasoning
    #: back (DeepSeek's thinking mode rejects a follow-up without it), or None.
    reasoning_back_field: str | None = None
    #: Body fields that turn thinking off for the effort ``none``, instead of
    #: ``reasoning_effort: "none"``.
    effort_none_body: Mapping[str, Any] | None = None
    #: Whether to ask for usage in the stream (``stream_options.include_usage``).
    stream_usage: bool = True
    #: The optional request features the server honours (`llmrt.vocabulary.REQUEST_FEATURES`):
    #: ``tool_choice``, ``response_format`` json_schema / json_object, ``strict`` tools.
    features: frozenset[str] = _ALL_FEATURES


DIALECTS: Mapping[str, Dialect] = {
    d.name: d
    for d in (
        Dialect(name="openai"),
        Dialect(
            name="deepseek",
            reasoning_fields=("reasoning_content",),
            reasoning_back_field="reasoning_content",
            effort_none_body={"thinking": {"type": "disabled"}},
            # JSON output is json_object only; strict tools need DeepSeek's beta endpoint.
            features=frozenset({TOOL_CHOICE, JSON_OBJECT}),
        ),
        Dialect(
            name="openrouter",
            reasoning_fields=("reasoning", "reasoning_content"),
            features=_COMMON_FEATURES,
        ),
        Dialect(name="groq", reasoning_fields=("reasoning",), features=_COMMON_FEATURES),
        Dialect(name="cerebras", reasoning_fields=("reasoning",), features=_COMMON_FEATURES),
        Dialect(name="mistral", reasoning_fields=(), features=_COMMON_FEATURES),
        Dialect(
            name="xai",
            reasoning_fields=("reasoning_content",),
            usage_reasoning="by-total",
            features=_COMMON_FEATURES,
        ),
        Dialect(
            name="together",
            reasoning_fields=("reasoning", "reasoning_content"),
            features=_COMMON_FEATURES,
        ),
        Dialect(
            name="fireworks",
            reasoning_fields=("reasoning_content", "reasoning"),
            features=_COMMON_FEATURES,
        ),
        Dialect(
            name="vllm",
            reasoning_fields=("reasoning", "reasoning_content"),
            features=_COMMON_FEATURES,
        ),
        # Ollama's OpenAI endpoint ignores tool_choice: refusing beats a silent drop.
        Dialect(
            name="ollama",
            reasoning_fields=("reasoning", "reasoning_content"),
            features=frozenset({JSON_SCHEMA, JSON_OBJECT}),
        ),
        Dialect(
            name="llama.cpp",
            reasoning_fields=("reasoning_content", "reasoning"),
            features=_COMMON_FEATURES,
        ),
        # LM Studio takes json_schema, not json_object.
        Dialect(
            name="lmstudio",
            reasoning_fields=("reasoning", "reasoning_content"),
            features=frozenset({TOOL_CHOICE, JSON_SCHEMA}),
        ),
    )
}


def dialect_of(provider_kind: str) -> Dialect:
    """The dialect named ``provider_kind``; an unknown name speaks plain OpenAI."""
    return DIALECTS.get(provider_kind) or Dialect(name=provider_kind)
