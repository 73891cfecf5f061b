"""`AnthropicAdapter`: the Anthropic Messages API over httpx (SSE).

Thinking blocks come back as reasoning blocks; their signatures travel as
per-block replay state and go back to Anthropic on later requests (the
runtime passes replay state only to the adapter instance that made it).
A reasoning effort (``low`` / ``medium`` / ``high``) turns extended thinking
on with a matching token budget. One instance holds one
``httpx.AsyncClient``; `aclose` closes it.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping, Sequence

import attrs
import httpx
import msgspec

from llmrt import (
    Adapter,
    ErrorCode,
    GenerateOptions,
    LlmError,
    ModelInfo,
    ProviderInfo,
    ResolvedModelInfo,
    ResolvedRetryPolicy,
    StreamChunk,
)

from ._anthropic_wire import AnthropicStreamDecoder, build_anthropic_body
from ._classify import classify_http_error
from ._http import (
    SSEFeed,
    make_client,
    pool_counts,
    read_api_key,
    stream_events,
    translate_http_error,
)
from .openai_chat import ModelSpec

__all__ = ["AnthropicAdapter", "ANTHROPIC_MODELS", "THINKING_BUDGETS"]

API_VERSION = "2023-06-01"
#: Extended-thinking token budgets of the reasoning efforts.
THINKING_BUDGETS: Mapping[str, int] = {"low": 2_048, "medium": 8_192, "high": 24_576}
_EFFORTS = tuple(THINKING_BUDGETS)

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


class _ModelList(msgspec.Struct):
    class Entry(msgspec.Struct):
        id: str
        display_name: str | None = None

    data: list[Entry]


_model_list = msgspec.json.Decoder(_ModelList)


@attrs.define(eq=False)
class AnthropicAdapter(Adapter):
    """Streams Anthropic Messages (see the module docstring).

    ``models`` adds to (or overrides) the built-in table; models it does not
    know get ``default_max_tokens`` (Anthropic requires an output cap).
    """

    base_url: str = "https://api.anthropic.com"
    api_key_env: str = "ANTHROPIC_API_KEY"
    models: Sequence[ModelSpec] = ()
    default_max_tokens: int = 4_096
    display_name: str = "Anthropic"
    retry_policy: ResolvedRetryPolicy | None = None
    http2: bool | None = None
    timeout: httpx.Timeout | None = None
    limits: httpx.Limits | None = None
    transport: httpx.AsyncBaseTransport | None = attrs.field(default=None, repr=False)
    #: Certificate checks for https (e.g. a private CA); None: the system's defaults.
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, repr=False)
    environ: Mapping[str, str] | None = attrs.field(default=None, repr=False)
    _table: dict[str, ModelSpec] = attrs.field(init=False, repr=False)
    _client: httpx.AsyncClient = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        self._table = {spec.id: spec for spec in (*ANTHROPIC_MODELS, *self.models)}
        self._client = make_client(
            self.base_url,
            timeout=self.timeout,
            limits=self.limits,
            http2=self.http2,
            transport=self.transport,
            ssl_context=self.ssl_context,
        )

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

    def provider_info(self, provider: str) -> ProviderInfo:
        return ProviderInfo(id=provider, name=self.display_name)

    def provider_retry_policy(self, provider: str) -> ResolvedRetryPolicy | None:
        return self.retry_policy

    async def list_models(self, provider: str) -> Sequence[ModelInfo]:
        """Anthropic's ``GET /v1/models``."""
        try:
            response = await self._client.get(
                "/v1/models", headers=self._headers("application/json")
            )
        except httpx.HTTPError as exc:
            raise translate_http_error(exc) from None
        if response.status_code >= 300:
            raise LlmError.from_failure(
                classify_http_error(
                    "anthropic", response.status_code, response.headers, response.content
                )
            )
        try:
            entries = _model_list.decode(response.content).data
        except msgspec.DecodeError as exc:
            raise LlmError(ErrorCode.PROTOCOL, f"unreadable model list: {exc}") from None
        return tuple(
            ModelInfo(
                provider=provider,
                id=entry.id,
                name=entry.display_name or entry.id,
                input_modalities=("text", "image"),
            )
            for entry in entries
        )

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        spec = self._table.get(model) or ModelSpec(
            id=model, default_max_tokens=self.default_max_tokens
        )
        return spec.resolved(provider)

    def connection_counts(self) -> tuple[int, int] | None:
        return pool_counts(self._client)

    async def aclose(self) -> None:
        await self._client.aclose()
