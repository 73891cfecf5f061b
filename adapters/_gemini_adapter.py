"""`GeminiAdapter` and its model table (`llmrt.adapters.gemini` says what it does).

Imported by that module and by `GeminiConfig.build`, never by the plugin's
loading: it brings httpx and the Gemini wire code.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence

import attrs
import msgspec

from llmrt import (
    GenerateOptions,
    ModelInfo,
    ResolvedModelInfo,
    StreamChunk,
)
from llmrt.adapter import ProviderInfo
from llmrt.vocabulary import JSON_OBJECT, JSON_SCHEMA, TOOL_CHOICE

from ._gemini_wire import GeminiStreamDecoder, build_gemini_body
from ._http import (
    SSEFeed,
    read_api_key,
    stream_events,
)
from ._http_adapter import HttpAdapter
from ._models import ModelEntry, ModelSpec

__all__ = ["GEMINI_MODELS", "THINKING_BUDGETS", "GeminiAdapter"]

#: Thinking budgets (tokens) of the reasoning efforts; ``none`` turns thinking off.
THINKING_BUDGETS: Mapping[str, int] = {"none": 0, "low": 1_024, "medium": 8_192, "high": 24_576}
_FEATURES = frozenset({TOOL_CHOICE, JSON_SCHEMA, JSON_OBJECT})
_ON = ("low", "medium", "high")
_ANY = ("none", *_ON)

# Limits from Google's model pages: 1,048,576 input tokens; 65,536 output
# tokens for the 2.5 and 3 families (8,192 for 2.0 Flash). Pro models cannot
# turn thinking off, so they have no ``none``.
GEMINI_MODELS = (
    ModelSpec(
        id="gemini-2.5-pro",
        name="Gemini 2.5 Pro",
        context_window=1_048_576,
        default_max_tokens=65_536,
        image_input=True,
        efforts=_ON,
    ),
    ModelSpec(
        id="gemini-2.5-flash",
        name="Gemini 2.5 Flash",
        context_window=1_048_576,
        default_max_tokens=65_536,
        image_input=True,
        efforts=_ANY,
    ),
    ModelSpec(
        id="gemini-2.5-flash-lite",
        name="Gemini 2.5 Flash-Lite",
        context_window=1_048_576,
        default_max_tokens=65_536,
        image_input=True,
        efforts=_ANY,
    ),
    ModelSpec(
        id="gemini-2.0-flash",
        name="Gemini 2.0 Flash",
        context_window=1_048_576,
        default_max_tokens=8_192,
        image_input=True,
    ),
    ModelSpec(
        id="gemini-3-pro-preview",
        name="Gemini 3 Pro (preview)",
        context_window=1_048_576,
        default_max_tokens=65_536,
        image_input=True,
        efforts=_ON,
    ),
)


class _GeminiEvents(SSEFeed):
    """``data:`` payloads in, chunks out; the body's end ends the stream (no marker)."""

    def __init__(self) -> None:
        self._decoder = GeminiStreamDecoder()
        super().__init__(self._decoder)

    def feed(self, data: bytes) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        decoder = self._decoder
        for payload in self._parser.feed_data(data):
            out += decoder.push(payload)
            if decoder.finished:
                break
        return out


class _ModelList(msgspec.Struct):
    class Entry(msgspec.Struct, rename="camel"):
        name: str
        display_name: str | None = None
        supported_generation_methods: list[str] | None = None

    models: list[Entry] = msgspec.field(default_factory=list)


_model_list = msgspec.json.Decoder(_ModelList)


def _decode_models(body: bytes) -> Sequence[ModelEntry]:
    """Gemini's ``{"models": [{"name": "models/<id>", ...}]}``, generating models only."""
    return [
        ModelEntry(id=entry.name.removeprefix("models/"), display_name=entry.display_name)
        for entry in _model_list.decode(body).models
        if entry.supported_generation_methods is None
        or "generateContent" in entry.supported_generation_methods
    ]


@attrs.define(eq=False)
class GeminiAdapter(HttpAdapter):
    """Streams Gemini ``generateContent`` (see the module docstring).

    ``models`` adds to (or overrides) the built-in table; ``api_key_env``
    names the key variable (``GEMINI_API_KEY``; ``GOOGLE_API_KEY`` is the
    other name Google's tools read). ``transport`` replaces httpx's (tests),
    ``environ`` replaces ``os.environ`` for the key lookup.
    """

    base_url: str = "https://generativelanguage.googleapis.com"
    api_key_env: str = "GEMINI_API_KEY"
    api_version: str = "v1beta"
    models: Sequence[ModelSpec] = ()
    display_name: str = "Google Gemini"
    _table: dict[str, ModelSpec] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.base_url = self._open_client(self.base_url)
        self._table = {spec.id: spec for spec in (*GEMINI_MODELS, *self.models)}

    def _headers(self, accept: str) -> dict[str, str]:
        return {
            "x-goog-api-key": read_api_key(self.api_key_env, self.environ),
            "content-type": "application/json",
            "accept": accept,
        }

    def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        headers = self._headers("text/event-stream")  # credentials before any I/O
        model = options.model.removeprefix("models/")
        spec = self._table.get(model) or ModelSpec(id=model)
        effort = options.reasoning_effort
        body = build_gemini_body(
            options,
            image_input=spec.image_input,
            thinking=bool(spec.efforts),
            thinking_budget=THINKING_BUDGETS.get(effort) if effort is not None else None,
            skip_signature=model.startswith("gemini-3"),
        )
        quoted = urllib.parse.quote(model, safe="-._~")
        return stream_events(
            self._client,
            f"/{self.api_version}/models/{quoted}:streamGenerateContent?alt=sse",
            body=msgspec.json.encode(body),
            headers=headers,
            provider_kind="gemini",
            events=_GeminiEvents(),
        )

    def request_features(self, provider: str, model: str) -> frozenset[str]:
        """Tool choice and both structured outputs; Gemini has no strict tool schemas."""
        return _FEATURES

    def provider_info(self, provider: str) -> ProviderInfo:
        return ProviderInfo(id=provider, name=self.display_name, price_provider="google")

    async def list_models(self, provider: str) -> Sequence[ModelInfo]:
        """Gemini's ``GET /v1beta/models`` (one page of up to 1,000), else the built-in table."""
        return await self._fetch_models(
            f"/{self.api_version}/models",
            provider=provider,
            provider_kind="gemini",
            headers=self._headers("application/json"),
            table=self._table,
            decode=_decode_models,
            params={"pageSize": "1000"},
            default_modalities=("text", "image"),
        )

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        model = model.removeprefix("models/")
        spec = self._table.get(model) or ModelSpec(id=model)
        return spec.resolved(provider)
