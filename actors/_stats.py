"""Runtime statistics: cheap counters inside, an immutable snapshot outside."""

from __future__ import annotations

from collections import Counter

import attrs
import msgspec

__all__ = ["RuntimeStatistics", "StatsCounters"]


class RuntimeStatistics(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A snapshot of `LlmRuntime.statistics()`."""

    calls_started: int
    calls_in_flight: int
    #: Finished calls by terminal finish kind (``stop``, ``tool-calls``, ``max-tokens``,
    #: ``aborted``, ``error``) plus ``consumer-left`` for calls whose consumer left
    #: before the terminal chunk was delivered.
    calls_finished: dict[str, int]
    #: ``error`` and ``aborted`` finishes by failure code.
    failures_by_code: dict[str, int]
    chunks_forwarded: int
    #: Chunks an adapter sent after its terminal ``finish`` (never forwarded).
    chunks_dropped: int
    #: Middleware exceptions re-raised in the consumer.
    middleware_errors: int
    registrations: int
    #: Retries scheduled by `stream_with_retry`, by the failure code that caused them.
    retries_by_code: dict[str, int]
    #: Calls run by `stream_with_retry`, by how many attempts they took.
    attempts_per_call: dict[int, int]


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
            calls_finished=dict(self.finished),
            failures_by_code=dict(self.failures),
            chunks_forwarded=self.chunks_forwarded,
            chunks_dropped=self.chunks_dropped,
            middleware_errors=self.middleware_errors,
            registrations=registrations,
            retries_by_code=dict(self.retries),
            attempts_per_call=dict(self.attempts),
        )
