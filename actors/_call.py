"""Call actors: one task per in-flight call, and the consumer's view of it.

The call task runs the middleware chain and the adapter iteration under one
cancel scope and hands chunks to the consumer through a bounded
single-producer `Mailbox` (see `_mailbox.py`): a chunk goes straight to a
parked consumer or into a small buffer, and a side blocks only when the
buffer is full or empty. So the consumer usually drains a batch of chunks
per scheduler pass instead of paying a context switch per chunk (an
awaited memory-channel hop costs 7-12 us here; the whole call path costs
about 1.4 us per chunk).

Guarantees (each a test):

* exactly one terminal ``finish``, last; ``usage`` only before it; chunks an
  adapter sends after its finish are dropped and counted;
* abort (``call.abort()`` or an `AbortSignal`) -> one ``aborted`` finish,
  delivered after the adapter's iterator is closed;
* the idle watchdog counts only while the call waits on its adapter, and ends
  the call with ``error``/``TIMEOUT``; the first cause (abort or timeout) wins;
* adapter failures (raised or in-band), ``NO_ADAPTER``, config errors and a
  request that breaks its Struct's constraints (``INVALID_REQUEST``, checked
  before middleware and I/O) end the call with one ``error`` finish;
  middleware failures are re-raised in the consumer;
* leaving ``async with`` returns only once the call task has ended and the
  adapter's iterator is closed.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

import attrs
import msgspec
import trio

from llmrt._adapter import Adapter
from llmrt._attachment import ImageAttachments
from llmrt._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishAborted,
    FinishError,
    FinishStop,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)
from llmrt._content import ModelSource
from llmrt._errors import ErrorCode, LlmError, LlmFailure, failure_of
from llmrt._features import refuse_unsupported
from llmrt._redact import Redactor
from llmrt._request import GenerateOptions, ModelModality
from llmrt._retry import ResolvedRetryPolicy
from llmrt._stop_hooks import CURRENT_CALL, enter_call
from llmrt._validate import invalid_reason

from ._abort import AbortSignal
from ._mailbox import Mailbox
from ._misuse import STREAM_FORM, not_entered, not_in_trio
from ._prepare import (
    apply_config,
    config_of,
    project_images,
    resolve_config,
    validated_model_info,
)
from ._registration import Registration
from ._secrets import HeldSecrets
from ._stats import CallSeries
from ._stopper import Stopper
from ._topology import Route
from ._watchdog import Entry, Watchdog

__all__ = [
    "Call",
    "CallHost",
    "Next",
    "Middleware",
    "PreparedTarget",
    "aborted_message",
    "current_call",
]

log = logging.getLogger("llmrt.actors")

Next = Callable[[GenerateOptions], AsyncIterator[StreamChunk]]
#: ``middleware(request, next)`` returns the chunk stream: usually an async
#: generator that iterates ``next(request)`` (possibly with another request),
#: wraps it, or yields its own chunks without calling ``next`` at all.
Middleware = Callable[[GenerateOptions, Next], AsyncIterator[StreamChunk]]

_CONTENT = frozenset({BlockStart, TextDelta, ReasoningDelta, ToolCallDelta, BlockEnd})
#: How long closing an adapter's iterator may take after a call ended.
CLOSE_TIMEOUT = 5.0
#: The consumer yields to the scheduler at least once per this many buffered chunks.
_YIELD_EVERY = 64


class _Raise:
    """A middleware exception on its way to the consumer."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _error(code: str, message: str) -> Finish:
    return Finish(reason=FinishError(failure=LlmFailure(message=message, code=code)))


@functools.lru_cache(maxsize=64)
def _aborted(reason: str | None) -> Finish:
    """The ``aborted`` finish for ``reason``; one immutable instance per reason.

    A shared signal aborts its calls with one reason, so 10,000 calls share
    one finish instead of allocating 10,000 (four objects each) at once.
    """
    message = aborted_message(reason)
    return Finish(reason=FinishAborted(failure=LlmFailure(message=message, code="ABORTED")))


def aborted_message(reason: str | None) -> str:
    """The message of an ``aborted`` failure: the reason itself.

    Not "aborted: <reason>": the finish kind and the code already say it was
    aborted, and whoever shows the message (the CLI, a gateway client) says so too.
    """
    return reason if reason else "the call was aborted"


def _not_a_chunk(cls: type) -> Finish:
    return _error(
        ErrorCode.PROTOCOL, f"the adapter yielded {cls.__name__}, which is not a StreamChunk"
    )


class CallHost(Protocol):
    """What a call needs of the runtime that started it: the narrow core.

    Defined here, by the call, so the dependency points one way: the runtime
    implements this (`_runtime.RuntimeCore`), and a call never sees the
    registry, the statistics or the nursery behind it.
    """

    #: Chunks a call buffers for its consumer.
    channel_size: int
    #: The middleware chain, outermost last; empty: calls go straight to the adapter.
    middlewares: tuple[Middleware, ...]
    #: The host's image store (None: durable images are refused).
    image_attachments: ImageAttachments | None
    #: The idle watchdog of every call of this runtime.
    watchdog: Watchdog
    #: Cancels stopped calls' work, in waves when thousands stop at once.
    stopper: Stopper
    #: Secrets the process holds beyond the adapters' keys, removed from every failure.
    secrets: HeldSecrets

    @property
    def routes(self) -> Mapping[str, Route]:
        """The provider routes of the current topology (an immutable snapshot)."""
        ...

    def call_started(self, call: Call) -> CallSeries:
        """Count ``call`` in (aborting it when the runtime is closing); its statistics series."""
        ...

    def no_adapter_message(self, provider: str) -> str:
        """The ``NO_ADAPTER`` message for ``provider``: what is registered, what would be."""
        ...

    def spawn(self, call: Call) -> bool:
        """Start ``call``'s task; False when the runtime can no longer run tasks."""
        ...

    def call_worked(
        self,
        series: CallSeries,
        forwarded: int,
        dropped: int,
        started: float,
        first: float,
        ended: float,
    ) -> None:
        """Count a call's adapter work (see `_runtime.RuntimeCore.call_worked`)."""
        ...

    def call_ended(
        self,
        call: Call,
        series: CallSeries,
        delivered: Finish | None,
        middleware_failed: bool,
        abort_latency: float | None,
    ) -> None:
        """Count ``call`` out: what it delivered (None: the consumer left first)."""
        ...


@attrs.frozen
class PreparedTarget:
    """What a prepared call fixed in advance: the registration and the resolved config."""

    route: Route
    config: Any  # LlmCallConfig
    #: The model's input modalities as resolved at preparation (None: unknown).
    input_modalities: tuple[ModelModality, ...] | None = None


def _run_closer(close: Callable[[], None]) -> None:
    try:
        close()
    except Exception:
        log.exception("a close_on_stop callback failed")


async def _aclose(source: AsyncIterator[StreamChunk]) -> None:
    aclose = getattr(source, "aclose", None)
    if aclose is None or getattr(source, "ag_frame", True) is None:
        return  # nothing to close, or an async generator that already finished
    with trio.move_on_after(CLOSE_TIMEOUT, shield=True) as scope:
        try:
            await aclose()
        except Exception:
            log.exception("closing an adapter stream failed")
    if scope.cancelled_caught:
        log.warning("an adapter stream did not close within %s s", CLOSE_TIMEOUT)


@attrs.define(eq=False, slots=True)
class Call:
    """One call, as its consumer sees it: ``async with rt.stream(...) as call``.

    Entering starts the call task (once per call); ``async for chunk in
    call`` yields token-level chunks and ends after the one terminal
    `Finish`; leaving stops the task. Middleware exceptions are raised from
    iteration.
    """

    _core: CallHost
    options: GenerateOptions
    _signal: AbortSignal | None
    _target: PreparedTarget | None
    idle_timeout: float
    #: The retry policy of the registration that serves this call (None until selected).
    retry_policy: ResolvedRetryPolicy | None = attrs.field(default=None, init=False)
    _box: Mailbox = attrs.field(init=False)
    #: Covers the adapter work: abort, the watchdog and the consumer leaving cancel it.
    _scope: trio.CancelScope = attrs.field(factory=trio.CancelScope, init=False)
    _cause: Finish | None = attrs.field(default=None, init=False)
    #: Made only when a consumer leaves before the call task ended (rare).
    _done: trio.Event | None = attrs.field(default=None, init=False)
    _ended: bool = attrs.field(default=False, init=False)
    _delivered: Finish | None = attrs.field(default=None, init=False)
    _since_yield: int = attrs.field(default=0, init=False)
    _registration: Registration | None = attrs.field(default=None, init=False)
    _signal_key: int | None = attrs.field(default=None, init=False)
    _inner: AsyncIterator[StreamChunk] | None = attrs.field(default=None, init=False)
    _adapter_error: Exception | None = attrs.field(default=None, init=False)
    #: True when middleware wraps the adapter: its failures are redacted in `_terminal`.
    _chained: bool = attrs.field(default=False, init=False)
    #: trio time of the last progress (start, or last chunk from the adapter).
    _watch_last: float = attrs.field(default=0.0, init=False)
    #: True while the call waits on its consumer (idle time does not count).
    _watch_paused: bool = attrs.field(default=False, init=False)
    #: True once the call task ended (or never could start).
    _task_done: bool = attrs.field(default=False, init=False)
    #: The watchdog's entry for this call (None when not watched).
    _watch_entry: Entry | None = attrs.field(default=None, init=False)
    _entered: bool = attrs.field(default=False, init=False)
    #: The statistics series this call counts into (set when it starts).
    _series: CallSeries | None = attrs.field(default=None, init=False)
    #: trio time of the abort that stopped this call (None: none did).
    _aborted_at: float | None = attrs.field(default=None, init=False)
    #: What the adapter asked to close the moment the call stops (`llmrt.adapter.close_on_stop`).
    _closers: list[Callable[[], None]] | None = attrs.field(default=None, init=False)
    #: True once the runtime's `Stopper` counts this call's stop (its task ending counts it out).
    _stop_counted: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self._box = Mailbox(self._core.channel_size)

    @property
    def stopped_by(self) -> Finish | None:
        """The finish chosen by an abort, the idle watchdog or shutdown; None while none was.

        Set before the call's work is cancelled, so a middleware whose stream
        was cancelled reads here why (its ``code``: ``ABORTED``, ``TIMEOUT``, ...).
        """
        return self._cause

    @property
    def labels(self) -> tuple[str, str]:
        """The call's (provider, model) as its statistics count it: bounded label values.

        Unknown providers and models past the per-provider bound are folded
        into one value, as on ``/metrics``. Only meaningful once the call started.
        """
        series = self._series
        if series is None:
            return (self.options.provider, self.options.model)
        return (series.provider, series.model)

    @property
    def adapter_error(self) -> Exception | None:
        """The exception the adapter raised, exactly as raised; None if it raised none.

        The finish carries only the `LlmFailure` facts; this keeps the object
        itself (type, attributes, traceback) for diagnostics. Set when the
        adapter's ``stream()`` or ``resolve_model()`` raised.
        """
        return self._adapter_error

    # ---- ``async with``: start the call task, and on exit stop it ------------------------

    async def __aenter__(self) -> Call:
        """Start the call task (a checkpoint). A call can be entered once.

        The call is its own context manager: an in-flight call is one object
        less that way, which counts at tens of thousands of calls.
        """
        try:
            await trio.lowlevel.checkpoint()
        except RuntimeError:  # asyncio's "Task got bad yield": not a trio task
            raise not_in_trio("rt.stream()") from None
        if self._entered:
            raise RuntimeError("this call was already streamed; ask rt.stream() for a new one")
        self._entered = True
        signal = self._signal
        if signal is not None:
            if signal.aborted:
                self.abort(signal.reason)
            else:
                self._signal_key = signal._subscribe(self.abort)
        core = self._core
        self._series = series = core.call_started(self)
        if not core.spawn(self):
            self._never_ran(series)
        return self

    def _never_ran(self, series: CallSeries) -> None:
        """The runtime could not start the task (its nursery is closed): finish without one."""
        self._box.put_nowait(self._lost())
        self._box.close()
        self._task_done = True
        if self._stop_counted:
            self._core.stopper.ended()
        self._core.call_ended(self, series, None, False, None)

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop the call; return once its task has ended and the adapter's iterator is closed.

        So leaving the block normally, by exception or by cancellation never
        leaves adapter work behind.
        """
        if not self._entered:
            return  # never started: no task to wait for
        if not self._task_done:
            # The adapter's closers first: the provider sees the close before any
            # bookkeeping. Then cancel: a producer parked inside the scope gets
            # Cancelled; then leave(), which wakes one parked outside it.
            self._run_closers()
            self._scope.cancel()
            self._box.leave()
            with trio.CancelScope(shield=True):
                if not self._task_done:
                    self._done = trio.Event()
                    await self._done.wait()
        self._unsubscribe()

    # ---- the consumer's side -------------------------------------------------------------

    def __aiter__(self) -> Call:
        if not self._entered:
            # Without the block no task runs: the iteration would wait forever.
            raise not_entered(STREAM_FORM)
        return self

    async def __anext__(self) -> StreamChunk:
        """The next chunk.

        A checkpoint whenever it has to wait, and at least once per 64 chunks
        taken from the buffer: taking a buffered chunk costs no scheduler pass,
        which is most of the per-chunk cost saved (see the module docstring).
        """
        if self._ended:
            raise StopAsyncIteration
        box = self._box
        if box.ready:
            item = box.take()
            self._since_yield += 1
            if self._since_yield >= _YIELD_EVERY:
                self._since_yield = 0
                await trio.lowlevel.checkpoint()
        elif box.closed:
            await trio.lowlevel.checkpoint()
            item = self._lost()
        else:
            if not self._entered:  # ``call.__anext__()`` awaited by hand, outside the block
                raise not_entered(STREAM_FORM)
            box.park_getter()
            try:
                item = await trio.lowlevel.wait_task_rescheduled(box)
            except trio.EndOfChannel:
                item = self._lost()
        cls = type(item)
        if cls is Finish:
            self._ended = True
        elif cls is _Raise:
            self._ended = True
            raise item.exc
        return item  # type: ignore[no-any-return]

    def _lost(self) -> Finish:
        # The call task was killed before it could deliver its finish (runtime
        # shutdown past its grace period): the consumer still gets one.
        return self._cause or Finish(
            reason=FinishAborted(
                failure=LlmFailure(message="the runtime shut down", code=ErrorCode.ABORTED)
            )
        )

    def abort(self, reason: str | None = None) -> None:
        """Abort the call: its consumer receives one ``aborted`` finish (code ``ABORTED``).

        Synchronous, idempotent, and a no-op once the call has ended or timed out.
        On return the abort is the call's cause and the adapter's
        ``close_on_stop`` callbacks have run; cancelling the call task's work
        may wait a few scheduler passes when many calls stop at once (see
        `_stopper.py`).
        """
        if self._stop(_aborted(None if reason is None else str(reason))):  # hashable for the cache
            self._aborted_at = trio.current_time()

    def abort_with(self, code: str, message: str) -> None:
        """Abort with a given code and message (used by the runtime and registrations)."""
        if self._stop(Finish(reason=FinishAborted(failure=LlmFailure(message=message, code=code)))):
            self._aborted_at = trio.current_time()

    def idle_check(self, now: float) -> float | None:
        """The watchdog's one question: when is this call due next?

        The idle time counts only while the call waits on its adapter. None:
        the call idled too long and was stopped with ``TIMEOUT`` now. Infinity:
        another cause stopped it already, and its end will forget the entry.
        """
        due = (now if self._watch_paused else self._watch_last) + self.idle_timeout
        if due > now:
            return due
        if self._stop(
            _error(
                ErrorCode.TIMEOUT,
                f"no chunk from the adapter for {self.idle_timeout:g} s (stream idle timeout)",
            )
        ):
            return None
        return math.inf

    def _watch(self) -> None:
        """(Re-)arm the idle watchdog from the last progress."""
        self._watch_entry = self._core.watchdog.watch(
            self, self._watch_last + self.idle_timeout, self._watch_entry
        )

    def _stop(self, cause: Finish) -> bool:
        """Make ``cause`` the call's terminal item, unless one was chosen; True if it was."""
        if self._cause is None and not self._task_done:
            self._cause = cause
            self._run_closers()  # first: cancelling the scope reschedules the task, which costs
            if self._entered:
                self._stop_counted = True
                self._core.stopper.stop(self._scope)  # at once, or in a wave (see _stopper.py)
            else:
                self._scope.cancel()  # no task yet, nothing parked: its end would never count out
            return True
        return False

    def _close_on_stop(self, close: Callable[[], None]) -> None:
        """`llmrt.adapter.close_on_stop` in this call's task: keep ``close`` (run it if
        already stopped)."""
        if self._cause is not None or self._scope.cancel_called:
            _run_closer(close)
        elif self._closers is None:
            self._closers = [close]
        else:
            self._closers.append(close)

    def _run_closers(self) -> None:
        """Close, now, what the adapter registered: the provider sees the stop at once."""
        closers, self._closers = self._closers, None
        if closers:
            for close in closers:
                _run_closer(close)

    # ---- the call task -------------------------------------------------------------------

    async def run(self) -> None:
        """The call task: adapter work under `_scope`, then delivery of the terminal item.

        One coroutine on purpose: a parked call holds one frame here, not two.
        """
        core = self._core
        box = self._box
        series = self._series
        assert series is not None  # set by __aenter__ before the task starts
        delivered: Finish | None = None
        middleware_failed = False
        try:
            if self._cause is not None:  # aborted before it started: no lookup, no I/O
                item: Finish | _Raise = self._cause
            elif (invalid := invalid_reason(self.options)) is not None:
                # Refused before middleware, lookup and I/O: where the gateway
                # refuses the same request, before any call starts.
                item = _error(ErrorCode.INVALID_REQUEST, invalid)
            else:
                # The clock object and method calls on it and on ``box``: no bound
                # method object per call lives in this frame.
                clock = trio.lowlevel.current_clock()
                finish: Finish | None = None
                failed: Exception | None = None
                raised: Exception | None = None
                source: AsyncIterator[StreamChunk] | None = None
                forwarded = 0
                saw_block = False
                started = first = self._watch_last = clock.current_time()
                self._watch()
                enter_call(self)  # for llmrt.adapter.close_on_stop and `current_call`
                with self._scope:
                    try:
                        opened = await self._dispatch()
                        if isinstance(opened, Finish):
                            finish = opened
                        else:
                            source = opened
                            async for chunk in source:
                                self._watch_last = clock.current_time()
                                if self._cause is not None:
                                    break
                                cls = type(chunk)
                                if cls is Finish:
                                    finish = chunk  # type: ignore[assignment]
                                    break
                                if cls in _CONTENT:
                                    saw_block = True
                                elif cls is not UsageChunk:
                                    finish = _not_a_chunk(cls)
                                    break
                                if not forwarded:
                                    first = self._watch_last
                                forwarded += 1
                                if not box.put_nowait(chunk):
                                    self._watch_paused = True
                                    try:
                                        await box.put(chunk)
                                    finally:
                                        self._watch_paused = False
                                        self._watch_last = clock.current_time()
                    except Exception as exc:
                        if source is not None and source is self._inner:
                            failed = exc  # the empty chain: the exception is the adapter's own
                        else:
                            raised = exc  # it left the middleware chain
                    finally:
                        dropped = await self._close(source, finish is not None)
                core.call_worked(series, forwarded, dropped, started, first, clock.current_time())
                item = self._outcome(finish, failed, raised, saw_block)
                middleware_failed = type(item) is _Raise
            if not box.put_nowait(item):
                await box.put(item)
            if type(item) is Finish:
                delivered = item
        except trio.BrokenResourceError:
            pass  # the consumer left before the end: nobody to tell
        finally:
            self._ended_task(series, delivered, middleware_failed)

    async def _close(self, source: AsyncIterator[StreamChunk] | None, finished: bool) -> int:
        """Close what the call opened and release its lease; the chunks dropped after a finish."""
        dropped = 0
        if source is not None:
            if finished and self._cause is None:
                dropped = await self._drain(source)
            await _aclose(source)
        if self._inner is not None and self._inner is not source:
            # A middleware that stopped iterating ``next`` without closing it.
            await _aclose(self._inner)
        self._release()
        return dropped

    def _ended_task(
        self, series: CallSeries, delivered: Finish | None, middleware_failed: bool
    ) -> None:
        """The call task's last step: close the box, stop watching, count the call out."""
        self._box.close()
        self._task_done = True
        core = self._core
        if self._stop_counted:
            core.stopper.ended()
        if self._watch_entry is not None:
            core.watchdog.forget(self._watch_entry)
            self._watch_entry = None
        latency = None
        if delivered is not None and delivered is self._cause and self._aborted_at is not None:
            latency = trio.current_time() - self._aborted_at
        core.call_ended(self, series, delivered, middleware_failed, latency)
        if self._done is not None:
            self._done.set()

    async def _dispatch(self) -> AsyncIterator[StreamChunk] | Finish:
        """The head of the chain: the outermost middleware's stream, or (empty chain) the adapter's.

        The empty chain is the innermost ``next`` opened at once, so a call
        without middleware iterates the adapter's own stream: no generator
        layer per chunk. A Finish: the call ended before any stream (lookup,
        config or image projection failed).
        """
        middlewares = self._core.middlewares
        if not middlewares:
            opened = await self._open(self.options)
            if not isinstance(opened, Finish):
                self._inner = opened
            return opened
        self._chained = True  # `current_call` answers from now on
        nxt: Next = self._innermost
        for middleware in reversed(middlewares):
            nxt = _link(middleware, nxt)
        return nxt(self.options)

    def _outcome(
        self,
        finish: Finish | None,
        failed: Exception | None,
        raised: Exception | None,
        saw_block: bool,
    ) -> Finish | _Raise:
        """The one terminal item: the first cause, a middleware error, or the corrected finish."""
        if self._cause is not None and finish is None:
            return self._cause
        if raised is not None:
            return _Raise(raised)
        if finish is None:
            if failed is not None:
                return self._adapter_failed(failed)
            return _error(ErrorCode.PROTOCOL, "the adapter's stream ended without a finish chunk")
        kind = type(finish.reason)
        if kind is FinishStop and not saw_block:
            return _error(ErrorCode.EMPTY_RESPONSE, "the model returned no content")
        if (kind is FinishError or kind is FinishAborted) and not self._chained:
            # Straight from the adapter (no middleware): the one redaction point.
            return self._scrub_finish(finish)
        return finish

    def _scrub(self, failure: LlmFailure) -> LlmFailure:
        """The one redaction point of an adapter's failure (docs/security.md, "Secrets").

        The serving adapter's keys (`Adapter.redactor`), then the secrets the
        process holds (`LlmRuntime.redacting`: a gateway's token), are removed
        by value, whatever the adapter is (HTTP, plugin, scripted); nothing
        after this point (middleware, consumer, gateway frames) redacts again.
        """
        return self._core.secrets.redactor.failure(self._redactor().failure(failure))

    def _scrub_finish(self, finish: Finish) -> Finish:
        """``finish`` with its failure through `_scrub` (the same object when clean)."""
        return self._core.secrets.redactor.finish(self._redactor().finish(finish))

    def _redactor(self) -> Redactor:
        """The serving adapter's redactor (phrasings only before one was selected)."""
        registration = self._registration
        if registration is not None:
            try:
                return registration.adapter.redactor()
            except Exception:
                log.warning("an adapter's redactor() failed; redacting phrasings only")
        return Redactor()

    async def _drain(self, source: AsyncIterator[StreamChunk]) -> int:
        """Count what the adapter still emits after its finish, without waiting for it.

        Runs inside the call's own scope, cancelled here: the adapter's work is
        over once it finished, and a cancel scope of its own would cost the
        call as much as a few chunks. The `Cancelled` an adapter meets if it
        waits is swallowed: only shielded closing runs in the scope after this,
        and any outer cancellation is raised again at the next checkpoint.
        """
        dropped = 0
        self._scope.cancel()
        try:
            async for _ in source:
                dropped += 1
        except (Exception, trio.Cancelled):
            pass  # the adapter's own failure after its finish changes nothing
        return dropped

    # ---- dispatch ------------------------------------------------------------------------

    def _adapter_failed(self, exc: Exception) -> Finish:
        """The error finish for an exception the adapter raised (kept in `adapter_error`)."""
        failure = failure_of(exc)
        clean = self._scrub(failure)
        if clean is not failure and isinstance(exc, LlmError):
            # In-process diagnostics keep the adapter's error and where it was
            # raised, but not a secret the one redaction point removed.
            exc = LlmError.from_failure(clean).with_traceback(exc.__traceback__)
        self._adapter_error = exc
        return Finish(reason=FinishError(failure=clean))

    async def _open(self, options: GenerateOptions) -> AsyncIterator[StreamChunk] | Finish:
        """The innermost ``next`` opened: select the adapter, then start its stream."""
        selected = await self._select(options)
        if isinstance(selected, Finish):
            return selected
        adapter, options = selected
        try:
            refusal = refuse_unsupported(adapter, options)
            if refusal is None:
                return adapter.stream(options)
        except Exception as exc:
            return self._adapter_failed(exc)
        return Finish(reason=FinishError(failure=refusal))

    def _innermost(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        if self._inner is not None:
            raise RuntimeError("a middleware called next() twice for one call")
        self._inner = self._terminal(options)
        return self._inner

    async def _terminal(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        """The innermost ``next`` under middleware: `_open`, then the adapter's chunks.

        Adapter failures become an error finish here, so middleware sees them
        as chunks and any exception that leaves the chain is a middleware's.
        """
        source = await self._open(options)
        if isinstance(source, Finish):
            yield source
            return
        try:
            async for chunk in source:
                # The adapter's own finish is redacted before any middleware sees it.
                yield self._scrub_finish(chunk) if type(chunk) is Finish else chunk
        except Exception as exc:
            yield self._adapter_failed(exc)
        finally:
            await _aclose(source)
            self._release()

    async def _select(self, options: GenerateOptions) -> tuple[Adapter, GenerateOptions] | Finish:
        """Pick the registration, lease it, resolve the config, gate replay state."""
        core = self._core
        if not isinstance(options, GenerateOptions):
            return _error(
                ErrorCode.INVALID_REQUEST,
                f"a request must be GenerateOptions, not {type(options).__name__}",
            )
        if options is not self.options and (invalid := invalid_reason(options)) is not None:
            return _error(ErrorCode.INVALID_REQUEST, invalid)  # a middleware's own request
        if self._target is not None:
            route = self._target.route
            current = core.routes.get(options.provider)
            if current is None or current.registration is not route.registration:
                return _error(
                    ErrorCode.NO_ADAPTER,
                    f"the registration this call was prepared against no longer serves "
                    f"provider {options.provider!r}",
                )
        else:
            found = core.routes.get(options.provider)
            if found is None:
                return _error(ErrorCode.NO_ADAPTER, core.no_adapter_message(options.provider))
            route = found
        registration = route.registration
        if not registration.acquire(self):
            return _error(
                ErrorCode.NO_ADAPTER,
                f"the adapter for provider {options.provider!r} is being disposed",
            )
        self._registration = registration
        self.retry_policy = route.retry_policy
        adapter = registration.adapter
        if route.idle_timeout != self.idle_timeout:
            self.idle_timeout = route.idle_timeout
            self._watch()
        if self._target is None:
            try:
                info = await validated_model_info(adapter, options.provider, options.model)
            except Exception as exc:
                if not isinstance(exc, LlmError) or exc.code != ErrorCode.INVALID_MODEL_INFO:
                    self._adapter_error = exc  # raised by the adapter's resolve_model()
                return Finish(reason=FinishError(failure=failure_of(exc)))
            try:
                config, _ = resolve_config(config_of(options), info)
            except LlmError as exc:
                return Finish(reason=FinishError(failure=exc.failure))
            options = apply_config(options, config)
            modalities = info.input_modalities
        else:
            modalities = self._target.input_modalities
        try:
            options = await project_images(options, modalities, adapter, core.image_attachments)
        except Exception as exc:
            if not isinstance(exc, LlmError):
                self._adapter_error = exc  # raised by the adapter's image_request_policy()
            return Finish(reason=FinishError(failure=failure_of(exc)))
        return adapter, _gate_replay(options, registration, core.routes)

    def _release(self) -> None:
        if self._registration is not None:
            self._registration.release(self)

    def _unsubscribe(self) -> None:
        if self._signal is not None and self._signal_key is not None:
            self._signal._unsubscribe(self._signal_key)
            self._signal_key = None


def current_call() -> Call | None:
    """The call whose middleware chain is running in this task (None outside one).

    For middleware: the stream says what the adapter sent; the call says what
    stopped it when it was cancelled (`Call.stopped_by`) and its bounded
    labels (`Call.labels`).
    """
    call = CURRENT_CALL.get(None)
    if type(call) is Call and call._chained:
        return call
    return None


def _link(middleware: Middleware, inner: Next) -> Next:
    def nxt(options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        return middleware(options, inner)

    return nxt


def _gate_replay(
    options: GenerateOptions, registration: Registration, routes: Mapping[str, Route]
) -> GenerateOptions:
    """Strip replay state that this registration's adapter may not see.

    An assistant message keeps its replay state only when the adapter instance
    serving this call currently owns the provider that produced the message.
    """
    messages = options.messages
    kept = None
    for i, message in enumerate(messages):
        source = message.source
        if type(source) is not ModelSource or source.replay_state is None:
            continue
        owner = routes.get(source.provider)
        if owner is not None and owner.registration is registration:
            continue
        if kept is None:
            kept = list(messages)
        kept[i] = msgspec.structs.replace(
            message, source=msgspec.structs.replace(source, replay_state=None)
        )
    if kept is None:
        return options
    return msgspec.structs.replace(options, messages=tuple(kept))
