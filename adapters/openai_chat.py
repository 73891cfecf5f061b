"""`OpenAIChatAdapter`: OpenAI-compatible chat completions over httpx (SSE).

Presets:

* ``deepseek-official`` — DeepSeek's API (``reasoning_content``, cache-hit
  usage, ``402`` -> ``INSUFFICIENT_BALANCE``), key in ``DEEPSEEK_API_KEY``;
* ``openai`` — OpenAI's API, key in ``OPENAI_API_KEY``;
* ``openai-compatible`` — any server speaking chat completions (vLLM,
  llama.cpp server, Ollama, OpenRouter, a LiteLLM proxy): give ``base_url``,
  and ``api_key_env`` if the server wants a key.

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
    ErrorCode,
    GenerateOptions,
    LlmError,
    ModelContext,
    ModelInfo,
    ModelReasoningInfo,
    ProviderInfo,
    ReasoningEffortInfo,
    ResolvedModelInfo,
    ResolvedRetryPolicy,
    StreamChunk,
)

from ._classify import classify_http_error
from ._http import (
    SSEFeed,
    make_client,
    pool_counts,
    read_api_key,
    stream_events,
    translate_http_error,
)
from ._openai_wire import OpenAIStreamDecoder, build_openai_body

__all__ = ["ModelSpec", "Preset", "PRESETS", "OpenAIChatAdapter"]


@attrs.frozen
class ModelSpec:
    """What an adapter knows about one model of its endpoint."""

    id: str
    name: str | None = None
    context_window: int | None = None
    default_max_tokens: int | None = None
    #: Whether the model takes images; text-only routes get text placeholders.
    image_input: bool = False
    #: Reasoning efforts the model accepts, in display order.
    efforts: tuple[str, ...] = ()
    default_effort: str | None = None
    #: The output-cap field: OpenAI's reasoning models want ``max_completion_tokens``.
    max_tokens_field: str = "max_tokens"

    def resolved(self, provider: str) -> ResolvedModelInfo:
        reasoning = None
        if self.efforts:
            reasoning = ModelReasoningInfo(
                efforts=tuple(ReasoningEffortInfo(id=e, name=e) for e in self.efforts),
                default_effort=self.default_effort,
            )
        return ResolvedModelInfo(
            provider=provider,
            id=self.id,
            name=self.name or self.id,
            input_modalities=("text", "image") if self.image_input else ("text",),
            context=ModelContext(context_window=self.context_window)
            if self.context_window
            else None,
            default_max_tokens=self.default_max_tokens,
            reasoning=reasoning,
        )


@attrs.frozen
class Preset:
    name: str
    display_name: str
    #: Wire dialect: ``openai`` or ``deepseek``.
    kind: str
    base_url: str | None
    api_key_env: str | None
    models: tuple[ModelSpec, ...] = ()


# DeepSeek: the context limit is the one a recorded 2026 overflow error states
# (tests/wire/errors.json, "deepseek_400_context_window"); both names are served
# by the same model now. Output defaults follow DeepSeek's API reference.
_DEEPSEEK_MODELS = (
    ModelSpec(
        id="deepseek-chat",
        name="DeepSeek Chat",
        context_window=1_048_565,
        default_max_tokens=4_096,
        efforts=("none",),
    ),
    ModelSpec(
        id="deepseek-reasoner",
        name="DeepSeek Reasoner",
        context_window=1_048_565,
        default_max_tokens=32_768,
    ),
)
_OPENAI_MODELS = (
    ModelSpec(id="gpt-4.1", context_window=1_047_576, default_max_tokens=8_192, image_input=True),
    ModelSpec(
        id="gpt-4.1-mini", context_window=1_047_576, default_max_tokens=8_192, image_input=True
    ),
    ModelSpec(id="gpt-4o", context_window=128_000, default_max_tokens=4_096, image_input=True),
    ModelSpec(id="gpt-4o-mini", context_window=128_000, default_max_tokens=4_096, image_input=True),
    ModelSpec(
        id="o4-mini",
        context_window=200_000,
        default_max_tokens=16_384,
        image_input=True,
        efforts=("low", "medium", "high"),
        max_tokens_field="max_completion_tokens",
    ),
)

PRESETS: Mapping[str, Preset] = {
    "deepseek-official": Preset(
        name="deepseek-official",
        display_name="DeepSeek",
        kind="deepseek",
        base_url="https://api.deepseek.com",
        api_key_env="DEEPSEEK_API_KEY",
        models=_DEEPSEEK_MODELS,
    ),
    "openai": Preset(
        name="openai",
        display_name="OpenAI",
        kind="openai",
        base_url="https://api.openai.com/v1",
        api_key_env="OPENAI_API_KEY",
        models=_OPENAI_MODELS,
    ),
    "openai-compatible": Preset(
        name="openai-compatible",
        display_name="OpenAI-compatible server",
        kind="openai",
        base_url=None,
        api_key_env=None,
    ),
}


class _OpenAIEvents(SSEFeed):
    """``data:`` payloads in, chunks out; ``data: [DONE]`` ends the stream."""

    def __init__(self, kind: str) -> None:
        self._decoder = OpenAIStreamDecoder(provider_kind=kind)
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
    class Entry(msgspec.Struct):
        id: str

    data: list[Entry]


_model_list = msgspec.json.Decoder(_ModelList)


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
            provider_kind=self._preset.kind,
            image_input=spec.image_input,
            max_tokens_field=spec.max_tokens_field,
        )
        return stream_events(
            self._client,
            "/chat/completions",
            body=msgspec.json.encode(body),
            headers=headers,
            provider_kind=self._preset.kind,
            events=_OpenAIEvents(self._preset.kind),
        )

    def provider_info(self, provider: str) -> ProviderInfo:
        return ProviderInfo(id=provider, name=self.display_name or self._preset.display_name)

    def provider_retry_policy(self, provider: str) -> ResolvedRetryPolicy | None:
        return self.retry_policy

    async def list_models(self, provider: str) -> Sequence[ModelInfo]:
        """The endpoint's ``GET /models`` (falling back to the preset's table if it has none)."""
        headers = {"Accept": "application/json"}
        if self.api_key_env:
            headers["Authorization"] = f"Bearer {read_api_key(self.api_key_env, self.environ)}"
        try:
            response = await self._client.get("/models", headers=headers)
        except httpx.HTTPError as exc:
            raise translate_http_error(exc) from None
        if response.status_code == 404 and self._table:
            ids = list(self._table)
        elif response.status_code >= 300:
            raise LlmError.from_failure(
                classify_http_error(
                    self._preset.kind, response.status_code, response.headers, response.content
                )
            )
        else:
            try:
                ids = [entry.id for entry in _model_list.decode(response.content).data]
            except msgspec.DecodeError as exc:
                raise LlmError(ErrorCode.PROTOCOL, f"unreadable model list: {exc}") from None
        return tuple(
            ModelInfo(
                provider=provider,
                id=model,
                name=(self._table[model].name or model) if model in self._table else model,
                input_modalities=(
                    ("text", "image") if self._table[model].image_input else ("text",)
                )
                if model in self._table
                else None,
            )
            for model in ids
        )

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        spec = self._table.get(model)
        if spec is None:
            return ResolvedModelInfo(provider=provider, id=model, name=model)
        return spec.resolved(provider)

    def connection_counts(self) -> tuple[int, int] | None:
        return pool_counts(self._client)

    async def aclose(self) -> None:
        await self._client.aclose()
