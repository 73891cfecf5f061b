"""The retry executor: runs a route's `ResolvedRetryPolicy` over successive attempts.

One `LlmRuntime.stream` call is one provider attempt. `stream_with_retry`
runs attempts one after another in the consumer's own task (no extra task):

    async with rt.stream_with_retry(request) as call:
        async for event in call:
            match event:
                case AttemptChunk(attempt=n, chunk=chunk): ...
                case RetryScheduled(attempt=n, failure=f, delay_ms=d): ...  # drop attempt n

Every chunk is tagged with its attempt number; a failed attempt that will be
retried ends with a `RetryScheduled` event instead of its error finish, so
its partial output is never taken for the answer. The last event is always
the last attempt's terminal finish, wrapped in an `AttemptChunk`.

Retrying after output was streamed is allowed by default: an overload or a
dropped connection mid-answer is exactly what an agent host wants retried,
and the attempt tags make the restart explicit. Pass
``retry_after_output=False`` for consumers that cannot take output back.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import NoReturn, Protocol

import attrs
import trio

from llmrt._chunks import Finish, FinishAborted, FinishError, StreamChunk, UsageChunk
from llmrt._errors import ErrorCode, LlmFailure
from llmrt._request import GenerateOptions
from llmrt._retry import (
    NEVER_RETRIED_CODES,
    AttemptChunk,
    NormalRetryPolicy,
    ResolvedRetryPolicy,
    RetryEvent,
    RetryScheduled,
    default_retry_policy,
)
from llmrt._validate import invalid_reason

from ._abort import AbortSignal
from ._call import Call, aborted_message
from ._misuse import RETRY_FORM, not_entered, not_in_trio
from .call_log import RetryAttemptRecord, _summary

__all__ = [
    "Attempt",
    "OneAttempt",
    "RetryCall",
    "RetryHost",
    "StartAttempt",
    "RetryCallContext",
    "backoff_delay_ms",
    "retry_delay_ms",
    "check_retry_after_cap",
    "DEFAULT_MAX_RETRY_AFTER_MS",
]

#: A provider-requested delay above this (ms) is not waited for: the failure is final.
DEFAULT_MAX_RETRY_AFTER_MS = 120_000.0


def backoff_delay_ms(policy: ResolvedRetryPolicy, retry: int, rng: random.Random) -> float:
    """The computed delay before retry number ``retry`` (1-based), in milliseconds.

    ``initial_delay_ms * 2**(retry - 1)``, capped at ``max_delay_ms``, then
    scaled by a factor drawn uniformly from ``[1 - jitter_ratio, 1 + jitter_ratio]``
    and capped again.
    """
    base = min(policy.max_delay_ms, policy.initial_delay_ms * 2.0 ** min(retry - 1, 64))
    if policy.jitter_ratio:
        base *= 1.0 + policy.jitter_ratio * (2.0 * rng.random() - 1.0)
    return max(0.0, min(policy.max_delay_ms, base))


def retry_delay_ms(
    policy: ResolvedRetryPolicy,
    failure: LlmFailure,
    retries_done: int,
    rng: random.Random,
    *,
    max_retry_after_ms: float = DEFAULT_MAX_RETRY_AFTER_MS,
) -> float | None:
    """How long to wait before retrying after ``failure``, or None when it is final.

    Final: an abort; for a normal policy, a code that is never retried or not
    in its ``retryable_codes``, or no retries left; a provider-requested delay
    above ``max_retry_after_ms``. A valid provider-requested delay replaces
    the computed one.
    """
    code = str(failure.code)
    if code == ErrorCode.ABORTED:
        return None
    if isinstance(policy, NormalRetryPolicy) and (
        code in NEVER_RETRIED_CODES
        or code not in policy.retryable_codes
        or retries_done >= policy.max_retries
    ):
        return None
    requested = failure.provider_retry_after_ms
    if requested is not None and requested > 0:
        return float(requested) if requested <= max_retry_after_ms else None
    return backoff_delay_ms(policy, retries_done + 1, rng)


class Attempt(Protocol):
    """One attempt as the executor drives it: a `Call`, or a call to a routing group."""

    @property
    def retry_policy(self) -> ResolvedRetryPolicy | None: ...

    async def __aenter__(self) -> Attempt: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def __anext__(self) -> StreamChunk: ...

    @property
    def ready(self) -> bool: ...

    def abort(self, reason: str | None = None) -> None: ...


#: Starts one attempt: what `LlmRuntime.stream` does, given to the retry executor.
StartAttempt = Callable[[GenerateOptions, AbortSignal | None], Attempt]


class RetryHost(Protocol):
    """What the retry executor needs of its runtime (the runtime's core implements it)."""

    #: True once the runtime began shutting down: no further attempt starts.
    closing: bool
    #: Set when shutdown starts: a back-off ends at once.
    shutting_down: trio.Event

    def retry_scheduled(self, code: str) -> None:
        """Count a retry after a failure with ``code``."""
        ...

    def retry_ended(self, attempts: int) -> None:
        """Count a retried call that ended after ``attempts`` attempts."""
        ...


@attrs.define(eq=False)
class RetryCall:
    """A call run over as many attempts as its policy allows; iterate it for `RetryEvent`s."""

    _start: StartAttempt
    _core: RetryHost
    options: GenerateOptions
    _policy: ResolvedRetryPolicy | None
    _signal: AbortSignal | None
    _rng: random.Random
    _retry_after_output: bool
    _max_retry_after_ms: float
    #: The attempt in progress (1-based); 0 before the first.
    attempt: int = attrs.field(default=0, init=False)
    _call: Attempt | None = attrs.field(default=None, init=False)
    #: No retry can follow the attempt in progress (output went out with
    #: ``retry_after_output=False``, or the policy has none left): chunks pass straight through.
    _settled: bool = attrs.field(default=False, init=False)
    _pending_delay: float | None = attrs.field(default=None, init=False)
    _abort: FinishAborted | None = attrs.field(default=None, init=False)
    _sleep: trio.CancelScope | None = attrs.field(default=None, init=False)
    _ended: bool = attrs.field(default=False, init=False)
    #: The call log's record of the attempts (None: off, or none ended yet).
    _logged: list[RetryAttemptRecord] | None = attrs.field(default=None, init=False)
    _log_id: str | None = attrs.field(default=None, init=False)
    _log_at: float = attrs.field(default=0.0, init=False)

    @property
    def log_id(self) -> str | None:
        """The id of this call's ``retry`` record in the call log (None: the log is off)."""
        log = _summary.log_of(self._core)
        if self._log_id is None and log is not None:
            self._log_id, self._log_at = log.new_id(), _summary.now()
        return self._log_id

    @property
    def policy(self) -> ResolvedRetryPolicy:
        """The policy in force: the explicit one, else the serving registration's."""
        if self._policy is not None:
            return self._policy
        if self._call is not None and self._call.retry_policy is not None:
            return self._call.retry_policy
        return default_retry_policy()

    def abort(self, reason: str | None = None) -> None:
        """End the whole call at once with one ``aborted`` finish (in an attempt or a back-off)."""
        if self._ended or self._abort is not None:
            return
        message = aborted_message(reason)
        self._abort = FinishAborted(failure=LlmFailure(message=message, code=ErrorCode.ABORTED))
        if self._call is not None:
            self._call.abort(reason)
        if self._sleep is not None:
            self._sleep.cancel()

    def __aiter__(self) -> RetryCall:
        return self

    @property
    def ready(self) -> bool:
        """Whether the next event is already here: taking it will not wait (`Call.ready`).

        False between attempts, and while a retry may still follow (an error
        finish would start a back-off): only once the call is settled, by
        output with ``retry_after_output=False`` or by a policy with no retry left.
        """
        call = self._call
        if call is None or self._ended or not self._settled:
            return False
        return call.ready

    async def __anext__(self) -> RetryEvent:
        # `next_chunk`'s twin, kept apart on purpose: one wrapping the other costs
        # every chunk an extra coroutine frame (about 0.7 us).
        call = self._call
        if call is None or self._ended:
            if (finish := await self._between()) is not None:
                return self._tagged(finish)
            call = self._call
            assert call is not None
        chunk = await call.__anext__()
        if type(chunk) is not Finish:
            if not (self._settled or self._retry_after_output or type(chunk) is UsageChunk):
                self._settled = True  # output went out: no retry after it
            return AttemptChunk(attempt=self.attempt, chunk=chunk)
        event = await self._ending(chunk)
        return event if isinstance(event, RetryScheduled) else self._tagged(event)

    async def next_chunk(self) -> StreamChunk | RetryScheduled:
        """The next event with its chunk unwrapped: for consumers that drop the attempt tag.

        What iterating does, without an `AttemptChunk` per chunk (the gateways
        use it: they forward chunks and act on `RetryScheduled`). Raises
        `StopAsyncIteration` after the terminal finish.
        """
        call = self._call
        if call is None or self._ended:
            if (event := await self._between()) is not None:
                return event
            call = self._call
            assert call is not None
        chunk = await call.__anext__()
        if type(chunk) is not Finish:
            if not (self._settled or self._retry_after_output or type(chunk) is UsageChunk):
                self._settled = True  # output went out: no retry after it
            return chunk
        return await self._ending(chunk)

    def _tagged(self, chunk: StreamChunk) -> AttemptChunk:
        return AttemptChunk(attempt=max(self.attempt, 1), chunk=chunk)

    async def _between(self) -> Finish | None:
        """Before an attempt: its start (None), or the final finish instead of one."""
        if self._ended:
            raise StopAsyncIteration
        if self.attempt == 0 and (invalid := invalid_reason(self.options)) is not None:
            # Final before any attempt, whatever the policy: the same request
            # would be refused the same way, as the gateway refuses it.
            failure = LlmFailure(message=invalid, code=ErrorCode.INVALID_REQUEST)
            return self._final(Finish(reason=FinishError(failure=failure)))
        if self._pending_delay is not None:
            await self._back_off(self._pending_delay)
            self._pending_delay = None
        if self._abort is not None or self._core.closing:
            return self._final(Finish(reason=self._abort or _SHUTDOWN))
        await self._start_attempt()
        return None

    async def _ending(self, chunk: Finish) -> Finish | RetryScheduled:
        """An attempt's finish: the call's, or a `RetryScheduled` when another attempt follows."""
        reason = chunk.reason
        if (
            self._settled
            or type(reason) is not FinishError
            or self._abort is not None
            or self._core.closing
        ):
            return self._final(chunk)
        delay = retry_delay_ms(
            self.policy,
            reason.failure,
            self.attempt - 1,
            self._rng,
            max_retry_after_ms=self._max_retry_after_ms,
        )
        if delay is None:
            return self._final(chunk)
        if _summary.log_of(self._core) is not None:
            code = str(reason.failure.code)
            self._logged = _summary.retried(self._logged, self.attempt, self._call, code, delay)
        await self._end_attempt()
        self._pending_delay = delay
        self._core.retry_scheduled(str(reason.failure.code))
        return RetryScheduled(attempt=self.attempt, failure=reason.failure, delay_ms=delay)

    def _final(self, chunk: Finish) -> Finish:
        self._ended = True
        log = _summary.log_of(self._core)
        if log is not None and self.log_id is not None:
            logged = self._logged
            if self.attempt:
                logged = _summary.retried(logged, self.attempt, self._call, None, None)
            _summary.retry_ended(log, self.log_id, self._log_at, self.options, logged, chunk)
        self._core.retry_ended(max(self.attempt, 1))
        return chunk

    async def _start_attempt(self) -> None:
        self.attempt += 1
        if self.attempt == 1:
            self.log_id  # noqa: B018  # the call log: the record's time is the call's start
        # Kept only once entered: a call whose start was cancelled has nothing to stop.
        attempt = self._start(self.options, self._signal)
        if type(attempt) is Call:
            attempt._checked = True  # `_between` checked the options before the first attempt
        self._call = await attempt.__aenter__()
        # A policy that allows no retry (the route's, once the attempt knows its route)
        # settles the call at once.
        policy = self.policy
        self._settled = type(policy) is NormalRetryPolicy and self.attempt > policy.max_retries

    async def _end_attempt(self) -> None:
        call, self._call = self._call, None
        if call is not None:
            await call.__aexit__(None, None, None)

    async def _back_off(self, delay_ms: float) -> None:
        with trio.CancelScope() as scope:
            self._sleep = scope
            if self._abort is not None:
                scope.cancel()
            with trio.move_on_after(delay_ms / 1000.0):
                await self._core.shutting_down.wait()
        self._sleep = None

    async def aclose(self) -> None:
        """End the attempt in progress, if any (what leaving ``async with`` does)."""
        self._ended = True
        await self._end_attempt()


_SHUTDOWN = FinishAborted(
    failure=LlmFailure(message="the runtime is shutting down", code=ErrorCode.ABORTED)
)


@attrs.define(eq=False)
class RetryCallContext:
    """``async with rt.stream_with_retry(...) as call``; leaving ends the attempt in progress."""

    _call: RetryCall
    _key: int | None = attrs.field(default=None, init=False)

    async def __aenter__(self) -> RetryCall:
        try:
            # A cancellation point; the schedule point is the first attempt's start.
            await trio.lowlevel.checkpoint_if_cancelled()
        except RuntimeError:  # "must be called from async context": not a trio task
            raise not_in_trio("rt.stream_with_retry()") from None
        signal = self._call._signal
        if signal is not None and signal.aborted:
            self._call.abort(signal.reason)
        elif signal is not None:
            # Attempts subscribe to the signal themselves; this interrupts a back-off.
            self._key = signal._subscribe(self._call.abort)
        return self._call

    def __aiter__(self) -> NoReturn:
        raise not_entered(RETRY_FORM)

    async def __aexit__(self, *exc_info: object) -> None:
        signal = self._call._signal
        if signal is not None and self._key is not None:
            signal._unsubscribe(self._key)
        with trio.CancelScope(shield=True):
            await self._call.aclose()


@attrs.define(eq=False, slots=True)
class OneAttempt:
    """The executor's stand-in for a call whose route allows no retry: its one attempt.

    What a `RetryCallContext` and its `RetryCall` give a gateway (``async
    with``, `next_chunk`, `ready`) with nothing between the consumer and the
    call: under a policy of no retries the executor forwards every chunk and
    the finish as they are, and its setup is a good part of the step that
    starts a call. The statistics count the call's one attempt as the
    executor does (`RetryHost.retry_ended`). `LlmRuntime.stream_or_retry`
    chooses it.
    """

    _call: Call
    _host: RetryHost

    async def __aenter__(self) -> OneAttempt:
        await self._call.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with trio.CancelScope(shield=True):
            await self._call.__aexit__(None, None, None)

    @property
    def ready(self) -> bool:
        """Whether the next chunk is already here (`Call.ready`)."""
        return self._call.ready

    async def next_chunk(self) -> StreamChunk:
        """The call's next chunk (`RetryCall.next_chunk` without a retry to schedule)."""
        chunk = await self._call.__anext__()
        if type(chunk) is Finish:
            self._host.retry_ended(1)
        return chunk


def check_retry_after_cap(value: float) -> float:
    """Validate a ``max_retry_after_ms`` argument."""
    if not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ValueError(f"max_retry_after_ms must be a finite number >= 0, got {value!r}")
    return float(value)
