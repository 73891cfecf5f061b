"""`OpenAIChatAdapter` and `EndpointDiscovery` (`llmrt.adapters.openai_chat` says what they do).

Imported by that module and, when one is built, by the plugin
(`llmrt.adapters._openai_chat_plugin`), never by the plugin's loading: it
brings httpx and the chat-completions wire code.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Final

import attrs
import httpx
import msgspec
import trio

from llmrt import (
    ErrorCode,
    GenerateOptions,
    LlmError,
    ModelInfo,
    ResolvedModelInfo,
    StreamChunk,
)
from llmrt._egress import base_url_problem
from llmrt.adapter import (
    DiscoveredModel,
    ModelDiscoveryRequest,
    ProviderInfo,
    Redactor,
)

from ._client_pool import ClientPool
from ._http import (
    SSEFeed,
    read_api_key,
    stream_events,
)
from ._http_adapter import HttpAdapter
from ._models import (
    ModelEntry,
    ModelSpec,
    decode_data_list,
    decode_ollama_tags,
    fetch_entries,
)
from ._openai_wire import Dialect, OpenAIStreamDecoder, build_openai_body
from ._outbound import check_destination, relayable
from ._presets import DISCOVERY_APIS, Preset, find_preset, unknown_preset

__all__ = [
    "DISCOVERY_TIMEOUT",
    "DiscoveryEndpoint",
    "EndpointDiscovery",
    "OpenAIChatAdapter",
]


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
class OpenAIChatAdapter(HttpAdapter):
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
    _preset: Preset = attrs.field(init=False, repr=False)
    _table: dict[str, ModelSpec] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        preset = find_preset(self.preset)
        if preset is None:
            raise ValueError(unknown_preset(self.preset))
        self._preset = preset
        self.base_url = self._open_client(
            self.base_url or preset.base_url or "",
            message=f"preset {self.preset!r} needs a base_url (http:// or https://)",
        )
        self.api_key_env = self.api_key_env or preset.api_key_env
        self._table = {spec.id: spec for spec in (*preset.models, *self.models)}

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

    def request_features(self, provider: str, model: str) -> frozenset[str]:
        """What the preset's dialect honours (`Dialect.features`)."""
        return self._preset.dialect.features

    def provider_info(self, provider: str) -> ProviderInfo:
        return ProviderInfo(
            id=provider,
            name=self.display_name or self._preset.display_name,
            price_provider=self._preset.price_provider,
        )

    async def list_models(self, provider: str) -> Sequence[ModelInfo]:
        """The endpoint's ``GET /models``; the preset's table where the endpoint has none."""
        headers = {"Accept": "application/json"}
        if self.api_key_env:
            headers["Authorization"] = f"Bearer {read_api_key(self.api_key_env, self.environ)}"
        return await self._fetch_models(
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


# ---- model discovery ---------------------------------------------------------------------

#: Seconds one interrogation may take, connect to last byte.
DISCOVERY_TIMEOUT: Final = 15.0


@attrs.frozen
class DiscoveryEndpoint:
    """A configured endpoint discovery may interrogate: a route's, or a namespace's default."""

    base_url: str
    api_key_env: str | None = None
    #: The list to read (one of `DISCOVERY_APIS`); None: the namespace's.
    api: str | None = None


@attrs.define(eq=False)
class EndpointDiscovery:
    """The ``discover`` callable of one settings namespace (``register_model_discovery``).

    A request naming a configured ``provider`` (and no ``baseURL``) asks that
    route's endpoint, with the key of its ``api_key_env``; otherwise the
    request's ``baseURL`` (else ``default``) is asked, with the request's
    ``apiKey`` if any. ``api`` (the request's, else the endpoint's, else
    this namespace's) picks the list. The key is sent as ``Authorization:
    Bearer`` and removed from every failure message.

    One interrogation is one ``GET``, bounded by `DISCOVERY_TIMEOUT` seconds
    and `llmrt.adapters._models.MAX_MODEL_LIST` bytes, on a connection kept
    per endpoint between interrogations (`ClientPool`; `aclose` closes them,
    as the runtime does when the offer is withdrawn). Raises `LlmError`:
    ``INVALID_REQUEST`` (no endpoint, an unknown ``api``, a URL that is not
    http(s)), ``TIMEOUT``, ``NETWORK``, ``PROTOCOL`` or the endpoint's
    classified error status.
    """

    api: str = "openai"
    routes: Mapping[str, DiscoveryEndpoint] = attrs.field(factory=dict)
    default: DiscoveryEndpoint | None = None
    timeout: float = DISCOVERY_TIMEOUT
    transport: httpx.AsyncBaseTransport | None = attrs.field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, repr=False)
    environ: Mapping[str, str] | None = attrs.field(default=None, repr=False)
    _pool: ClientPool = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.api not in DISCOVERY_APIS:
            raise ValueError(f"unknown discovery api {self.api!r}; known: {DISCOVERY_APIS}")
        if not 0 < self.timeout < math.inf:
            raise ValueError("timeout must be a positive, finite number of seconds")
        self._pool = ClientPool(
            httpx.Timeout(self.timeout), transport=self.transport, ssl_context=self.ssl_context
        )

    async def aclose(self) -> None:
        """Close the connections kept to the endpoints asked. A checkpoint."""
        await self._pool.aclose()

    async def __aenter__(self) -> EndpointDiscovery:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _endpoint(self, request: ModelDiscoveryRequest) -> tuple[str, str, str | None]:
        """(base URL, api, key) of ``request``; reads a configured key only here."""
        configured = None
        if request.base_url is None:
            configured = (
                self.routes.get(request.provider) if request.provider is not None else None
            ) or self.default
        if configured is not None:
            base_url, api = configured.base_url, request.api or configured.api or self.api
            key = request.api_key
            if key is None and configured.api_key_env:
                key = read_api_key(configured.api_key_env, self.environ)
        elif request.base_url is not None:
            problem = base_url_problem(request.base_url)
            if problem is not None:
                raise LlmError(ErrorCode.INVALID_REQUEST, f"baseURL: {problem}")
            base_url, api, key = request.base_url, request.api or self.api, request.api_key
        else:
            named = f" {request.provider!r}" if request.provider is not None else ""
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                f"discovery needs a baseURL: the provider{named} is not configured here",
            )
        if api not in DISCOVERY_APIS:
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                f"unknown discovery api {api[:40]!r}; known: {', '.join(DISCOVERY_APIS)}",
            )
        if not base_url.startswith(("http://", "https://")):
            raise LlmError(ErrorCode.INVALID_REQUEST, "baseURL must start with http:// or https://")
        return base_url.rstrip("/"), api, key

    async def __call__(self, request: ModelDiscoveryRequest) -> tuple[DiscoveredModel, ...]:
        redactor = Redactor((request.api_key,))
        # A client-named endpoint (``baseURL``), not a configured one: it may be
        # anywhere (`llmrt._egress`), and its error bodies are never relayed.
        named = request.base_url is not None
        try:
            base_url, api, key = self._endpoint(request)
            redactor = redactor.with_secrets((key,))
            if named:
                with trio.move_on_after(self.timeout) as scope:
                    await check_destination(base_url)
                if scope.cancelled_caught:
                    raise LlmError(ErrorCode.TIMEOUT, "the endpoint's host did not resolve in time")
            return await self._ask(base_url, api, key)
        except LlmError as exc:
            raise redactor.error(relayable(exc) if named else exc) from None

    async def _ask(self, base_url: str, api: str, key: str | None) -> tuple[DiscoveredModel, ...]:
        headers = {"Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        if api == "ollama":
            # /api/tags lives at the server's root, beside the /v1 of its OpenAI API.
            base_url = base_url.removesuffix("/v1")
            path, decode = "/api/tags", decode_ollama_tags
        else:
            path, decode = "/models", decode_data_list
        entries: Sequence[ModelEntry] = ()
        async with self._pool.client(base_url) as client:
            with trio.move_on_after(self.timeout) as scope:
                entries = await fetch_entries(
                    client, path, provider_kind=api, headers=headers, decode=decode
                )
        if scope.cancelled_caught:
            raise LlmError(
                ErrorCode.TIMEOUT, f"the endpoint did not list its models in {self.timeout:g} s"
            )
        return tuple(
            DiscoveredModel(id=entry.id, name=entry.display_name or entry.name)
            for entry in entries
            if entry.id
        )
