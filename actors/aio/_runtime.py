"""`llmrt.aio.open_runtime` and `Runtime`: the trio runtime's API for asyncio programs.

Every method has the name, arguments and return types of `llmrt.LlmRuntime`'s;
the work happens in the runtime's trio run (`_host.py`). What is synchronous
in trio (`statistics`, `use`, `list_providers`, ...) is synchronous here; what
is awaited in trio is awaited here, and cancelling the awaiting asyncio task
cancels the trio work and waits for it. Adapters, middleware, discovery
callables and routing strategies are trio code: they run in the trio run.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import attrs

from llmrt._adapter import Adapter
from llmrt._attachment import ImageAttachmentAccess, ImageAttachmentRef, ImageAttachments
from llmrt._chunks import StreamChunk
from llmrt._completion import Completion
from llmrt._content import ImageBlock
from llmrt._image_route import ImageRequestPolicy, ImageRequestPricing
from llmrt._request import (
    CallConfigDefaults,
    ConfigurableProvider,
    DiscoveredModel,
    GenerateOptions,
    LlmCallConfig,
    ModelContext,
    ModelDiscoveryRequest,
    ModelInfo,
    ModelModality,
    ProviderInfo,
    ResolvedModelInfo,
)
from llmrt._retry import ResolvedRetryPolicy, RetryEvent
from llmrt.actors import _abort as trio_abort
from llmrt.actors._call import Middleware
from llmrt.actors._misuse import RETRY_FORM, STREAM_FORM
from llmrt.actors._registry import DirectoryHandle as TrioDirectoryHandle
from llmrt.actors._registry import DiscoveryHandle as TrioDiscoveryHandle
from llmrt.actors._registry import RegistrationHandle as TrioRegistrationHandle
from llmrt.actors._retry import DEFAULT_MAX_RETRY_AFTER_MS
from llmrt.actors._runtime import DEFAULT_IDLE_TIMEOUT, LlmRuntime
from llmrt.actors._runtime import PreparedCall as TrioPreparedCall
from llmrt.actors._runtime import open_runtime as open_trio_runtime
from llmrt.actors._statistics import RuntimeStatistics
from llmrt.actors._topology import Discover
from llmrt.actors.routing import Group, GroupsHandle, RoutingSettings, Strategy

from ._abort import AbortSignal
from ._call import Call
from ._host import HostMode, TrioHost, open_host
from ._updates import Updates

__all__ = [
    "DirectoryHandle",
    "DiscoveryHandle",
    "GroupsHandleAio",
    "PreparedCall",
    "RegistrationHandle",
    "Runtime",
    "open_runtime",
    "trio_signal",
]


def trio_signal(
    host: TrioHost, signal: AbortSignal | None
) -> tuple[trio_abort.AbortSignal | None, Callable[[], None]]:
    """A trio signal that follows the asyncio ``signal``, and how to stop following it."""
    if signal is None:
        return None, _nothing
    if not isinstance(signal, AbortSignal):
        raise TypeError(
            "signal must be an llmrt.aio.AbortSignal (llmrt.aio.AbortController().signal); "
            "llmrt.AbortController is the trio one"
        )
    controller = trio_abort.AbortController()
    if signal.aborted:
        # Aborted before the call: no listener nor waiter yet, so firing it here
        # touches no trio state, and the call's entry sees it at once.
        controller.abort(signal.reason)
        return controller.signal, _nothing
    key = signal._subscribe(lambda reason: host.soon(controller.abort, reason))
    return controller.signal, lambda: signal._unsubscribe(key)


def _nothing() -> None:
    return None


class _SignalledCall(Call[Any]):
    """A `Call` that stops following its asyncio signal once it has ended."""

    __slots__ = ("_forget",)

    def __init__(self, *args: Any, forget: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._forget = forget

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await super().__aexit__(*exc_info)
        finally:
            self._forget()


@attrs.define(eq=False)
class RegistrationHandle:
    """`llmrt.RegistrationHandle` from asyncio: ``replace`` and ``dispose`` awaited here."""

    _host: TrioHost
    _handle: TrioRegistrationHandle

    @property
    def adapter(self) -> Adapter:
        return self._handle.adapter

    async def replace(self, providers: Sequence[str]) -> None:
        """Serve exactly ``providers`` from now on (see `llmrt.RegistrationHandle.replace`)."""
        await self._host.run(self._handle.replace, providers)

    async def dispose(self, *, drain_timeout: float | None = None) -> None:
        """Withdraw the registration, drain its calls, close its adapter (as in trio)."""
        await self._host.run(lambda: self._handle.dispose(drain_timeout=drain_timeout))


@attrs.define(eq=False)
class DirectoryHandle:
    _host: TrioHost
    _handle: TrioDirectoryHandle

    async def replace(self, entries: Sequence[ConfigurableProvider]) -> None:
        await self._host.run(self._handle.replace, entries)

    async def dispose(self) -> None:
        await self._host.run(self._handle.dispose)


@attrs.define(eq=False)
class DiscoveryHandle:
    _host: TrioHost
    _handle: TrioDiscoveryHandle

    async def dispose(self) -> None:
        await self._host.run(self._handle.dispose)


@attrs.define(eq=False)
class GroupsHandleAio:
    """`llmrt.actors.routing.GroupsHandle` from asyncio."""

    _host: TrioHost
    _handle: GroupsHandle

    @property
    def groups(self) -> tuple[str, ...]:
        return self._host.now(lambda: self._handle.groups)

    async def replace(self, groups: Sequence[Group]) -> None:
        await self._host.run(self._handle.replace, groups)

    async def dispose(self) -> None:
        await self._host.run(self._handle.dispose)


@attrs.define(eq=False)
class PreparedCall:
    """`llmrt.PreparedCall` from asyncio: a config resolved once, streamed once."""

    _runtime: Runtime
    _prepared: TrioPreparedCall

    @property
    def config(self) -> LlmCallConfig:
        return self._prepared.config

    @property
    def retry_policy(self) -> ResolvedRetryPolicy:
        return self._prepared.retry_policy

    @property
    def context(self) -> ModelContext | None:
        return self._prepared.context

    @property
    def adapter_defaults(self) -> CallConfigDefaults:
        return self._prepared.adapter_defaults

    @property
    def input_modalities(self) -> tuple[ModelModality, ...] | None:
        return self._prepared.input_modalities

    def stream(
        self, options: GenerateOptions, *, signal: AbortSignal | None = None
    ) -> Call[StreamChunk]:
        """As `llmrt.PreparedCall.stream` (``INVALID_PREPARED_CALL`` on a second use)."""
        return self._runtime._open(
            lambda theirs: self._prepared.stream(options, signal=theirs),
            options,
            STREAM_FORM,
            signal,
        )

    async def complete(
        self, options: GenerateOptions, *, signal: AbortSignal | None = None
    ) -> Completion:
        """As `llmrt.PreparedCall.complete`."""
        return await self._runtime._complete(
            lambda theirs: self._prepared.complete(options, signal=theirs), signal
        )


@attrs.define(eq=False)
class Runtime:
    """`llmrt.LlmRuntime` for asyncio programs. Made by `open_runtime`."""

    _host: TrioHost
    _rt: LlmRuntime
    _channel_size: int

    @property
    def trio_host(self) -> HostMode:
        """Where this runtime's trio run lives: ``"guest"`` (on the loop) or ``"thread"``."""
        return self._host.mode

    def _call(self, source: Any, options: Any, form: str, forget: Callable[[], None]) -> Call[Any]:
        if forget is _nothing:
            return Call(self._host, source, options, form=form, limit=self._channel_size)
        return _SignalledCall(
            self._host, source, options, form=form, limit=self._channel_size, forget=forget
        )

    def _open(
        self,
        start: Callable[[trio_abort.AbortSignal | None], Any],
        options: GenerateOptions,
        form: str,
        signal: AbortSignal | None,
    ) -> Call[Any]:
        """A call whose trio source ``start`` opens with ``signal``'s trio twin."""
        theirs, forget = trio_signal(self._host, signal)
        try:
            source = start(theirs)
        except BaseException:
            forget()
            raise
        return self._call(source, options, form, forget)

    async def _complete(
        self,
        run: Callable[[trio_abort.AbortSignal | None], Awaitable[Completion]],
        signal: AbortSignal | None,
    ) -> Completion:
        """``run`` in the trio run with ``signal``'s trio twin, for its completion."""
        theirs, forget = trio_signal(self._host, signal)
        try:
            return await self._host.run(lambda: run(theirs))
        finally:
            forget()

    # ---- calls ---------------------------------------------------------------------------

    def stream(
        self, options: GenerateOptions, *, signal: AbortSignal | None = None
    ) -> Call[StreamChunk]:
        """``async with rt.stream(options) as call: async for chunk in call``.

        As `llmrt.LlmRuntime.stream`, chunk for chunk.

        Leaving the block early, cancelling the task or ``asyncio.timeout``
        aborts the call; ``__aexit__`` returns once its upstream is closed.
        """
        return self._open(
            lambda theirs: self._rt.stream(options, signal=theirs), options, STREAM_FORM, signal
        )

    def stream_with_retry(
        self,
        options: GenerateOptions,
        *,
        policy: ResolvedRetryPolicy | None = None,
        signal: AbortSignal | None = None,
        retry_after_output: bool = True,
        max_retry_after_ms: float = DEFAULT_MAX_RETRY_AFTER_MS,
        rng: random.Random | None = None,
    ) -> Call[RetryEvent]:
        """``async with rt.stream_with_retry(options) as call: async for event in call``."""
        return self._open(
            lambda theirs: self._rt.stream_with_retry(
                options,
                policy=policy,
                signal=theirs,
                retry_after_output=retry_after_output,
                max_retry_after_ms=max_retry_after_ms,
                rng=rng,
            ),
            options,
            RETRY_FORM,
            signal,
        )

    async def complete(
        self, options: GenerateOptions, *, signal: AbortSignal | None = None
    ) -> Completion:
        """One call, not streamed (see `llmrt.LlmRuntime.complete`). Raises `LlmError`."""
        return await self._complete(
            lambda theirs: self._rt.complete(options, signal=theirs), signal
        )

    async def complete_with_retry(
        self,
        options: GenerateOptions,
        *,
        policy: ResolvedRetryPolicy | None = None,
        signal: AbortSignal | None = None,
        retry_after_output: bool = True,
        max_retry_after_ms: float = DEFAULT_MAX_RETRY_AFTER_MS,
        rng: random.Random | None = None,
    ) -> Completion:
        """`complete` over the attempts `stream_with_retry` makes."""
        return await self._complete(
            lambda theirs: self._rt.complete_with_retry(
                options,
                policy=policy,
                signal=theirs,
                retry_after_output=retry_after_output,
                max_retry_after_ms=max_retry_after_ms,
                rng=rng,
            ),
            signal,
        )

    async def prepare_call(self, config: LlmCallConfig) -> PreparedCall:
        """Resolve ``config`` and bind a one-shot call to the current registration."""
        prepared = await self._host.run(self._rt.prepare_call, config)
        return PreparedCall(self, prepared)

    def use(self, middleware: Middleware) -> None:
        """Add a middleware (trio code: it runs in the call's trio task) to later calls."""
        self._host.now(lambda: self._rt.use(middleware))

    def statistics(self) -> RuntimeStatistics:
        """An immutable snapshot of the runtime's counters (see `llmrt.LlmRuntime.statistics`)."""
        return self._host.now(self._rt.statistics)

    @contextmanager
    def redacting(self, secrets: Iterable[str | None]) -> Iterator[None]:
        """As `llmrt.LlmRuntime.redacting`: ``secrets`` removed from failures in the block."""
        held = self._host.now(lambda: self._rt.redacting(secrets))
        self._host.now(held.__enter__)
        try:
            yield
        finally:
            self._host.now(lambda: held.__exit__(None, None, None))

    # ---- registry ------------------------------------------------------------------------

    async def register_adapter(
        self,
        providers: Sequence[str],
        adapter: Adapter,
        *,
        stream_idle_timeout: float | None = None,
    ) -> RegistrationHandle:
        """Register ``adapter`` (trio code) for ``providers``, all or nothing. Raises `LlmError`."""
        handle = await self._host.run(
            lambda: self._rt.register_adapter(
                providers, adapter, stream_idle_timeout=stream_idle_timeout
            )
        )
        return RegistrationHandle(self._host, handle)

    async def register_groups(
        self,
        groups: Sequence[Group],
        *,
        settings: RoutingSettings | None = None,
        strategies: Mapping[str, Strategy] | None = None,
    ) -> GroupsHandleAio:
        """Register routing groups (see `llmrt.LlmRuntime.register_groups`)."""
        handle = await self._host.run(
            lambda: self._rt.register_groups(groups, settings=settings, strategies=strategies)
        )
        return GroupsHandleAio(self._host, handle)

    def list_providers(self) -> tuple[ProviderInfo, ...]:
        return self._host.now(self._rt.list_providers)

    def provider_retry_policy(self, provider: str) -> ResolvedRetryPolicy:
        return self._host.now(lambda: self._rt.provider_retry_policy(provider))

    def image_request_policy(self, provider: str, model: str) -> ImageRequestPolicy:
        return self._host.now(lambda: self._rt.image_request_policy(provider, model))

    def image_request_pricing(self, provider: str, model: str) -> ImageRequestPricing | None:
        return self._host.now(lambda: self._rt.image_request_pricing(provider, model))

    def resolve_image_attachment_access(
        self, image: ImageAttachmentRef | ImageBlock, to_world: Callable[[str], str | None]
    ) -> ImageAttachmentAccess | None:
        return self._host.now(lambda: self._rt.resolve_image_attachment_access(image, to_world))

    async def register_configurable_providers(
        self, entries: Sequence[ConfigurableProvider]
    ) -> DirectoryHandle:
        handle = await self._host.run(self._rt.register_configurable_providers, entries)
        return DirectoryHandle(self._host, handle)

    def list_configurable_providers(self) -> tuple[ConfigurableProvider, ...]:
        return self._host.now(self._rt.list_configurable_providers)

    async def register_model_discovery(
        self, settings_ns: str, discover: Discover
    ) -> DiscoveryHandle:
        """Offer ``discover(request)`` (trio code) for endpoints under ``settings_ns``."""
        handle = await self._host.run(self._rt.register_model_discovery, settings_ns, discover)
        return DiscoveryHandle(self._host, handle)

    async def discover_models(
        self, settings_ns: str, request: ModelDiscoveryRequest
    ) -> tuple[DiscoveredModel, ...]:
        return await self._host.run(self._rt.discover_models, settings_ns, request)

    @asynccontextmanager
    async def adapters_updated(self) -> AsyncIterator[Updates]:
        """Subscribe to topology changes: ``async for _ in updates`` wakes after commits.

        As the trio API's: payload-free and coalescing (one pending wake-up at
        most, never a backlog), subscribed once the block is entered; leaving
        the block ends the subscription, and the iteration ends when the
        runtime closes.
        """
        host = self._host
        updates = Updates(host.loop)
        subscribed: asyncio.Future[None] = host.loop.create_future()
        watcher = asyncio.ensure_future(host.run(self._watch_updates, updates, subscribed))
        try:
            await asyncio.wait({watcher, subscribed}, return_when=asyncio.FIRST_COMPLETED)
            if not subscribed.done():
                watcher.result()  # it ended before subscribing: raise what it raised
                raise RuntimeError("this llmrt.aio runtime is closed")
            yield updates
        finally:
            watcher.cancel()
            cancelled = False
            while not watcher.done():
                try:
                    await asyncio.wait({watcher})
                except asyncio.CancelledError:
                    cancelled = True
            if not watcher.cancelled():
                watcher.exception()  # retrieved: the subscription ended with the runtime
            if cancelled:
                raise asyncio.CancelledError

    async def _watch_updates(self, updates: Updates, subscribed: asyncio.Future[None]) -> None:
        """In the trio run: hold the subscription, and hand each wake-up to the loop."""
        to_loop = self._host.to_loop
        try:
            async with self._rt.adapters_updated() as recv:
                to_loop(_settle, subscribed)
                async for _ in recv:
                    to_loop(updates._wake)
        finally:
            to_loop(updates._end)

    # ---- model metadata ------------------------------------------------------------------

    async def list_models(self, provider: str, *, max_age: float = 0.0) -> tuple[ModelInfo, ...]:
        return await self._host.run(lambda: self._rt.list_models(provider, max_age=max_age))

    async def resolve_model_info(self, provider: str, model: str) -> ResolvedModelInfo:
        return await self._host.run(self._rt.resolve_model_info, provider, model)

    async def resolve_call_config(self, config: LlmCallConfig) -> LlmCallConfig:
        return await self._host.run(self._rt.resolve_call_config, config)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@asynccontextmanager
async def open_runtime(
    *,
    stream_idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    drain_timeout: float = 30.0,
    shutdown_grace: float = 5.0,
    channel_size: int = 256,
    image_attachments: ImageAttachments | None = None,
    trio_host: HostMode | None = None,
) -> AsyncIterator[Runtime]:
    """Open a runtime from asyncio: ``async with llmrt.aio.open_runtime() as rt:``.

    The arguments are `llmrt.open_runtime`'s, plus ``trio_host``: where the
    runtime's one trio run lives, ``"guest"`` (trio as a guest of this loop)
    or ``"thread"`` (a thread of its own). Unset: a guest, unless the loop
    already hosts one (another runtime or gateway client), then a thread;
    see docs/asyncio.md.
    Leaving the block shuts the runtime down as in trio (in-flight calls end
    ``aborted``, then every adapter is closed) and returns once its trio run
    has returned. Raises `NotInAsyncioError` outside a running asyncio loop,
    and the trio runtime's errors for bad arguments (`ValueError`, `TypeError`).
    """

    def body() -> Any:
        return open_trio_runtime(
            stream_idle_timeout=stream_idle_timeout,
            drain_timeout=drain_timeout,
            shutdown_grace=shutdown_grace,
            channel_size=channel_size,
            image_attachments=image_attachments,
        )

    async with open_host(body, mode=trio_host, api="llmrt.aio.open_runtime()") as (host, rt):
        yield Runtime(host, rt, channel_size if isinstance(channel_size, int) else 256)
