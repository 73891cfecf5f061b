"""`llmrt.aio.open_gateway_client`: the gateway's websocket client for asyncio programs.

The trio client (`llmrt.actors.gateway.client`) runs in a trio run of its own
beside the loop, as a runtime's does (`_host.py`); calls are `llmrt.aio.Call`s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs

from llmrt._chunks import StreamChunk
from llmrt._completion import Completion
from llmrt._request import (
    ConfigurableProvider,
    DiscoveredModel,
    GenerateOptions,
    ModelDiscoveryRequest,
    ModelInfo,
    ProviderInfo,
    ResolvedModelInfo,
)
from llmrt._retry import ResolvedRetryPolicy, RetryEvent
from llmrt.actors._misuse import RETRY_FORM, STREAM_FORM
from llmrt.actors._statistics import RuntimeStatistics
from llmrt.actors.gateway._protocol import HelloFrame
from llmrt.actors.gateway.client import GatewayClient as TrioGatewayClient
from llmrt.actors.gateway.client import open_gateway_client as open_trio_gateway_client

from ._call import Call
from ._host import HostMode, TrioHost, open_host

__all__ = ["GatewayClient", "open_gateway_client"]


@attrs.define(eq=False)
class GatewayClient:
    """`llmrt.actors.gateway.client.GatewayClient` from asyncio."""

    _host: TrioHost
    _client: TrioGatewayClient
    _call_buffer: int

    @property
    def hello(self) -> HelloFrame:
        return self._client.hello

    def stream(
        self, options: GenerateOptions, *, traceparent: str | None = None
    ) -> Call[StreamChunk]:
        source = self._client.stream(options, traceparent=traceparent)
        return Call(self._host, source, options, form=STREAM_FORM, limit=self._call_buffer)

    def stream_with_retry(
        self,
        options: GenerateOptions,
        *,
        policy: ResolvedRetryPolicy | None = None,
        traceparent: str | None = None,
    ) -> Call[RetryEvent]:
        source = self._client.stream_with_retry(options, policy=policy, traceparent=traceparent)
        return Call(self._host, source, options, form=RETRY_FORM, limit=self._call_buffer)

    async def complete(
        self, options: GenerateOptions, *, traceparent: str | None = None
    ) -> Completion:
        return await self._host.run(lambda: self._client.complete(options, traceparent=traceparent))

    async def complete_with_retry(
        self,
        options: GenerateOptions,
        *,
        policy: ResolvedRetryPolicy | None = None,
        traceparent: str | None = None,
    ) -> Completion:
        return await self._host.run(
            lambda: self._client.complete_with_retry(
                options, policy=policy, traceparent=traceparent
            )
        )

    async def list_providers(self) -> tuple[ProviderInfo, ...]:
        return await self._host.run(self._client.list_providers)

    async def list_models(self, provider: str) -> tuple[ModelInfo, ...]:
        return await self._host.run(self._client.list_models, provider)

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        return await self._host.run(self._client.resolve_model, provider, model)

    async def list_configurable_providers(self) -> tuple[ConfigurableProvider, ...]:
        return await self._host.run(self._client.list_configurable_providers)

    async def discover_models(
        self, settings_ns: str, request: ModelDiscoveryRequest | None = None
    ) -> tuple[DiscoveredModel, ...]:
        return await self._host.run(self._client.discover_models, settings_ns, request)

    async def stats(self) -> RuntimeStatistics:
        return await self._host.run(self._client.stats)


@asynccontextmanager
async def open_gateway_client(
    url: str,
    *,
    token: str | None = None,
    msgpack: bool = False,
    call_buffer: int = 256,
    max_frame_bytes: int = 16 << 20,
    connect_timeout: float = 10.0,
    trio_host: HostMode | None = None,
) -> AsyncIterator[GatewayClient]:
    """Connect to the gateway at ``url`` from asyncio; the trio client's arguments and errors.

    ``trio_host`` as in `llmrt.aio.open_runtime`.
    """

    def body() -> Any:
        return open_trio_gateway_client(
            url,
            token=token,
            msgpack=msgpack,
            call_buffer=call_buffer,
            max_frame_bytes=max_frame_bytes,
            connect_timeout=connect_timeout,
        )

    api = "llmrt.aio.open_gateway_client()"
    async with open_host(body, mode=trio_host, api=api) as (host, client):
        yield GatewayClient(host, client, call_buffer)
