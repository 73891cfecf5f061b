"""`open_runtime` and the `LlmRuntime` facade."""

from __future__ import annotations

import math
import os
import random
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager

import attrs
import msgspec
import trio

from llmrt._adapter import Adapter
from llmrt._attachment import (
    ImageAttachmentAccess,
    ImageAttachmentRef,
    ImageAttachments,
    resolve_image_attachment_access,
)
from llmrt._chunks import Finish, FinishAborted, FinishError
from llmrt._completion import Completion, complete_chunks, complete_events
from llmrt._content import ImageBlock
from llmrt._deadlines import RuntimeServices
from llmrt._errors import ErrorCode, LlmError
from llmrt._helpers import raise_sole, revalidated
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
from llmrt._retry import AlwaysRetryPolicy, NormalRetryPolicy, ResolvedRetryPolicy
from llmrt._validate import invalid_reason

from ._abort import AbortSignal
from ._call import Call, Middleware, PreparedTarget
from ._dispatch import run_call
from ._misuse import require_trio
from ._model_lists import ModelListCache
from ._prepare import (
    config_of,
    resolve_config,
    route_image_policy,
    validated_model_info,
    validated_model_list,
)
from ._pricing import ModelPrice, Pricer, PriceTable
from ._registration import Registration
from ._registry import DirectoryHandle, DiscoveryHandle, RegistrationHandle, Registry
from ._retry import (
    DEFAULT_MAX_RETRY_AFTER_MS,
    OneAttempt,
    RetryCall,
    RetryCallContext,
    check_retry_after_cap,
)
from ._secrets import HeldSecrets
from ._statistics import ConnectionPool, RuntimeStatistics
from ._stats import CallSeries, StatsCounters
from ._stopper import Stopper
from ._topology import Discover, Route, Topology
from ._watchdog import Watchdog
from .call_log import CallLog, CallLogSettings, CallLogSink, JsonLinesSink
from .routing import Group, GroupsHandle, RoutedCall, RoutingSettings, Strategy
from .routing._handle import register_groups
from .routing._router import Router

__all__ = ["open_runtime", "LlmRuntime", "PreparedCall", "retry_policy_of"]

#: Every call task's name: given, so trio does not format one per call.
_CALL_TASK_NAME = "llmrt.call"

DEFAULT_IDLE_TIMEOUT = 300.0
_discovered_decoder = msgspec.json.Decoder(tuple[DiscoveredModel, ...])


def _check_timeout(name: str, value: float) -> float:
    if not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def _connection_pools(topology: Topology) -> list[ConnectionPool]:
    """Each registration's upstream pool, under its first provider route, if its adapter tells."""
    pools: list[ConnectionPool] = []
    seen: set[Registration] = set()
    for name, route in topology.routes.items():
        registration = route.registration
        if registration in seen:
            continue
        seen.add(registration)
        # getattr: an adapter need not subclass Adapter to be registered.
        read = getattr(registration.adapter, "connection_counts", None)
        try:
            counts = read() if read is not None else None
        except Exception:
            counts = None  # reading a figure never fails the statistics
        if counts is not None:
            pools.append(ConnectionPool(provider=name, open=counts[0], idle=counts[1]))
    pools.sort(key=lambda pool: pool.provider)
    return pools


@attrs.define(eq=False)
class InFlight:
    """The runtime's calls in flight: a doubly linked list through the calls' own slots.

    A set of 10,000 calls costs about 100 B a call (its table is kept at most
    60% full and grows fourfold); two links in each call cost 16 B, and
    adding or removing one is as cheap. Iterating is newest first and may
    remove the call it is at.
    """

    _newest: Call | None = None
    _count: int = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Call]:
        call = self._newest
        while call is not None:
            older = call._older
            yield call
            call = older

    def add(self, call: Call) -> None:
        newest = self._newest
        call._older = newest
        if newest is not None:
            newest._newer = call
        self._newest = call
        self._count += 1

    def discard(self, call: Call) -> None:
        older, newer = call._older, call._newer
        if newer is not None:
            newer._older = older
        elif self._newest is call:
            self._newest = older
        else:
            return  # not in the list
        if older is not None:
            older._newer = newer
        call._older = call._newer = None
        self._count -= 1


@attrs.define(eq=False)
class RuntimeCore:
    """The runtime's state: the narrow core calls and retries are given.

    Calls see it as a `CallHost`, retries as a `RetryHost` (both protocols
    defined by their users), so neither imports this module; only the facade
    below reaches the registry and the statistics.
    """

    registry: Registry
    watchdog: Watchdog
    nursery: trio.Nursery
    #: Cancels stopped calls' work: at once, or in waves (a task in ``nursery``).
    stopper: Stopper
    default_idle_timeout: float
    channel_size: int
    stats: StatsCounters = attrs.field(factory=StatsCounters)
    #: The host's image store: durable image attachments are read through it.
    image_attachments: ImageAttachments | None = None
    middlewares: tuple[Middleware, ...] = ()
    #: Secrets held beyond the adapters' keys (a gateway's token), removed from every failure.
    secrets: HeldSecrets = attrs.field(factory=HeldSecrets)
    #: The call log (None: off, the default).
    call_log: CallLog | None = None
    #: Prices calls: the price table, then genai-prices (docs/operations.md, "Prices").
    pricer: Pricer = attrs.field(factory=Pricer)
    calls: InFlight = attrs.field(factory=InFlight)
    #: Routes' model lists, for asks that accept a kept one (`LlmRuntime.list_models`).
    model_lists: ModelListCache = attrs.field(factory=ModelListCache)
    #: The routing groups and their deployments' state (docs/routing.md).
    router: Router = attrs.field(factory=Router)
    #: Draws retry jitter for calls given no ``rng`` (one per runtime: seeding one per
    #: call reads the system's entropy and costs more than the rest of the call's start).
    jitter: random.Random = attrs.field(factory=random.Random)
    closing: bool = False
    #: Set when shutdown starts: retry back-offs end at once.
    shutting_down: trio.Event = attrs.field(factory=trio.Event)
    _all_ended: trio.Event = attrs.field(factory=trio.Event)

    @property
    def routes(self) -> Mapping[str, Route]:
        return self.registry.topology.routes

    def no_adapter_message(self, provider: str) -> str:
        return self.registry.topology.no_adapter_message(provider)

    def call_started(self, call: Call) -> CallSeries:
        """Count ``call`` in; returns the series it counts into."""
        stats = self.stats
        stats.calls_started += 1
        stats.calls_in_flight += 1
        options = call.options
        provider = options.provider
        series = stats.series(provider, options.model, provider in self.registry.topology.routes)
        series.counters.started += 1
        self.calls.add(call)
        if self.closing:
            call._abort_with(ErrorCode.ABORTED, "the runtime is shut down")
        return series

    def spawn(self, call: Call) -> bool:
        try:
            self.nursery.start_soon(run_call, call, name=_CALL_TASK_NAME)
        except RuntimeError:  # the runtime's nursery is closed
            return False
        return True

    def call_ended(
        self,
        call: Call,
        series: CallSeries,
        delivered: Finish | None,
        middleware_failed: bool,
        abort_latency: float | None,
        forwarded: int = 0,
        dropped: int = 0,
        started: float | None = None,
        first: float = 0.0,
        ended: float = 0.0,
    ) -> None:
        """Count ``call`` out, with its adapter work in one step: chunks, time to the
        first one, duration (trio clock readings; ``started`` None: it did no adapter
        work; ``first`` means nothing when nothing was ``forwarded``)."""
        self.calls.discard(call)
        stats = self.stats
        stats.calls_in_flight -= 1
        if started is not None:
            stats.chunks_forwarded += forwarded
            stats.chunks_dropped += dropped
            series.worked(forwarded, started, first, ended)
        if middleware_failed:
            stats.middleware_errors += 1
        if abort_latency is not None:
            stats.abort_to_finish.observe(abort_latency)
        if delivered is None:
            stats.finished["consumer-left"] += 1
            series.ended("consumer-left", "")
        else:
            reason = delivered.reason
            kind: str = reason.__struct_config__.tag  # type: ignore[assignment]
            stats.finished[kind] += 1
            if type(reason) is FinishError or type(reason) is FinishAborted:
                code = str(reason.failure.code)
                stats.failures[code] += 1
                series.ended(kind, code)
            else:
                series.ended(kind, "")
        if self.closing and not self.calls:
            self._all_ended.set()

    def retry_scheduled(self, code: str) -> None:
        self.stats.retries[code] += 1

    def retry_ended(self, attempts: int) -> None:
        self.stats.attempts[attempts] += 1

    def statistics(self) -> RuntimeStatistics:
        stats = self.stats
        # The watchdog counts its own firings; the snapshot reports them with the rest.
        stats.watchdog_firings = self.watchdog.firings
        pools = _connection_pools(self.registry.topology)
        snapshot = stats.snapshot(self.registry.registration_count, pools)
        if self.call_log is not None:
            snapshot = msgspec.structs.replace(snapshot, call_log=self.call_log.statistics())
        if not self.router.plans:
            return snapshot
        return msgspec.structs.replace(snapshot, routing=self.router.statistics())

    async def shutdown(self, grace: float) -> None:
        """Abort every call, give them ``grace`` seconds to deliver, then drain registrations."""
        self.closing = True
        self.shutting_down.set()
        self.router.close()
        for call in list(self.calls):
            call._abort_with(ErrorCode.ABORTED, "the runtime is shutting down")
        if self.calls:
            with trio.move_on_after(grace):
                await self._all_ended.wait()
        self.registry.close()


@attrs.define(eq=False)
class PreparedCall:
    """A call whose config was resolved against one registration; dispatch it once.

    ``config`` has the adapter's defaults materialized; ``adapter_defaults``
    says which fields those are.
    """

    config: LlmCallConfig
    retry_policy: ResolvedRetryPolicy
    context: ModelContext | None
    adapter_defaults: CallConfigDefaults
    _runtime: LlmRuntime
    _route: Route
    #: The model's input modalities (None: unknown); images go to a text-only
    #: model as placeholders.
    input_modalities: tuple[ModelModality, ...] | None = None
    _used: bool = attrs.field(default=False, init=False)

    def stream(self, options: GenerateOptions, *, signal: AbortSignal | None = None) -> Call:
        """Like `LlmRuntime.stream`, through the registration captured at preparation.

        Raises `LlmError` ``INVALID_PREPARED_CALL`` on a second use or when the
        request's call-config fields differ from `config`.
        """
        if self._used:
            raise LlmError(ErrorCode.INVALID_PREPARED_CALL, "a prepared call can be streamed once")
        if not isinstance(options, GenerateOptions) or config_of(options) != self.config:
            raise LlmError(
                ErrorCode.INVALID_PREPARED_CALL,
                "the request's provider, model, reasoning effort or sampling fields differ "
                "from the prepared config",
            )
        self._used = True
        target = PreparedTarget(self._route, self.config, self.input_modalities)
        return self._runtime._prepared(options, signal, target)

    async def complete(
        self, options: GenerateOptions, *, signal: AbortSignal | None = None
    ) -> Completion:
        """`LlmRuntime.complete` through the registration captured at preparation.

        Raises as `stream` does (``INVALID_PREPARED_CALL``), then as
        `LlmRuntime.complete` does.
        """
        async with self.stream(options, signal=signal) as call:
            return await complete_chunks(call, options.provider, options.model)


@attrs.define(eq=False)
class LlmRuntime:
    """The runtime facade: adapter registry and streaming calls. Made by `open_runtime`."""

    _core: RuntimeCore

    # ---- calls ---------------------------------------------------------------------------

    def stream(
        self, options: GenerateOptions, *, signal: AbortSignal | None = None
    ) -> Call | RoutedCall:
        """Stream one call: ``async with rt.stream(options) as call: async for chunk in call``.

        Every call ends with exactly one terminal `Finish`. Adapter, lookup and
        config failures arrive as an ``error`` finish, and so does a request
        that breaks its Struct's constraints (``INVALID_REQUEST``, before any
        I/O, as the gateway refuses it); abort (``call.abort()`` or ``signal``)
        as an ``aborted`` finish. Middleware exceptions are raised from the
        iteration. Iterating without ``async with`` raises `CallNotEnteredError`.
        A provider that names a routing group (`register_groups`) gives a
        `RoutedCall`: the same shape, one attempt per deployment tried.

        Not every step of the iteration is a checkpoint: a chunk that is
        already buffered is returned without yielding to the scheduler (there
        is at least one checkpoint per 64 chunks, and one whenever the call
        has to wait). A consumer that must let other tasks run between chunks
        calls ``await trio.lowlevel.checkpoint()`` itself.
        """
        if not isinstance(options, GenerateOptions):
            raise TypeError(f"options must be GenerateOptions, not {type(options).__name__}")
        return self._stream(options, signal, None)

    def _stream(
        self, options: GenerateOptions, signal: AbortSignal | None, target: PreparedTarget | None
    ) -> Call | RoutedCall:
        core = self._core
        if target is None and core.router.plans:
            plan = core.router.plans.get(options.provider)
            if plan is not None:
                return RoutedCall(core.router, core, self._attempt, options, signal, plan)
        return Call(core, options, signal, target, core.default_idle_timeout)

    def _prepared(
        self, options: GenerateOptions, signal: AbortSignal | None, target: PreparedTarget
    ) -> Call:
        core = self._core
        return Call(core, options, signal, target, core.default_idle_timeout)

    def _attempt(self, options: GenerateOptions) -> Call:
        """One attempt of a routed call: a plain call to the deployment's route."""
        core = self._core
        return Call(core, options, None, None, core.default_idle_timeout)

    def stream_with_retry(
        self,
        options: GenerateOptions,
        *,
        policy: ResolvedRetryPolicy | None = None,
        signal: AbortSignal | None = None,
        retry_after_output: bool = True,
        max_retry_after_ms: float = DEFAULT_MAX_RETRY_AFTER_MS,
        rng: random.Random | None = None,
    ) -> RetryCallContext:
        """Stream a call over as many attempts as ``policy`` allows (see `llmrt.actors._retry`).

        ``async with rt.stream_with_retry(options) as call: async for event in call``
        yields `AttemptChunk` and `RetryScheduled` events; the last event is the
        last attempt's terminal finish. ``policy`` defaults to the serving
        registration's. A provider-requested delay above ``max_retry_after_ms``
        makes the failure final. ``rng`` draws the jitter (seed it for
        reproducible delays). Abort (``call.abort()`` or ``signal``) ends the
        whole call at once, in an attempt or in a back-off.
        """
        if not isinstance(options, GenerateOptions):
            raise TypeError(f"options must be GenerateOptions, not {type(options).__name__}")
        if policy is not None and not isinstance(policy, NormalRetryPolicy | AlwaysRetryPolicy):
            raise TypeError("policy must be a NormalRetryPolicy or an AlwaysRetryPolicy")
        call = RetryCall(
            self._start_attempt,
            self._core,
            options,
            policy,
            signal,
            rng or self._core.jitter,
            retry_after_output,
            check_retry_after_cap(max_retry_after_ms),
        )
        return RetryCallContext(call)

    def stream_or_retry(
        self,
        options: GenerateOptions,
        *,
        signal: AbortSignal | None = None,
        retry_after_output: bool = True,
    ) -> RetryCallContext | OneAttempt:
        """`stream_with_retry` under the route's own policy, for consumers of chunks.

        ``async with rt.stream_or_retry(options) as call`` then ``await
        call.next_chunk()`` and ``call.ready``, as on a `RetryCall` (the
        gateway's HTTP API uses it). A call that could make only one attempt (its route's
        policy has ``max_retries=0``, no routing group serves the provider,
        the call log is off) runs without the executor (`OneAttempt`), which
        would forward its chunks and finish unchanged.
        """
        core = self._core
        if core.call_log is None and options.provider not in core.router.plans:
            route = core.routes.get(options.provider)
            if route is not None:
                policy = route.retry_policy
                if type(policy) is NormalRetryPolicy and policy.max_retries == 0:
                    call = Call(core, options, signal, None, core.default_idle_timeout)
                    return OneAttempt(call, core)
        return self.stream_with_retry(options, signal=signal, retry_after_output=retry_after_output)

    def _start_attempt(
        self, options: GenerateOptions, signal: AbortSignal | None
    ) -> Call | RoutedCall:
        return self._stream(options, signal, None)

    async def complete(
        self, options: GenerateOptions, *, signal: AbortSignal | None = None
    ) -> Completion:
        """One call, not streamed: the assembled answer, usage and finish.

        ``await rt.complete(request)`` is ``rt.stream(request)`` folded through
        a `BlockAssembler`, on the same call path (middleware, the idle
        watchdog, ``signal``). Raises `LlmError` with the failure when the call
        ends ``error`` or ``aborted``; middleware exceptions propagate. A
        checkpoint; cancelling the caller stops the call and closes the upstream.
        """
        async with self.stream(options, signal=signal) as call:
            return await complete_chunks(call, options.provider, options.model)

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
        """`complete` over the attempts `stream_with_retry` makes (the same arguments).

        The answer is the last attempt's; ``Completion.attempts`` says how many
        there were. Raises `LlmError` with the final failure.
        """
        retried = self.stream_with_retry(
            options,
            policy=policy,
            signal=signal,
            retry_after_output=retry_after_output,
            max_retry_after_ms=max_retry_after_ms,
            rng=rng,
        )
        async with retried as call:
            return await complete_events(call, options.provider, options.model)

    def use(self, middleware: Middleware) -> None:
        """Add a middleware around every call started from now on (outermost last).

        ``middleware(request, next)`` returns the call's chunk stream; it may
        wrap ``next(request)`` or short-circuit it. The adapter is looked up
        only when the innermost ``next`` runs.
        """
        if not callable(middleware):
            raise TypeError("a middleware must be callable as middleware(request, next)")
        self._core.middlewares = (*self._core.middlewares, middleware)

    def statistics(self) -> RuntimeStatistics:
        """An immutable snapshot of the runtime's counters (and the adapters' pools, now)."""
        return self._core.statistics()

    def set_prices(self, table: PriceTable) -> None:
        """Price later calls by ``table`` first: (route, model) pairs to a `ModelPrice`.

        It replaces the table set before (``[[price]]`` in ``llmrt.toml`` is
        one); models not in it are priced by genai-prices when the
        ``llmrt[prices]`` extra is installed (docs/operations.md, "Prices").
        Raises `TypeError` for a key that is not a (route, model) pair and
        `msgspec.ValidationError` for a negative rate.
        """
        self._core.pricer.set_table(table)

    @property
    def prices(self) -> Mapping[tuple[str, str], ModelPrice]:
        """The price table set with `set_prices` (a copy)."""
        return self._core.pricer.table

    def redacting(self, secrets: Iterable[str | None]) -> AbstractContextManager[None]:
        """A ``with`` block during which ``secrets`` are removed from every call's failure.

        The one redaction point (docs/security.md, "Secrets") removes, from
        each failure an adapter reports, the serving adapter's keys and the
        values held here: a component holding a secret the adapters do not
        know (``serve_gateway`` holds its token this way) registers it for
        as long as it holds it. Values are never shown (not in a ``repr``).
        """
        return self._core.secrets.holding(secrets)

    # ---- registry ------------------------------------------------------------------------

    async def register_adapter(
        self,
        providers: Sequence[str],
        adapter: Adapter,
        *,
        stream_idle_timeout: float | None = None,
    ) -> RegistrationHandle:
        """Register ``adapter`` for ``providers``, all or nothing.

        Raises `LlmError`: ``INVALID_PROVIDER`` (bad or empty list, bad metadata
        or retry policy), ``DUPLICATE_ADAPTER`` (a route is taken, or this adapter
        instance is already registered).
        """
        idle = _check_timeout(
            "stream_idle_timeout",
            self._core.default_idle_timeout if stream_idle_timeout is None else stream_idle_timeout,
        )
        plans = self._core.router.plans
        if plans and isinstance(providers, Sequence) and not isinstance(providers, str | bytes):
            groups = [name for name in providers if isinstance(name, str) and name in plans]
            if groups:
                raise LlmError(
                    ErrorCode.DUPLICATE_ADAPTER,
                    f"provider route {groups[0]!r} is the name of a routing group",
                )
        return await self._core.registry.register(providers, adapter, idle)

    async def register_groups(
        self,
        groups: Sequence[Group],
        *,
        settings: RoutingSettings | None = None,
        strategies: Mapping[str, Strategy] | None = None,
    ) -> GroupsHandle:
        """Register routing groups: each a provider name served by its deployments.

        The set is validated whole against the routes registered now (each
        deployment's ``route``), the other sets' groups and the strategies
        (the built-ins and ``strategies``, the application's own by name),
        then published at once; the handle ``replace``s it atomically or
        ``dispose``s of it. ``settings.redis`` keeps cooldowns, counters and
        in-flight counts in Redis for every process (docs/routing.md).
        Raises `LlmError` ``INVALID_PROVIDER``. A checkpoint.
        """
        core = self._core
        return await register_groups(
            core.router, core.nursery, lambda: core.routes.keys(), groups, settings, strategies
        )

    def list_providers(self) -> tuple[ProviderInfo, ...]:
        """Registered provider routes, in registration order, then the routing groups.

        Reads the published snapshots.
        """
        routes = tuple(route.info for route in self._core.registry.topology.routes.values())
        plans = self._core.router.plans
        if not plans:
            return routes
        return routes + tuple(
            ProviderInfo(id=name, name=f"{name} (group of {len(plan.states)})")
            for name, plan in plans.items()
        )

    def group_names(self) -> tuple[str, ...]:
        """The routing groups' names (providers served by `register_groups`), as registered."""
        return tuple(self._core.router.plans)

    def _route(self, provider: str) -> Route:
        route = self._core.registry.topology.routes.get(provider)
        if route is None:
            plan = self._core.router.plans.get(provider)
            if plan is not None:
                routes = ", ".join(dict.fromkeys(state.route for state in plan.states))
                raise LlmError(
                    ErrorCode.NO_ADAPTER,
                    f"provider {provider!r} is a routing group, which has no adapter of its "
                    f"own: ask one of its deployments' routes ({routes})",
                )
            raise LlmError(ErrorCode.NO_ADAPTER, self._core.no_adapter_message(provider))
        return route

    def provider_retry_policy(self, provider: str) -> ResolvedRetryPolicy:
        """The retry policy captured when ``provider`` was registered. Raises ``NO_ADAPTER``."""
        return self._route(provider).retry_policy

    # ---- images --------------------------------------------------------------------------

    def image_request_policy(self, provider: str, model: str) -> ImageRequestPolicy:
        """How the route serving ``provider`` takes images of ``model`` (its adapter's policy).

        The default policy (stored originals, no limits) when the adapter
        declares none. Synchronous. Raises ``NO_ADAPTER``, ``INVALID_MODEL_INFO``.
        """
        route = self._route(provider)
        policy = route_image_policy(route.registration.adapter, provider, model)
        return ImageRequestPolicy() if policy is None else policy

    def image_request_pricing(self, provider: str, model: str) -> ImageRequestPricing | None:
        """The visual-token pricing the route serving ``provider`` declares for ``model``.

        None when the route charges no visual tokens. The answer carries the
        route's current `image_request_policy`, so ``pricing.price(request)``
        reproduces the offload decision the route will apply. Synchronous and
        without I/O (a token meter calls it per request). Raises ``NO_ADAPTER``,
        or ``INVALID_MODEL_INFO`` when the adapter answers with something else.
        """
        route = self._route(provider)
        adapter = route.registration.adapter
        # getattr: an adapter need not subclass Adapter to be registered.
        declare = getattr(adapter, "image_request_pricing", None)
        pricing = None if declare is None else declare(provider, model)
        if pricing is None:
            return None
        if not isinstance(pricing, ImageRequestPricing):
            raise LlmError(
                ErrorCode.INVALID_MODEL_INFO,
                f"provider {provider!r}: image_request_pricing() returned "
                f"{type(pricing).__name__}, not an ImageRequestPricing",
            )
        policy = route_image_policy(adapter, provider, model) or ImageRequestPolicy()
        return msgspec.structs.replace(pricing, policy=policy)

    def resolve_image_attachment_access(
        self, image: ImageAttachmentRef | ImageBlock, to_world: Callable[[str], str | None]
    ) -> ImageAttachmentAccess | None:
        """`llmrt.images.resolve_image_attachment_access` through this runtime's image store.

        None when the runtime has no store. The image is not changed.
        """
        store = self._core.image_attachments
        if store is None:
            return None
        return resolve_image_attachment_access(store, image, to_world)

    async def register_configurable_providers(
        self, entries: Sequence[ConfigurableProvider]
    ) -> DirectoryHandle:
        """Declare provider routes configuration could activate (all or nothing)."""
        handle = DirectoryHandle(self._core.registry)
        await self._core.registry.set_directory(handle, entries, new=True)
        return handle

    def list_configurable_providers(self) -> tuple[ConfigurableProvider, ...]:
        """Every declared configurable provider, in declaration order."""
        return self._core.registry.topology.configurable

    async def register_model_discovery(
        self, settings_ns: str, discover: Discover
    ) -> DiscoveryHandle:
        """Offer ``discover(request)`` for endpoints configured under ``settings_ns``.

        A ``discover`` with an ``aclose`` method (one that keeps connections,
        like `llmrt.adapters.openai_chat.EndpointDiscovery`) is closed when
        the handle withdraws the offer or the runtime closes, as adapters are.
        """
        handle = DiscoveryHandle(self._core.registry, settings_ns)
        await self._core.registry.set_offer(settings_ns, handle, discover)
        return handle

    async def discover_models(
        self, settings_ns: str, request: ModelDiscoveryRequest
    ) -> tuple[DiscoveredModel, ...]:
        """Ask the discovery registered for ``settings_ns`` what an endpoint serves.

        Deduplicated by id, in endpoint order. Raises ``NO_ADAPTER`` when no
        discovery is offered, ``INVALID_MODEL_INFO`` for a malformed answer.
        """
        discover = self._core.registry.discover_for(settings_ns)
        if discover is None:
            raise LlmError(
                ErrorCode.NO_ADAPTER, f"no model discovery is registered for {settings_ns!r}"
            )
        found = await discover(request)
        if not isinstance(found, Sequence) or not all(
            isinstance(model, DiscoveredModel) for model in found
        ):
            raise LlmError(
                ErrorCode.INVALID_MODEL_INFO,
                f"discovery for {settings_ns!r} must return a sequence of DiscoveredModel",
            )
        try:
            models = revalidated(_discovered_decoder, tuple(found))
        except msgspec.ValidationError as exc:
            raise LlmError(
                ErrorCode.INVALID_MODEL_INFO, f"discovery for {settings_ns!r} returned {exc}"
            ) from None
        seen: set[str] = set()
        unique = []
        for model in models:
            if model.id not in seen:
                seen.add(model.id)
                unique.append(model)
        return tuple(unique)

    @asynccontextmanager
    async def adapters_updated(self) -> AsyncIterator[trio.MemoryReceiveChannel[None]]:
        """Subscribe to topology changes: ``async for _ in updates`` wakes after commits.

        Payload-free and coalescing: a subscriber that is behind gets one
        pending wake-up, never a backlog, and never slows the registry down.
        Leaving the block ends the subscription; the iteration ends when the
        runtime closes.
        """
        registry = self._core.registry
        recv = registry.subscribe()
        try:
            async with recv:
                yield recv
        finally:
            registry.unsubscribe(recv)

    # ---- model metadata ------------------------------------------------------------------

    async def list_models(self, provider: str, *, max_age: float = 0.0) -> tuple[ModelInfo, ...]:
        """The adapter's advisory model catalog for ``provider``.

        ``max_age`` > 0: a list the route's adapter gave at most this many
        seconds ago may be answered instead of asking it again, and asks made
        while another one is asking wait for its answer (one upstream request
        however many ask at once; see ``_model_lists``). 0: the adapter is
        asked every time. Raises ``NO_ADAPTER``, or ``INVALID_MODEL_INFO`` for
        a malformed answer. A checkpoint.
        """
        plan = self._core.router.plans.get(provider)
        if plan is not None:
            await trio.lowlevel.checkpoint()
            # The group chooses the model: its deployments' models, as the group's.
            seen = dict.fromkeys(state.model for state in plan.states)
            return tuple(ModelInfo(provider=provider, id=model, name=model) for model in seen)
        route = self._route(provider)
        adapter = route.registration.adapter
        if not max_age > 0:
            return await validated_model_list(adapter, provider)
        return await self._core.model_lists.get(
            provider,
            route.registration,
            lambda: validated_model_list(adapter, provider),
            max_age,
        )

    async def resolve_model_info(self, provider: str, model: str) -> ResolvedModelInfo:
        """Validated, detached metadata of one exact model from the adapter that owns it.

        Raises ``NO_ADAPTER`` or ``INVALID_MODEL_INFO``. Cancellable.
        """
        route = self._route(provider)
        return await validated_model_info(route.registration.adapter, provider, model)

    async def resolve_call_config(self, config: LlmCallConfig) -> LlmCallConfig:
        """Validate ``config`` against its exact model and materialize the adapter's defaults.

        Raises ``INVALID_REQUEST`` (a config that breaks `LlmCallConfig`'s
        constraints, before any I/O), ``NO_ADAPTER``, ``INVALID_MODEL_INFO``,
        ``UNSUPPORTED_REASONING_EFFORT``.
        """
        _check_config(config)
        info = await self.resolve_model_info(config.provider, config.model)
        resolved, _ = resolve_config(config, info)
        return resolved

    async def prepare_call(self, config: LlmCallConfig) -> PreparedCall:
        """Resolve ``config`` under the current registration and bind a one-shot call to it.

        Raises as `resolve_call_config` does; an invalid config is refused
        (``INVALID_REQUEST``) before the route is looked up.
        """
        _check_config(config)
        route = self._route(config.provider)
        info = await validated_model_info(route.registration.adapter, config.provider, config.model)
        resolved, defaults = resolve_config(config, info)
        return PreparedCall(
            config=resolved,
            retry_policy=route.retry_policy,
            context=info.context,
            adapter_defaults=defaults,
            runtime=self,
            route=route,
            input_modalities=info.input_modalities,
        )


def _check_config(config: LlmCallConfig) -> None:
    """Refuse a config the decoder would refuse (`llmrt._validate`): ``INVALID_REQUEST``."""
    if not isinstance(config, LlmCallConfig):
        raise TypeError(f"config must be LlmCallConfig, not {type(config).__name__}")
    invalid = invalid_reason(config)
    if invalid is not None:
        raise LlmError(ErrorCode.INVALID_REQUEST, invalid)


def retry_policy_of(call: Call | RoutedCall) -> ResolvedRetryPolicy | None:
    """The retry policy of the registration that serves ``call``; None before it is selected.

    Captured when the call selected its registration, so replacing or
    disposing that route later does not change it.
    """
    return call.retry_policy


def _call_log(
    given: CallLogSettings | CallLogSink | str | os.PathLike[str] | None,
) -> CallLog | None:
    """The runtime's call log for ``open_runtime(call_log=...)`` (None: off)."""
    if given is None:
        return None
    if isinstance(given, str | os.PathLike):
        given = CallLogSettings(directory=os.fspath(given))
    if isinstance(given, CallLogSettings):
        if given.directory is None:
            raise ValueError("call_log settings need a directory")
        sink = JsonLinesSink(given.directory, given.max_file_bytes, given.max_total_bytes)
        return CallLog(sink, queue_size=given.queue, max_record_bytes=given.max_record_bytes)
    if isinstance(given, CallLogSink):
        return CallLog(given)
    raise TypeError(
        "call_log must be a directory, CallLogSettings or a CallLogSink, "
        f"not {type(given).__name__}"
    )


@asynccontextmanager
async def open_runtime(
    *,
    stream_idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    drain_timeout: float = 30.0,
    shutdown_grace: float = 5.0,
    channel_size: int = 256,
    image_attachments: ImageAttachments | None = None,
    call_log: CallLogSettings | CallLogSink | str | os.PathLike[str] | None = None,
) -> AsyncIterator[LlmRuntime]:
    """Open a runtime: its nursery, registry actor and watchdog; yield the `LlmRuntime`.

    ``stream_idle_timeout``: the default idle watchdog of a route, in seconds.
    ``drain_timeout``: how long a disposed registration's calls may run on.
    ``shutdown_grace``: on exit, in-flight calls get an ``aborted`` finish and
    this long to deliver it before their tasks are cancelled; then every
    registration closes its adapter. ``channel_size``: chunks buffered per call.
    ``image_attachments``: the host's image store, through which durable image
    attachments become request versions (see docs/images.md); without one, a
    request with a durable image ends with ``INVALID_REQUEST``.
    ``call_log``: record every call (docs/call-log.md): a directory for JSON
    Lines files, `CallLogSettings`, or any `CallLogSink`; None (the default): off.
    """
    require_trio("llmrt.open_runtime()")
    idle = _check_timeout("stream_idle_timeout", stream_idle_timeout)
    if not isinstance(drain_timeout, int | float) or not drain_timeout >= 0:
        raise ValueError(f"drain_timeout must be >= 0, got {drain_timeout!r}")
    if not isinstance(channel_size, int) or channel_size < 1:
        raise ValueError(f"channel_size must be a positive integer, got {channel_size!r}")
    if image_attachments is not None and not isinstance(image_attachments, ImageAttachments):
        raise TypeError("image_attachments must be an llmrt.images.ImageAttachments")
    logged = _call_log(call_log)
    try:
        async with trio.open_nursery() as nursery:
            watchdog = Watchdog()
            await nursery.start(watchdog.run)
            # One lazy deadline heap for the runtime: the idle watchdog's calls and
            # every adapter transport's read deadlines.
            services = RuntimeServices(nursery=nursery, deadlines=watchdog)
            registry = Registry(drain_timeout=drain_timeout, services=services)
            registry_done = trio.Event()

            async def run_registry(*, task_status: trio.TaskStatus[None]) -> None:
                try:
                    await registry.run(task_status=task_status)
                finally:
                    registry_done.set()

            await nursery.start(run_registry, name="llmrt.registry")
            core = RuntimeCore(
                registry=registry,
                watchdog=watchdog,
                nursery=nursery,
                stopper=Stopper(nursery),
                default_idle_timeout=idle,
                channel_size=channel_size,
                image_attachments=image_attachments,
            )
            if logged is not None:
                secrets = core.secrets
                logged.held = lambda: secrets.redactor
                core.call_log = logged
                await nursery.start(logged.run)
            try:
                yield LlmRuntime(core)
            finally:
                with trio.CancelScope(shield=True):
                    await core.shutdown(shutdown_grace)
                    if logged is not None:
                        await logged.close()
                    with trio.move_on_after(shutdown_grace + 15.0):
                        await registry_done.wait()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # Only the body can raise (the runtime's own tasks never do): give the
        # caller its own exception, not a group around it.
        raise_sole(group)
