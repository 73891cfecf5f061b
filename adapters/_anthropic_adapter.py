"""`AnthropicAdapter` and its model table (`llmrt.adapters.anthropic` says what it does).

Imported by that module and by `AnthropicConfig.build`, never by the plugin's
loading: it brings httpx and the Messages wire code.
"""

from __future__ import annotations

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
from llmrt.vocabulary import JSON_SCHEMA, STRICT_TOOLS, TOOL_CHOICE

from ._anthropic_wire import AnthropicStreamDecoder, build_anthropic_body
from ._http import (
    SSEFeed,
    read_api_key,
    stream_events,
)
from ._http_adapter import HttpAdapter
from ._models import ModelSpec

__all__ = ["ANTHROPIC_MODELS", "API_VERSION", "THINKING_BUDGETS", "AnthropicAdapter"]

API_VERSION = "2023-06-01"
#: Extended-thinking token budgets of the reasoning efforts.
THINKING_BUDGETS: Mapping[str, int] = {"low": 2_048, "medium": 8_192, "high": 24_576}
_EFFORTS = tuple(THINKING_BUDGETS)
#: The Messages API has no JSON-object mode, only JSON schemas.
_FEATURES = frozenset({TOOL_CHOICE, JSON_SCHEMA, STRICT_TOOLS})

ANTHROPIC_MODELS = (
    ModelSpec(
        id="claude-opus-4-1",
        name="Claude Opus 4.1",
        context_window=200_000,
        default_max_tokens=32_000,
        image_input=True,
        efforts=_EFFORTS,
    ),
    ModelSpec(
        id="claude-sonnet-4-5",
        name="Claude Sonnet 4.5",
        context_window=200_000,
        default_max_tokens=32_000,
        image_input=True,
        efforts=_EFFORTS,
    ),
    ModelSpec(
        id="claude-haiku-4-5",
        name="Claude Haiku 4.5",
        context_window=200_000,
        default_max_tokens=32_000,
        image_input=True,
        efforts=_EFFORTS,
    ),
)


class _AnthropicEvents(SSEFeed):
    """Named SSE events in, chunks out; ``message_stop`` ends the stream."""

    def __init__(self) -> None:
        self._decoder = AnthropicStreamDecoder()
        super().__init__(self._decoder)

    def feed(self, data: bytes) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        decoder = self._decoder
        for event in self._parser.feed(data):
            out += decoder.push(event.event, event.data)
            if decoder.finished:
                break
        return out


@attrs.define(eq=False)
class AnthropicAdapter(HttpAdapter):
    """Streams Anthropic Messages (see the module docstring).

    ``models`` adds to (or overrides) the built-in table; models it does not
    know get ``default_max_tokens`` (Anthropic requires an output cap).
    """

    base_url: str = "https://api.anthropic.com"
    api_key_env: str = "ANTHROPIC_API_KEY"
    models: Sequence[ModelSpec] = ()
    default_max_tokens: int = 4_096
    display_name: str = "Anthropic"
    _table: dict[str, ModelSpec] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.base_url = self._open_client(self.base_url)
        self._table = {spec.id: spec for spec in (*ANTHROPIC_MODELS, *self.models)}

    def _headers(self, accept: str) -> dict[str, str]:
        return {
            "x-api-key": read_api_key(self.api_key_env, self.environ),
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
            "accept": accept,
        }

    def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        headers = self._headers("text/event-stream")  # credentials before any I/O
        spec = self._table.get(options.model) or ModelSpec(id=options.model)
        budget = THINKING_BUDGETS.get(options.reasoning_effort or "")
        body = build_anthropic_body(
            options,
            image_input=spec.image_input,
            default_max_tokens=spec.default_max_tokens or self.default_max_tokens,
            thinking_budget_tokens=budget,
        )
        return stream_events(
            self._client,
            "/v1/messages",
            body=msgspec.json.encode(body),
            headers=headers,
            provider_kind="anthropic",
            events=_AnthropicEvents(),
        )

    def request_features(self, provider: str, model: str) -> frozenset[str]:
        """Tool choice, JSON-schema output (``output_config.format``), strict tools."""
        return _FEATURES

    def provider_info(self, provider: str) -> ProviderInfo:
        return ProviderInfo(id=provider, name=self.display_name, price_provider="anthropic")

    async def list_models(self, provider: str) -> Sequence[ModelInfo]:
        """Anthropic's ``GET /v1/models``; the built-in table where the endpoint has none."""
        return await self._fetch_models(
            "/v1/models",
            provider=provider,
            provider_kind="anthropic",
            headers=self._headers("application/json"),
            table=self._table,
            params={"limit": "1000"},
            default_modalities=("text", "image"),
        )

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        spec = self._table.get(model) or ModelSpec(
            id=model, default_max_tokens=self.default_max_tokens
        )
        return spec.resolved(provider)
