"""Runtime statistics: cheap counters inside, an immutable snapshot outside."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from types import MappingProxyType

import attrs

__all__ = ["RuntimeStatistics", "StatsCounters"]


@attrs.frozen(kw_only=True)
class RuntimeStatistics:
    """A snapshot of `LlmRuntime.statistics()`; immutable, mappings included."""

    calls_started: int
    calls_in_flight: int
    #: Finished calls by terminal finish kind (``stop``, ``tool-calls``, ``max-tokens``,
    #: ``aborted``, ``error``) plus ``consumer-left`` for calls whose consumer left
    #: before the terminal chunk was delivered.
    calls_finished: Mapping[str, int]
    #: ``error`` and ``aborted`` finishes by failure code.
    failures_by_code: Mapping[str, int]
    chunks_forwarded: int
    #: Chunks an adapter sent after its terminal ``finish`` (never forwarded).
    chunks_dropped: int
    #: Middleware exceptions re-raised in the consumer.
    middleware_errors: int
    registrations: int
    #: Retries scheduled by `stream_with_retry`, by the failure code that caused them.
    retries_by_code: Mapping[str, int]
    #: Calls run by `stream_with_retry`, by how many attempts they took.
    attempts_per_call: Mapping[int, int]


@attrs.define(eq=False)
class StatsCounters:
    calls_started: int = 0
    calls_in_flight: int = 0
    finished: Counter[str] = attrs.field(factory=Counter)
    failures: Counter[str] = attrs.field(factory=Counter)
    chunks_forwarded: int = 0
    chunks_dropped: int = 0
    middleware_errors: int = 0
    retries: Counter[str] = attrs.field(factory=Counter)
    attempts: Counter[int] = attrs.field(factory=Counter)

    def snapshot(self, registrations: int) -> RuntimeStatistics:
        return RuntimeStatistics(
            calls_started=self.calls_started,
            calls_in_flight=self.calls_in_flight,
            calls_finished=MappingProxyType(dict(self.finished)),
            failures_by_code=MappingProxyType(dict(self.failures)),
            chunks_forwarded=self.chunks_forwarded,
            chunks_dropped=self.chunks_dropped,
            middleware_errors=self.middleware_errors,
            registrations=registrations,
            retries_by_code=MappingProxyType(dict(self.retries)),
            attempts_per_call=MappingProxyType(dict(self.attempts)),
        )
