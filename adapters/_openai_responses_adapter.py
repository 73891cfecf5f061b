"""`OpenAIResponsesAdapter` and its model table (`llmrt.adapters.openai_responses` says more).

Imported by that module and by `OpenAIResponsesConfig.build`, never by the
plugin's loading: it brings httpx and the Responses wire code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import attrs
import msgspec

from llmrt import (
    GenerateOptions,
    ModelInfo,
    ResolvedModelInfo,
    StreamChunk,
)
from llmrt.adapter import ProviderInfo
from llmrt.vocabulary import REQUEST_FEATURES

from ._http import (
    SSEFeed,
    read_api_key,
    stream_events,
)
from ._http_adapter import HttpAdapter
from ._models import ModelSpec
from ._responses_wire import ResponsesStreamDecoder, build_responses_body

__all__ = ["RESPONSES_MODELS", "OpenAIResponsesAdapter"]

_O_EFFORTS = ("low", "medium", "high")
_GPT5_EFFORTS = ("minimal", "low", "medium", "high")

# Limits from OpenAI's model pages. Reasoning models (a non-empty effort list)
# get summaries and encrypted reasoning.
RESPONSES_MODELS = (
    ModelSpec(
        id="gpt-5",
        name="GPT-5",
        context_window=400_000,
        default_max_tokens=32_768,
        image_input=True,
        efforts=_GPT5_EFFORTS,
        default_effort="medium",
    ),
    ModelSpec(
        id="gpt-5-mini",
        name="GPT-5 mini",
        context_window=400_000,
        default_max_tokens=32_768,
        image_input=True,
        efforts=_GPT5_EFFORTS,
        default_effort="medium",
    ),
    ModelSpec(
        id="o3",
        context_window=200_000,
        default_max_tokens=32_768,
        image_input=True,
        efforts=_O_EFFORTS,
        default_effort="medium",
    ),
    ModelSpec(
        id="o4-mini",
        context_window=200_000,
        default_max_tokens=16_384,
        image_input=True,
        efforts=_O_EFFORTS,
        default_effort="medium",
    ),
    ModelSpec(id="gpt-4.1", context_window=1_047_576, default_max_tokens=8_192, image_input=True),
    ModelSpec(
        id="gpt-4.1-mini", context_window=1_047_576, default_max_tokens=8_192, image_input=True
    ),
)


class _ResponsesEvents(SSEFeed):
    """``data:`` payloads in, chunks out; a terminal event ends the stream."""

    def __init__(self) -> None:
        self._decoder = ResponsesStreamDecoder()
        super().__init__(self._decoder)

    def feed(self, data: bytes) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        decoder = self._decoder
        for payload in self._parser.feed_data(data):
            out += decoder.push(payload)
            if decoder.finished:
                break
        return out


@attrs.define(eq=False)
class OpenAIResponsesAdapter(HttpAdapter):
    """Streams OpenAI Responses (see the module docstring).

    ``base_url`` ends in ``/v1`` (the adapter posts to ``{base_url}/responses``
    and lists ``{base_url}/models``); ``models`` adds to (or overrides) the
    built-in table.
    """

    base_url: str = "https://api.openai.com/v1"
    api_key_env: str = "OPENAI_API_KEY"
    models: Sequence[ModelSpec] = ()
    display_name: str = "OpenAI (Responses API)"
    _table: dict[str, ModelSpec] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.base_url = self._open_client(self.base_url)
        self._table = {spec.id: spec for spec in (*RESPONSES_MODELS, *self.models)}

    def _headers(self, accept: str) -> dict[str, str]:
        key = read_api_key(self.api_key_env, self.environ)
        return {
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Accept": accept,
        }

    def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        headers = self._headers("text/event-stream")  # credentials before any I/O
        spec = self._table.get(options.model) or ModelSpec(id=options.model)
        body = build_responses_body(
            options, image_input=spec.image_input, reasoning=bool(spec.efforts)
        )
        return stream_events(
            self._client,
            "/responses",
            body=msgspec.json.encode(body),
            headers=headers,
            provider_kind="openai",
            events=_ResponsesEvents(),
        )

    def request_features(self, provider: str, model: str) -> frozenset[str]:
        """All of them: tool choice, both structured outputs, strict tools."""
        return REQUEST_FEATURES

    def provider_info(self, provider: str) -> ProviderInfo:
        return ProviderInfo(id=provider, name=self.display_name, price_provider="openai")

    async def list_models(self, provider: str) -> Sequence[ModelInfo]:
        """The endpoint's ``GET /models``; the built-in table where it has none."""
        return await self._fetch_models(
            "/models",
            provider=provider,
            provider_kind="openai",
            headers=self._headers("application/json"),
            table=self._table,
        )

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        spec = self._table.get(model) or ModelSpec(id=model)
        return spec.resolved(provider)
