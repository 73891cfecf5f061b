"""Runtime statistics as one immutable value, the same in process and on the wire. No I/O.

`LlmRuntime.statistics()` returns a `RuntimeStatistics`; a gateway answers a
``stats`` frame with that value, its `gateway` section filled in; each
worker of ``llmrt serve --workers`` writes it to a file and the
supervisor's sum of them is one again (``llmrt.actors.app.workers``);
``/metrics`` renders it. One shape for all of them: frozen msgspec Structs,
camelCase JSON, and

* labels are fields of entries, in tuples sorted by label (a provider's
  `ProviderStatistics`, a provider and model's `ModelHistogram`), never
  tuple keys; maps only where the key is one string (or an attempt count),
  and those maps are read-only;
* a histogram's bounds are finite, ascending: ``counts`` has one entry more,
  for the values above the last bound (JSON has no infinity).

Lookups by label: `RuntimeStatistics.provider`, `time_to_first_chunk_of`,
`call_duration_of`, `cost_of`, `pool`, and `ProviderStatistics.finished`.

Adding a section (as `routing` was added):

1. define its Structs here, subclasses of `_Value` with labelled entries, so
   the tree decodes without importing whatever produces it;
2. add one field at the end of `RuntimeStatistics`, defaulting to ``None``
   or ``()``: snapshots without it still decode, and older readers ignore
   a field they do not know;
3. fill it where its figures live: `StatsCounters.snapshot` for the
   runtime's own counters, or ``msgspec.structs.replace`` by the layer
   that owns them, as the gateway fills `gateway`;
4. say how workers add it up (``llmrt.actors.app.workers._sum``:
   `merge_values` sums, `retired` zeroes gauges); a test fails for a field
   of `RuntimeStatistics` the sum does not name;
5. export it in ``llmrt.actors.gateway._metrics`` and describe it in
   ``docs/operations.md`` and ``docs/protocol.md`` ("Statistics").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn, TypeVar

import msgspec

__all__ = [
    "ABORT_BUCKETS",
    "LATENCY_BUCKETS",
    "CallLogStatistics",
    "ConnectionPool",
    "DeploymentStatistics",
    "FinishedCount",
    "GatewayStatistics",
    "GroupStatistics",
    "HistogramSnapshot",
    "ModelCost",
    "ModelHistogram",
    "ProviderStatistics",
    "RoutingStatistics",
    "RuntimeStatistics",
    "SharedStateStatistics",
    "read_only",
]

#: Upper bounds (seconds) of the time-to-first-chunk and call-duration buckets
#: as counted (`llmrt.actors._stats.Histogram`); snapshots leave out the last.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    math.inf,
)  # fmt: skip
#: Upper bounds (seconds) of the abort-to-finish buckets: tens of microseconds up.
ABORT_BUCKETS: tuple[float, ...] = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.1, 1.0, math.inf,
)  # fmt: skip

K = TypeVar("K")
V = TypeVar("V")


class _ReadOnly(dict[K, V]):
    """A dict no one changes: a snapshot's maps (msgspec encodes it as the dict it is)."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("a statistics snapshot is immutable")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[type[_ReadOnly[K, V]], tuple[dict[K, V]]]:
        # copy and pickle rebuild a dict item by item, which `_refuse` would stop.
        return type(self), (dict(self),)


def read_only(mapping: Mapping[K, V]) -> Mapping[K, V]:
    """``mapping`` as a snapshot keeps it (itself when it already is)."""
    return mapping if type(mapping) is _ReadOnly else _ReadOnly(mapping)


def _freeze(value: Any, *names: str) -> None:
    for name in names:
        mapping = getattr(value, name)
        if type(mapping) is not _ReadOnly:
            msgspec.structs.force_setattr(value, name, _ReadOnly(mapping))


class _Value(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pass


class HistogramSnapshot(_Value, frozen=True):
    """A histogram at one moment: per-bucket counts (not cumulative) and the sum."""

    #: Finite bucket upper bounds in seconds, ascending.
    bounds: tuple[float, ...] = ()
    #: ``counts[i]`` observations were at most ``bounds[i]`` and above
    #: ``bounds[i - 1]``; one more than ``bounds``: the last counts the values
    #: above the last bound.
    counts: tuple[int, ...] = (0,)
    sum: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)

    @property
    def upper_bounds(self) -> tuple[float, ...]:
        """Each count's upper bound: ``bounds`` and infinity (as Prometheus' ``le``)."""
        return (*self.bounds, math.inf)


class ModelHistogram(_Value, frozen=True):
    """One (provider, model) label pair's histogram."""

    provider: str
    model: str
    histogram: HistogramSnapshot


class ModelCost(_Value, frozen=True):
    """What the calls of one (provider, model) label pair cost (docs/operations.md, "Prices").

    A call counts once per ``usage`` chunk it reported (adapters report one):
    priced, its price added to ``cost_usd``; or unpriced, when no price is
    known for the model (nothing added, never a zero price).
    """

    provider: str
    model: str
    #: US dollars.
    cost_usd: float = 0.0
    priced_calls: int = 0
    unpriced_calls: int = 0


class FinishedCount(_Value, frozen=True):
    #: A finish kind, or ``consumer-left``.
    reason: str
    #: The failure code of ``error`` and ``aborted`` finishes, else ``""``.
    code: str
    count: int


class ProviderStatistics(_Value, frozen=True):
    """The calls of one provider label (``(other)``: providers that serve no route)."""

    provider: str
    calls_started: int = 0
    calls_in_flight: int = 0
    #: Ended calls by finish kind (or ``consumer-left``) and failure code, sorted.
    calls_finished: tuple[FinishedCount, ...] = ()
    chunks_forwarded: int = 0

    def finished(self, reason: str, code: str = "") -> int:
        """How many calls ended with ``reason`` (and failure ``code``)."""
        for entry in self.calls_finished:
            if entry.reason == reason and entry.code == code:
                return entry.count
        return 0


class ConnectionPool(_Value, frozen=True):
    """An adapter's upstream connections: open (in use or idle) and, of those, idle."""

    #: The first provider route of the adapter's registration.
    provider: str
    open: int
    idle: int


class GatewayStatistics(_Value, frozen=True):
    """A gateway's own figures: the `RuntimeStatistics.gateway` section."""

    ready: bool = True
    connections: int = 0
    accepted: int = 0
    live_requests: int = 0
    #: Refused handshakes and requests by cause.
    refused: Mapping[str, int] = msgspec.field(default_factory=dict)
    frames_received: int = 0
    frames_sent: int = 0
    bytes_received: int = 0
    bytes_sent: int = 0
    #: Plain HTTP requests answered, by route.
    http_requests: Mapping[str, int] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        _freeze(self, "refused", "http_requests")


class DeploymentStatistics(_Value, frozen=True):
    """One deployment of a routing group (``docs/routing.md``), labelled by group and id."""

    group: str
    route: str
    model: str
    tier: int
    weight: float
    #: Attempts of this process (summed: of every process) on the deployment now.
    in_flight: int
    #: True when the figures below came from Redis (every process's), not this process's.
    shared: bool
    cooling: bool
    #: Seconds of cooldown left (0 when not cooling).
    cooling_for: float
    #: Times the deployment was cooled (by this process's calls).
    cooldowns: int
    #: Attempts dispatched here, and calls it served (its content reached the consumer).
    attempts: int
    served: int
    #: Attempts that moved on to another deployment, by the code that ended them.
    failovers: Mapping[str, int] = msgspec.field(default_factory=dict)
    #: EWMA of the time to first chunk (None: not measured yet).
    latency: float | None = None
    rpm_used: int = 0
    tpm_used: int = 0
    rpm: int | None = None
    tpm: int | None = None
    max_in_flight: int | None = None

    def __post_init__(self) -> None:
        _freeze(self, "failovers")

    @property
    def id(self) -> str:
        return f"{self.route}/{self.model}"


class GroupStatistics(_Value, frozen=True):
    """One routing group: its calls and its deployments, in the group's order."""

    name: str
    strategy: str
    #: Calls made to the group.
    calls: int
    #: Calls waiting for a deployment now.
    waiting: int
    #: Calls the router ended ``RATE_LIMIT`` (nothing available within the wait).
    rate_limited: int
    #: Calls moved to the ``context_fallback`` group.
    context_fallbacks: int
    deployments: tuple[DeploymentStatistics, ...]


class SharedStateStatistics(_Value, frozen=True):
    """Redis as the routing state's home: how many processes use it now, how it failed."""

    #: Processes whose calls use Redis now (0 or 1 per process; summed over workers).
    shared: int
    #: Processes configured with Redis.
    processes: int
    #: Round trips that failed or timed out.
    errors: int
    #: Times a process went from Redis to local state.
    degradations: int
    round_trips: int


class RoutingStatistics(_Value, frozen=True):
    """The `RuntimeStatistics.routing` section: groups in registration order.

    Times are seconds; ``coolingFor`` is what was left of a cooldown when the
    snapshot was taken. Workers' sections add up in
    ``llmrt.actors.routing._stats`` (`merge_routing`, `retired_routing`).
    """

    groups: tuple[GroupStatistics, ...] = ()
    #: None: routing state is local (no ``[routing] redis``).
    shared_state: SharedStateStatistics | None = None


def _no_aborts() -> HistogramSnapshot:
    return HistogramSnapshot(bounds=ABORT_BUCKETS[:-1], counts=(0,) * len(ABORT_BUCKETS))


def _find(
    entries: tuple[ModelHistogram, ...], provider: str, model: str
) -> HistogramSnapshot | None:
    for entry in entries:
        if entry.provider == provider and entry.model == model:
            return entry.histogram
    return None


class CallLogStatistics(_Value, frozen=True):
    """The `RuntimeStatistics.call_log` section: what the call log kept and what it dropped.

    ``recorded`` counts the records the calls handed over; each of them is
    ``written``, ``dropped`` (the queue between the calls and the writer was
    full: a slow or stuck sink), ``failed`` (the sink raised, a full disk's
    ``ENOSPC`` among them) or ``oversized`` (past the record byte bound), or
    still ``queued``. Sums over workers like every counter; ``queued`` is a gauge.
    """

    recorded: int = 0
    written: int = 0
    dropped: int = 0
    failed: int = 0
    oversized: int = 0
    queued: int = 0
    #: Bytes of JSON Lines the sink accepted.
    bytes_written: int = 0


class RuntimeStatistics(_Value, frozen=True):
    """A snapshot of `LlmRuntime.statistics()`: immutable, and the ``stats`` frame's value.

    Counters count since the runtime opened. Provider and model labels are
    bounded (see ``docs/operations.md``, "Metrics").
    """

    calls_started: int = 0
    calls_in_flight: int = 0
    #: Finished calls by terminal finish kind (``stop``, ``tool-calls``, ``max-tokens``,
    #: ``aborted``, ``error``) plus ``consumer-left`` for calls whose consumer left
    #: before the terminal chunk was delivered.
    calls_finished: Mapping[str, int] = msgspec.field(default_factory=dict)
    #: ``error`` and ``aborted`` finishes by failure code.
    failures_by_code: Mapping[str, int] = msgspec.field(default_factory=dict)
    chunks_forwarded: int = 0
    #: Chunks an adapter sent after its terminal ``finish`` (never forwarded).
    chunks_dropped: int = 0
    #: Middleware exceptions re-raised in the consumer.
    middleware_errors: int = 0
    registrations: int = 0
    #: Retries scheduled by `stream_with_retry`, by the failure code that caused them.
    retries_by_code: Mapping[str, int] = msgspec.field(default_factory=dict)
    #: Calls run by `stream_with_retry`, by how many attempts they took.
    attempts_per_call: Mapping[int, int] = msgspec.field(default_factory=dict)
    #: Calls the idle watchdog ended (``TIMEOUT``).
    watchdog_firings: int = 0
    #: The calls by provider label, sorted by it.
    providers: tuple[ProviderStatistics, ...] = ()
    #: Adapter start to first forwarded chunk, by (provider, model) label, sorted;
    #: calls that forwarded no chunk are not in it.
    time_to_first_chunk: tuple[ModelHistogram, ...] = ()
    #: Adapter start to the terminal item, by the same labels.
    call_duration: tuple[ModelHistogram, ...] = ()
    #: Abort (of any cause but the idle watchdog) to the ``aborted`` finish handed
    #: to the consumer.
    abort_to_finish: HistogramSnapshot = msgspec.field(default_factory=_no_aborts)
    #: Upstream connection pools of the adapters that report one, sorted by provider.
    connection_pools: tuple[ConnectionPool, ...] = ()
    #: The gateway's own figures, when a gateway answers (a ``stats`` frame, ``/metrics``).
    gateway: GatewayStatistics | None = None
    #: Routing groups and their deployments (None: no group is registered).
    routing: RoutingStatistics | None = None
    #: None: no call log (``open_runtime(call_log=...)``, ``llmrt serve --call-log``).
    call_log: CallLogStatistics | None = None
    #: What calls cost, by (provider, model) label, sorted; pairs without usage are not in it.
    costs: tuple[ModelCost, ...] = ()

    def __post_init__(self) -> None:
        _freeze(self, "calls_finished", "failures_by_code", "retries_by_code", "attempts_per_call")

    def provider(self, name: str) -> ProviderStatistics | None:
        """The figures of provider label ``name`` (None: no call counted under it)."""
        for entry in self.providers:
            if entry.provider == name:
                return entry
        return None

    def time_to_first_chunk_of(self, provider: str, model: str) -> HistogramSnapshot | None:
        """The time-to-first-chunk histogram of one (provider, model) label pair."""
        return _find(self.time_to_first_chunk, provider, model)

    def call_duration_of(self, provider: str, model: str) -> HistogramSnapshot | None:
        """The call-duration histogram of one (provider, model) label pair."""
        return _find(self.call_duration, provider, model)

    @property
    def cost_usd(self) -> float:
        """US dollars of every priced call."""
        return math.fsum(entry.cost_usd for entry in self.costs)

    @property
    def unpriced_calls(self) -> int:
        """Calls that reported usage for a model with no known price."""
        return sum(entry.unpriced_calls for entry in self.costs)

    def cost_of(self, provider: str, model: str) -> ModelCost | None:
        """The cost figures of one (provider, model) label pair (None: no usage counted)."""
        for entry in self.costs:
            if entry.provider == provider and entry.model == model:
                return entry
        return None

    def pool(self, provider: str) -> ConnectionPool | None:
        """The upstream pool reported under ``provider`` (None: no such adapter pool)."""
        for entry in self.connection_pools:
            if entry.provider == provider:
                return entry
        return None
