"""A call to a routing group: one call for the consumer, one attempt per deployment tried.

``rt.stream(GenerateOptions(provider="chat", ...))`` returns a `RoutedCall`
when ``chat`` is a group. Like `stream_with_retry` it is a layer over single
attempts, run in the consumer's own task (no extra task, no extra channel
hop): it asks the router for a deployment, starts an ordinary call to that
route and model, and passes its chunks on.

It never splices two answers. Until the first content chunk reaches the
consumer, an attempt that fails with a code the group fails over on (by
default ``RATE_LIMIT``, ``OVERLOADED``, ``SERVER_ERROR``, ``TIMEOUT``,
``NETWORK``, ``EMPTY_RESPONSE``), or that sends nothing within the group's
``first_chunk_timeout``, is closed and the call moves to the next
deployment; a ``CONTEXT_WINDOW_EXCEEDED`` moves it to the group's
``context_fallback``. Usage reported before any content is held back
until content comes, so a failed attempt leaves nothing in the consumer's
answer. Once content was delivered, the attempt's finish is the call's,
whatever it says: a failure after content is an ``error`` finish, never a
second answer. The terminal finish carries `Routing`: the serving
deployment and every attempt with the code that ended it.
"""

from __future__ import annotations

import math
from typing import Protocol

import attrs
import msgspec
import trio

from llmrt._chunks import (
    Finish,
    FinishAborted,
    FinishError,
    RoutedAttempt,
    Routing,
    StreamChunk,
    UsageChunk,
)
from llmrt._content import ReasoningBlock, TextBlock, ToolCallBlock, ToolResultBlock
from llmrt._errors import ErrorCode, LlmFailure
from llmrt._request import GenerateOptions
from llmrt._retry import ResolvedRetryPolicy

from .._abort import AbortSignal
from .._call import Call, aborted_message
from .._misuse import STREAM_FORM, not_entered, not_in_trio
from ..call_log import _summary
from ._router import FAILED, NEUTRAL, SUCCEEDED, GroupPlan, Router, Ticket
from ._state import DeploymentState

__all__ = ["RoutedCall", "RoutingHost", "StartAttempt", "estimate_tokens"]


#: How many groups one call may pass through by context fallbacks.
_MAX_GROUPS = 4


class RoutingHost(Protocol):
    """What a routed call needs of its runtime (the runtime's core implements it)."""

    closing: bool
    shutting_down: trio.Event


class StartAttempt(Protocol):
    """Starts one attempt on a deployment's route: the runtime's plain ``stream``."""

    def __call__(self, options: GenerateOptions) -> Call: ...


def estimate_tokens(options: GenerateOptions, output_estimate: int) -> int:
    """A request's tokens for ``tpm`` before its usage is known: prompt text / 4, plus output.

    The output part is ``max_tokens``, or ``output_estimate`` when the request sets none.
    """
    chars = len(options.system or "")
    for message in options.messages:
        for block in message.content:
            kind = type(block)
            if kind is TextBlock or kind is ReasoningBlock:
                chars += len(block.text)  # type: ignore[union-attr]
            elif kind is ToolCallBlock:
                chars += len(block.arguments)  # type: ignore[union-attr]
            elif kind is ToolResultBlock:
                for part in block.content:  # type: ignore[union-attr]
                    if type(part) is TextBlock:
                        chars += len(part.text)
    output = options.max_tokens if options.max_tokens is not None else output_estimate
    return chars // 4 + output


def _failure(code: str, message: str, retry_after: float | None = None) -> LlmFailure:
    delay = None
    if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
        delay = max(1, math.ceil(retry_after * 1000))
    return LlmFailure(message=message, code=code, provider_retry_after_ms=delay)


@attrs.define(eq=False)
class RoutedCall:
    """One call to a group, as its consumer sees it (see the module docstring).

    The same shape as `Call`: ``async with`` it, iterate chunks, ``abort()``.
    ``routing`` says which deployments were tried so far and which serves.
    """

    _router: Router
    _host: RoutingHost
    _start: StartAttempt
    options: GenerateOptions
    _signal: AbortSignal | None
    _plan: GroupPlan
    _call: Call | None = attrs.field(default=None, init=False)
    _ticket: Ticket | None = attrs.field(default=None, init=False)
    #: The deployment of the attempt in progress, or of the one whose finish was the call's.
    _serving: DeploymentState | None = attrs.field(default=None, init=False)
    _committed: bool = attrs.field(default=False, init=False)
    _tried: set[str] = attrs.field(factory=set, init=False)
    _groups: list[str] = attrs.field(factory=list, init=False)
    #: The call log: this call's ``routed`` record id, and its attempts' ``call`` record ids.
    _log_id: str | None = attrs.field(default=None, init=False)
    _log_at: float = attrs.field(default=0.0, init=False)
    _log_calls: list[str] = attrs.field(factory=list, init=False)
    _attempts: list[RoutedAttempt] = attrs.field(factory=list, init=False)
    _held: list[StreamChunk] = attrs.field(factory=list, init=False)
    _used: int | None = attrs.field(default=None, init=False)
    _deadline: float = attrs.field(default=math.inf, init=False)
    _dispatched_at: float = attrs.field(default=0.0, init=False)
    _cause: Finish | None = attrs.field(default=None, init=False)
    _wait: trio.CancelScope | None = attrs.field(default=None, init=False)
    _outcome: int = attrs.field(default=NEUTRAL, init=False)
    _delay: float | None = attrs.field(default=None, init=False)
    _policy: ResolvedRetryPolicy | None = attrs.field(default=None, init=False)
    _last: Call | None = attrs.field(default=None, init=False)
    _entered: bool = attrs.field(default=False, init=False)
    _ended: bool = attrs.field(default=False, init=False)
    _signal_key: int | None = attrs.field(default=None, init=False)

    # ---- what a `Call` offers ----------------------------------------------------------

    @property
    def routing(self) -> Routing:
        """The group, the deployment serving now (or last tried), and the attempts so far."""
        state = self._serving
        attempts = tuple(self._attempts)
        if state is not None:
            return Routing(
                group=state.group, route=state.route, model=state.model, attempts=attempts
            )
        return Routing(group=self._plan.spec.name, attempts=attempts)

    @property
    def retry_policy(self) -> ResolvedRetryPolicy | None:
        """The retry policy of the route that serves (or last served) an attempt."""
        call = self._call or self._last
        policy = call.retry_policy if call is not None else None
        return policy if policy is not None else self._policy

    @property
    def stopped_by(self) -> Finish | None:
        """The finish an abort chose, or the attempt's own `Call.stopped_by`."""
        if self._cause is not None:
            return self._cause
        call = self._call or self._last
        return call.stopped_by if call is not None else None

    @property
    def ready(self) -> bool:
        """Whether the next chunk is already here: held back, or the serving `Call`'s ready.

        Only once the group committed to a deployment: before that, taking a
        chunk may mean a fail-over.
        """
        if not self._committed:
            return False
        return bool(self._held) or (self._call is not None and self._call.ready)

    @property
    def labels(self) -> tuple[str, str]:
        """The (provider, model) labels of the attempt in progress (the group's before one)."""
        call = self._call or self._last
        return call.labels if call is not None else (self.options.provider, self.options.model)

    @property
    def adapter_error(self) -> Exception | None:
        call = self._call or self._last
        return call.adapter_error if call is not None else None

    def abort(self, reason: str | None = None) -> None:
        """End the call with one ``aborted`` finish, in an attempt or while waiting for one."""
        if self._ended or self._cause is not None:
            return
        message = aborted_message(None if reason is None else str(reason))
        self._cause = Finish(
            reason=FinishAborted(failure=LlmFailure(message=message, code=ErrorCode.ABORTED))
        )
        if self._call is not None:
            self._call.abort(reason)
        if self._wait is not None:
            self._wait.cancel()

    def abort_with(self, code: str, message: str) -> None:
        """Abort with a given code and message (the runtime's shutdown uses it)."""
        if self._ended or self._cause is not None:
            return
        self._cause = Finish(reason=FinishAborted(failure=LlmFailure(message=message, code=code)))
        if self._call is not None:
            self._call._abort_with(code, message)
        if self._wait is not None:
            self._wait.cancel()

    # ---- ``async with`` ----------------------------------------------------------------

    async def __aenter__(self) -> RoutedCall:
        """Enter the call (a checkpoint); dispatch at once when a deployment has room now.

        When the call must wait (budgets, cooldowns) or ask Redis, that
        happens in the first ``__anext__``, so entering never waits on routing.
        """
        try:
            now = trio.current_time()
        except RuntimeError:  # not in a trio run (asyncio, or no loop at all)
            raise not_in_trio("rt.stream()") from None
        if self._entered:
            raise RuntimeError("this call was already streamed; ask rt.stream() for a new one")
        self._entered = True
        plan = self._plan
        plan.counters.calls += 1
        self._groups.append(plan.spec.name)
        signal = self._signal
        if signal is not None:
            if signal.aborted:
                self.abort(signal.reason)
            else:
                self._signal_key = signal._subscribe(self.abort)
        shared = plan.shared
        if (
            self._cause is None
            and not plan.turnstile
            and (shared is None or not shared.shared)
            and not self._closing()
        ):
            tokens = 0
            if plan.charges_tokens:
                tokens = estimate_tokens(self.options, plan.spec.output_estimate)
            got = self._router.acquire_local(plan, (), tokens, now)
            if isinstance(got, Ticket):
                self._ticket = got
                await self._begin()  # its call's __aenter__ is this one's checkpoint
                return self
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """End the attempt in progress and settle its deployment's budgets (shielded, bounded)."""
        if self._signal is not None and self._signal_key is not None:
            self._signal._unsubscribe(self._signal_key)
            self._signal_key = None
        self._ended = True
        ticket = self._ticket
        if ticket is not None and ticket.shared:
            # Redis's half of the release is a round trip: it must not be cut short.
            with trio.CancelScope(shield=True):
                await self._close(self._outcome, self._delay)
        else:
            await self._close(self._outcome, self._delay)

    def __aiter__(self) -> RoutedCall:
        if not self._entered:
            raise not_entered(STREAM_FORM)
        return self

    # ---- the chunks --------------------------------------------------------------------

    async def __anext__(self) -> StreamChunk:
        if self._ended:
            raise StopAsyncIteration
        call = self._call
        if self._held and self._committed:
            held = self._held.pop(0)
            if type(held) is Finish:
                self._ended = True
            return held
        if self._committed and call is not None:
            chunk = await call.__anext__()
            cls = type(chunk)
            if cls is Finish:
                return self._finished(chunk)  # type: ignore[arg-type]
            if cls is UsageChunk:
                self._count_usage(chunk)  # type: ignore[arg-type]
            return chunk
        if not self._entered:
            raise not_entered(STREAM_FORM)
        return await self._first()

    async def _first(self) -> StreamChunk:
        """Until content: dispatch, fail over, hold usage back; then the first content chunk."""
        while True:
            if self._call is None:
                ended = await self._dispatch()
                if ended is not None:
                    return self._final(ended)
            call = self._call
            assert call is not None
            if self._deadline == math.inf:
                chunk = await call.__anext__()
                missed = False
            else:
                with trio.move_on_at(self._deadline) as scope:
                    chunk = await call.__anext__()
                missed = scope.cancelled_caught
            if missed:
                timeout = self._plan.spec.first_chunk_timeout
                message = f"no chunk within the group's first_chunk_timeout ({timeout:g} s)"
                call._abort_with(ErrorCode.TIMEOUT, message)
                await self._move_on(_failure(ErrorCode.TIMEOUT, message), FAILED)
                continue
            cls = type(chunk)
            if cls is UsageChunk:
                self._count_usage(chunk)  # type: ignore[arg-type]
                self._held.append(chunk)
                continue
            if cls is Finish:
                finish: Finish = chunk  # type: ignore[assignment]
                reason = finish.reason
                if (
                    type(reason) is FinishError
                    and self._cause is None
                    and not self._closing()
                    and await self._fail_over(reason.failure)
                ):
                    continue
                final = self._finished(finish)
                if self._held:
                    # The attempt's usage first, then its finish: nothing it reported is lost.
                    self._ended = False
                    self._committed = True
                    self._held.append(final)
                    return self._held.pop(0)
                return final
            # The first content chunk: from here on this attempt's answer is the call's.
            self._committed = True
            ticket = self._ticket
            assert ticket is not None
            ticket.state.served += 1
            ticket.state.observe_latency(self._plan.spec, trio.current_time() - self._dispatched_at)
            if self._held:
                self._held.append(chunk)
                return self._held.pop(0)
            return chunk

    def _closing(self) -> bool:
        return self._host.closing or self._router.closing

    async def _fail_over(self, failure: LlmFailure) -> bool:
        """Move on after ``failure`` (before content) if the group's policy says so."""
        code = str(failure.code)
        spec = self._plan.spec
        fallback = spec.context_fallback
        if code == ErrorCode.CONTEXT_WINDOW_EXCEEDED and fallback is not None:
            plan = self._router.plans.get(fallback)
            if (
                plan is not None
                and fallback not in self._groups
                and len(self._groups) < _MAX_GROUPS
            ):
                await self._move_on(failure, NEUTRAL)
                self._plan.counters.context_fallbacks += 1
                self._plan = plan
                self._groups.append(fallback)
                self._tried = set()
                plan.counters.calls += 1
                return True
        if code in spec.failover_on:
            await self._move_on(failure, FAILED)
            return True
        if code == ErrorCode.NO_ADAPTER:
            # The deployment's route is gone (disposed or replaced): not its failure.
            await self._move_on(failure, NEUTRAL)
            return True
        return False

    async def _move_on(self, failure: LlmFailure, outcome: int) -> None:
        """Close the current attempt after ``failure`` and count it; the next dispatch follows."""
        ticket = self._ticket
        assert ticket is not None
        state = ticket.state
        code = str(failure.code)
        state.failovers[code] += 1
        self._attempts.append(
            RoutedAttempt(group=state.group, route=state.route, model=state.model, code=code)
        )
        self._tried.add(state.id)
        self._held.clear()
        self._serving = None
        delay = failure.provider_retry_after_ms
        await self._close(outcome, delay / 1000 if delay else None)

    def _finished(self, finish: Finish) -> Finish:
        """The attempt's terminal finish becomes the call's, with the routing record."""
        reason = finish.reason
        kind = type(reason)
        code = None
        if kind is FinishError or kind is FinishAborted:
            failure: LlmFailure = reason.failure  # type: ignore[union-attr]
            code = str(failure.code)
            counts = kind is FinishError and code in self._plan.spec.failover_on
            self._outcome = FAILED if counts else NEUTRAL
            delay = failure.provider_retry_after_ms
            self._delay = delay / 1000 if delay else None
        else:
            self._outcome = SUCCEEDED
        state = self._serving
        if state is not None:
            self._attempts.append(
                RoutedAttempt(group=state.group, route=state.route, model=state.model, code=code)
            )
        return self._final(finish)

    def _final(self, finish: Finish) -> Finish:
        self._ended = True
        final = msgspec.structs.replace(finish, routing=self.routing)
        log = _summary.log_of(self._host)
        if log is not None and self.log_id is not None:
            group = self._groups[0] if self._groups else self.options.provider
            _summary.routed_ended(log, self.log_id, self._log_at, group, self._log_calls, final)
        return final

    @property
    def log_id(self) -> str | None:
        """The id of this call's ``routed`` record in the call log (None: the log is off)."""
        log = _summary.log_of(self._host)
        if self._log_id is None and log is not None:
            self._log_id, self._log_at = log.new_id(), _summary.now()
        return self._log_id

    def _count_usage(self, chunk: UsageChunk) -> None:
        usage = chunk.usage
        self._used = (
            usage.input_tokens
            + usage.output_tokens
            + (usage.cache_read_tokens or 0)
            + (usage.cache_write_tokens or 0)
        )

    # ---- dispatch ----------------------------------------------------------------------

    def _untried(self) -> bool:
        tried = self._tried
        return any(state.key not in tried for state in self._plan.states)

    def _rate_limited(self, delay: float | None, why: str) -> Finish:
        self._plan.counters.rate_limited += 1
        failure = _failure(ErrorCode.RATE_LIMIT, why, delay)
        return Finish(reason=FinishError(failure=failure))

    def _exhausted(self) -> Finish:
        """Every deployment was tried: the last attempt's failure is the call's."""
        last = self._attempts[-1] if self._attempts else None
        code = last.code if last is not None and last.code else ErrorCode.NO_ADAPTER
        message = f"every deployment of group {self._plan.spec.name!r} failed; the last with {code}"
        if code == ErrorCode.RATE_LIMIT:
            return self._rate_limited(None, message)
        return Finish(reason=FinishError(failure=LlmFailure(message=message, code=code)))

    async def _dispatch(self) -> Finish | None:
        """Acquire a deployment (waiting in the group's line if need be) and start an attempt.

        A Finish: the call ends without (another) attempt: aborted, shut down,
        nothing left to try, or nothing available within the wait.
        """
        router = self._router
        plan = self._plan
        spec = plan.spec
        tokens = 0
        if plan.charges_tokens:
            tokens = estimate_tokens(self.options, spec.output_estimate)
        now = trio.current_time()
        bound = min(now + spec.max_wait, trio.current_effective_deadline())
        waiter = None
        turnstile = plan.turnstile
        try:
            while True:
                if self._cause is not None:
                    return self._cause
                if self._closing():
                    return _shutdown()
                if not self._untried():
                    return self._exhausted()
                earliest = math.inf
                if (waiter is None and len(turnstile) == 0) or (
                    waiter is not None and turnstile.is_head(waiter)
                ):
                    if waiter is not None and waiter.woken.is_set():
                        waiter.woken = trio.Event()  # wake-ups during the try below are kept
                    shared = plan.shared
                    if shared is not None and shared.shared:
                        got = await router.acquire(plan, self._tried, tokens)
                    else:
                        got = router.acquire_local(plan, self._tried, tokens, trio.current_time())
                    if isinstance(got, Ticket):
                        self._ticket = got
                        break
                    earliest = got
                now = trio.current_time()
                # inf: room frees only when a call ends (in flight at its limit): wait for it.
                if (
                    spec.when_unavailable == "fail"
                    or now >= bound
                    or (math.isfinite(earliest) and earliest > bound)
                ):
                    delay = earliest - now if math.isfinite(earliest) else None
                    return self._rate_limited(
                        delay, f"no deployment of group {spec.name!r} is available now"
                    )
                if waiter is None:
                    if len(turnstile) >= spec.max_queue:
                        delay = earliest - now if math.isfinite(earliest) else None
                        return self._rate_limited(
                            delay, f"too many calls are waiting for group {spec.name!r}"
                        )
                    waiter = turnstile.join()
                wake = min(earliest, bound)
                shared = plan.shared
                if shared is not None and shared.shared:
                    # Other processes free room without telling this one: ask again soon.
                    wake = min(wake, now + shared.settings.redis_poll)
                with trio.CancelScope(deadline=wake) as scope:
                    self._wait = scope
                    if self._cause is not None:
                        scope.cancel()
                    await waiter.woken.wait()
                self._wait = None
        finally:
            self._wait = None
            if waiter is not None:
                turnstile.leave(waiter)
        return await self._begin()

    async def _begin(self) -> Finish | None:
        ticket = self._ticket
        assert ticket is not None
        self._serving = state = ticket.state
        options = msgspec.structs.replace(self.options, provider=state.route, model=state.model)
        self._used = None
        self._dispatched_at = now = trio.current_time()
        timeout = self._plan.spec.first_chunk_timeout
        self._deadline = math.inf if timeout is None else now + timeout
        call = self._start(options)
        if _summary.log_of(self._host) is not None and call.log_id is not None:
            self.log_id  # noqa: B018  # allocated first: the record's time is the call's start
            self._log_calls.append(call.log_id)
        try:
            self._call = await call.__aenter__()
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._close(NEUTRAL, None)
            raise
        return None

    async def _close(self, outcome: int, delay: float | None) -> None:
        """End the attempt in progress (its call and upstream closed) and release its ticket."""
        call, self._call = self._call, None
        ticket, self._ticket = self._ticket, None
        if call is not None:
            self._last = call
            if call.retry_policy is not None:
                self._policy = call.retry_policy
            await call.__aexit__(None, None, None)
        if ticket is not None:
            await self._router.release(self._plan_of(ticket), ticket, outcome, delay, self._used)
        self._committed = False

    def _plan_of(self, ticket: Ticket) -> GroupPlan:
        # After a context fallback, the ticket belongs to the plan it was acquired from.
        plan = self._plan
        if ticket.state.group == plan.spec.name:
            return plan
        return self._router.plans.get(ticket.state.group, plan)


def _shutdown() -> Finish:
    return Finish(
        reason=FinishAborted(
            failure=LlmFailure(message="the runtime is shutting down", code=ErrorCode.ABORTED)
        )
    )
