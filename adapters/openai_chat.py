"""`OpenAIChatAdapter`: OpenAI-compatible chat completions over httpx (SSE).

Presets (data in `llmrt.adapters._presets`; each names a base URL, a key
variable, a wire `Dialect` and a model table where the provider documents one):

* hosted: ``deepseek-official``, ``openai``, ``openrouter``, ``groq``,
  ``cerebras``, ``mistral``, ``xai``, ``together``, ``fireworks``;
* local servers, no key: ``vllm``, ``ollama``, ``llama.cpp``, ``lmstudio``;
* ``openai-compatible`` — any other server speaking chat completions (a
  LiteLLM proxy, say): give ``base_url``, and ``api_key_env`` if it wants a key.

See ``docs/adapters.md`` for each preset's reasoning form and usage rule.

One adapter instance holds one ``httpx.AsyncClient`` (one connection pool)
for its endpoint; `aclose` closes it.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping, Sequence

import attrs
import httpx
import msgspec

from llmrt import (
    Adapter,
    GenerateOptions,
    ModelInfo,
    ProviderInfo,
    ResolvedModelInfo,
    ResolvedRetryPolicy,
    StreamChunk,
)

from ._http import (
    SSEFeed,
    make_client,
    read_api_key,
    stream_events,
)
from ._models import ModelSpec, fetch_models
from ._openai_wire import Dialect, OpenAIStreamDecoder, build_openai_body
from ._presets import PRESETS, Preset

__all__ = ["ModelSpec", "Preset", "PRESETS", "OpenAIChatAdapter"]


class _OpenAIEvents(SSEFeed):
    """``data:`` payloads in, chunks out; ``data: [DONE]`` ends the stream."""

    def __init__(self, dialect: Dialect) -> None:
        self._decoder = OpenAIStreamDecoder(dialect=dialect)
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
class OpenAIChatAdapter(Adapter):
    """Streams OpenAI-compatible chat completions (see the module docstring).

    ``models`` adds to (or overrides) the preset's model table; ``transport``
    replaces httpx's (tests use ``httpx.MockTransport``); ``environ`` replaces
    ``os.environ`` for the key lookup.
    """

    preset: str = "openai-compatible"
    base_url: str | None = None
    api_key_env: str | None = None
    models: Sequence[ModelSpec] = ()
    display_name: str | None = None
    retry_policy: ResolvedRetryPolicy | None = None
    http2: bool | None = None
    timeout: httpx.Timeout | None = None
    limits: httpx.Limits | None = None
    transport: httpx.AsyncBaseTransport | None = attrs.field(default=None, repr=False)
    #: Certificate checks for https (e.g. a private CA); None: the system's defaults.
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, repr=False)
    environ: Mapping[str, str] | None = attrs.field(default=None, repr=False)
    _preset: Preset = attrs.field(init=False, repr=False)
    _table: dict[str, ModelSpec] = attrs.field(init=False, repr=False)
    _client: httpx.AsyncClient = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        preset = PRESETS.get(self.preset)
        if preset is None:
            raise ValueError(f"unknown preset {self.preset!r}; known: {', '.join(PRESETS)}")
        self._preset = preset
        self.base_url = (self.base_url or preset.base_url or "").rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"preset {self.preset!r} needs a base_url (http:// or https://)")
        self.api_key_env = self.api_key_env or preset.api_key_env
        self._table = {spec.id: spec for spec in (*preset.models, *self.models)}
        self._client = make_client(
            self.base_url,
            timeout=self.timeout,
            limits=self.limits,
            http2=self.http2,
            transport=self.transport,
            ssl_context=self.ssl_context,
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key_env:
            headers["Authorization"] = f"Bearer {read_api_key(self.api_key_env, self.environ)}"
        return headers

    def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        headers = self._headers()  # credentials are checked before any I/O
        spec = self._table.get(options.model) or ModelSpec(id=options.model)
        body = build_openai_body(
            options,
            dialect=self._preset.dialect,
            image_input=spec.image_input,
            max_tokens_field=spec.max_tokens_field,
        )
        return stream_events(
            self._client,
            "/chat/completions",
            body=msgspec.json.encode(body),
            headers=headers,
            provider_kind=self._preset.kind,
            events=_OpenAIEvents(self._preset.dialect),
        )

    def provider_info(self, provider: str) -> ProviderInfo:
        return ProviderInfo(id=provider, name=self.display_name or self._preset.display_name)

    def provider_retry_policy(self, provider: str) -> ResolvedRetryPolicy | None:
        return self.retry_policy

    async def list_models(self, provider: str) -> Sequence[ModelInfo]:
        """The endpoint's ``GET /models``; the preset's table where the endpoint has none."""
        headers = {"Accept": "application/json"}
        if self.api_key_env:
            headers["Authorization"] = f"Bearer {read_api_key(self.api_key_env, self.environ)}"
        return await fetch_models(
            self._client,
            "/models",
            provider=provider,
            provider_kind=self._preset.kind,
            headers=headers,
            table=self._table,
        )

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        spec = self._table.get(model)
        if spec is None:
            return ResolvedModelInfo(provider=provider, id=model, name=model)
        return spec.resolved(provider)

    async def aclose(self) -> None:
        await self._client.aclose()
