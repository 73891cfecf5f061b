"""Resolved retry policies: what a provider route asks a retry executor to do."""

from __future__ import annotations

from typing import Annotated

import msgspec

from ._chunks import StreamChunk
from ._errors import ErrorCode, LlmFailure
from ._wire import Wire

__all__ = [
    "AttemptChunk",
    "RetryScheduled",
    "RetryEvent",
    "NEVER_RETRIED_CODES",
    "DEFAULT_RETRYABLE_CODES",
    "NormalRetryPolicy",
    "AlwaysRetryPolicy",
    "ResolvedRetryPolicy",
    "default_retry_policy",
]

#: Codes worth another attempt by default: transient provider or transport trouble.
DEFAULT_RETRYABLE_CODES: tuple[str, ...] = (
    ErrorCode.RATE_LIMIT,
    ErrorCode.OVERLOADED,
    ErrorCode.SERVER_ERROR,
    ErrorCode.NETWORK,
    ErrorCode.TIMEOUT,
    ErrorCode.EMPTY_RESPONSE,
)

#: Codes a normal policy never retries, whatever its ``retryable_codes`` say: the
#: same request would fail the same way, or the caller asked for the end. (An
#: always policy retries everything but an abort.)
NEVER_RETRIED_CODES: frozenset[str] = frozenset(
    {
        ErrorCode.AUTH,
        ErrorCode.INVALID_CREDENTIAL,
        ErrorCode.MISSING_CREDENTIAL,
        ErrorCode.CONTEXT_WINDOW_EXCEEDED,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.ABORTED,
        ErrorCode.NO_ADAPTER,
    }
)

_Ms = Annotated[float, msgspec.Meta(ge=0)]


class _Backoff(Wire, frozen=True):
    #: Delay before the first retry; doubles per retry up to ``max_delay_ms``.
    initial_delay_ms: _Ms = 1_000.0
    max_delay_ms: _Ms = 30_000.0
    #: Each delay is scaled by a random factor in ``[1 - jitter_ratio, 1 + jitter_ratio]``.
    jitter_ratio: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.2

    def __post_init__(self) -> None:
        if not 0 <= self.initial_delay_ms < float("inf"):
            raise ValueError("initial_delay_ms must be a finite number >= 0")
        if not self.initial_delay_ms <= self.max_delay_ms < float("inf"):
            raise ValueError("max_delay_ms must be finite and >= initial_delay_ms")
        if not 0 <= self.jitter_ratio <= 1:
            raise ValueError("jitter_ratio must be within [0, 1]")


class NormalRetryPolicy(_Backoff, frozen=True, tag_field="mode", tag="normal"):
    """At most ``max_retries`` retries, only for ``retryable_codes``.

    Codes in `NEVER_RETRIED_CODES` are not retried even when listed.
    Defaults: 3 retries of the transient codes, 1 s doubling to 30 s, ±20 % jitter.
    """

    retryable_codes: tuple[str, ...] = DEFAULT_RETRYABLE_CODES
    max_retries: Annotated[int, msgspec.Meta(ge=0)] = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")


class AlwaysRetryPolicy(_Backoff, frozen=True, tag_field="mode", tag="always"):
    """Retries every failure, whatever its code, until an attempt succeeds or the call
    is aborted; only the back-off is configurable.

    For a host that keeps calls waiting while an operator fixes the cause (a
    balance topped up, a key rotated, an outage over). To retry only some
    codes, or a bounded number of times, use `NormalRetryPolicy`.
    """


ResolvedRetryPolicy = NormalRetryPolicy | AlwaysRetryPolicy


def default_retry_policy() -> NormalRetryPolicy:
    """The normal policy a route gets when its adapter names none."""
    return _DEFAULT


_DEFAULT = NormalRetryPolicy()


class AttemptChunk(Wire, frozen=True, tag_field="type", tag="attempt-chunk"):
    """A chunk of attempt number ``attempt`` (1-based) of a retried call."""

    attempt: int
    chunk: StreamChunk


class RetryScheduled(Wire, frozen=True, tag_field="type", tag="retry"):
    """Attempt ``attempt`` failed with ``failure``; attempt ``attempt + 1`` starts after
    ``delay_ms``. Everything attempt ``attempt`` streamed is void."""

    attempt: int
    failure: LlmFailure
    delay_ms: float


#: What a retried call yields: every attempt's chunks (the last one ends with the
#: one terminal finish) and a `RetryScheduled` between attempts.
RetryEvent = AttemptChunk | RetryScheduled
