"""The ``openai_responses`` plugin (an ``llmrt.adapters`` entry point): its keys and its route.

Every ``llmrt`` command loads every installed plugin, so this module imports
only the plugin interface; the adapter, with httpx and the wire code, is
imported when `OpenAIResponsesConfig.build` first builds one (its `adapter_class`).
"""

from __future__ import annotations

from typing import ClassVar

from .plugin import AdapterPlugin, Detected, HttpAdapterConfig

__all__ = ["PLUGIN", "OpenAIResponsesConfig"]


class OpenAIResponsesConfig(HttpAdapterConfig, tag="openai_responses", frozen=True):
    """A ``[[provider]]`` entry with ``adapter = "openai_responses"``."""

    default_key_env: ClassVar[str | None] = "OPENAI_API_KEY"
    fallback_model: ClassVar[str | None] = "gpt-5-mini"
    adapter_class: ClassVar[str | None] = (
        "llmrt.adapters._openai_responses_adapter:OpenAIResponsesAdapter"
    )


PLUGIN = AdapterPlugin(
    config=OpenAIResponsesConfig,
    summary="OpenAI Responses API",
    detect=(
        # The same key also serves chat completions, on the ``openai`` route
        # (the openai_chat plugin's): that route stays on chat completions.
        Detected("OPENAI_API_KEY", "openai-responses", OpenAIResponsesConfig(), rank=30),
    ),
)
