"""Call actors: one task per in-flight call; this module is the consumer's handle on it.

A call is one actor in two files: here the handle its consumer holds
(`Call`: entering starts the task, iterating takes chunks, leaving and
`Call.abort` stop it, plus the stop bookkeeping the runtime, registrations
and the watchdog reach through `CallHost`, `Leaseholder` and `Watched`);
in `_dispatch.py` what the call's task runs (`run_call`: the middleware
chain, adapter selection, the replay gate, forwarding, the terminal
finish).

The call task runs the middleware chain and the adapter iteration under
one cancel scope and hands chunks to the consumer through a bounded
single-producer `Mailbox` (`_mailbox.py`, a trio channel in interface): a
chunk goes straight to a parked consumer or into a small buffer, and a
side blocks only when the buffer is full or empty. So the consumer usually drains a batch of chunks
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
import trio

from llmrt._attachment import ImageAttachments
from llmrt._chunks import (
    Finish,
    FinishAborted,
    FinishError,
    StreamChunk,
)
from llmrt._errors import ErrorCode, LlmFailure
from llmrt._request import GenerateOptions, ModelModality
from llmrt._retry import ResolvedRetryPolicy
from llmrt._stop_hooks import CURRENT_CALL

from ._abort import AbortSignal
from ._mailbox import Mailbox
from ._misuse import STREAM_FORM, not_entered, not_in_trio
from ._pricing import Pricer
from ._registration import Leaseholder, Registration
from ._secrets import HeldSecrets
from ._stats import CallSeries
from ._stopper import Stopper
from ._topology import Route
from ._watchdog import Entry, Watchdog
from .call_log import CallLog, CallRecorder

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
    #: Where calls are recorded (None: the call log is off).
    call_log: CallLog | None
    #: Prices each ``usage`` chunk (`_pricing.Pricer.priced`).
    pricer: Pricer

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
        """Count ``call`` out: what it delivered (None: the consumer left first) and its
        adapter work (see `_runtime.RuntimeCore.call_ended`)."""
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
    #: True when whoever started the call already found ``options`` valid (a
    #: retrying call checks them once, before its first attempt): `_refusal` skips it.
    _checked: bool = attrs.field(default=False, init=False)
    #: The statistics series this call counts into (set when it starts).
    _series: CallSeries | None = attrs.field(default=None, init=False)
    #: trio time of the abort that stopped this call (None: none did).
    _aborted_at: float | None = attrs.field(default=None, init=False)
    #: What the adapter asked to close the moment the call stops (`llmrt.adapter.close_on_stop`).
    _closers: list[Callable[[], None]] | None = attrs.field(default=None, init=False)
    #: True once the runtime's `Stopper` counts this call's stop (its task ending counts it out).
    _stop_counted: bool = attrs.field(default=False, init=False)
    #: The call log's record of this call, from the hand-off to the adapter (None: not logged).
    _record: CallRecorder | None = attrs.field(default=None, init=False)
    _log_id: str | None = attrs.field(default=None, init=False)
    #: Its neighbours in its runtime's calls in flight (`_runtime.InFlight`): a list
    #: threaded through the calls, 16 B a call where a set costs up to 100.
    _older: Call | None = attrs.field(default=None, init=False)
    _newer: Call | None = attrs.field(default=None, init=False)
    #: Its neighbours among its registration's lease holders (`Registration.acquire`).
    _lease_older: Leaseholder | None = attrs.field(default=None, init=False)
    _lease_newer: Leaseholder | None = attrs.field(default=None, init=False)

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
    def ready(self) -> bool:
        """Whether the next chunk (or the finish) is already here: taking it will not wait.

        For a consumer that writes what it takes: what is ready can go out in
        one write instead of one per chunk.
        """
        return self._box.ready

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
    def log_id(self) -> str | None:
        """The id of this call's record in the call log (None: the log is off)."""
        if self._log_id is None and self._core.call_log is not None:
            self._log_id = self._core.call_log.new_id()
        return self._log_id

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
        """Start the call task (a cancellation point). A call can be entered once.

        The call is its own context manager: an in-flight call is one object
        less that way, which counts at tens of thousands of calls.
        """
        try:
            # A cancellation point; the schedule point is the caller's first wait
            # for a chunk (a yield here would delay the call task by one more
            # pass of the run loop, on the way to its first byte).
            await trio.lowlevel.checkpoint_if_cancelled()
        except RuntimeError:  # not in a trio task (asyncio's, or none)
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
        # No schedule point after the spawn: the call task starts only once the
        # caller waits, so what the caller does first (an abort) comes first.
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
            # The adapter's closers first, before any checkpoint: the provider
            # sees the close at once. Then the stop, through the stopper, so an
            # outer scope cancelling thousands of consumers stops their calls in
            # waves too (a producer parked inside the scope gets Cancelled); then
            # leave(), which wakes a producer parked outside it.
            self._run_closers()
            if not self._stop_counted:
                self._stop_counted = True
                self._core.stopper.stop(self._scope)
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

    def _abort_with(self, code: str, message: str) -> None:
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
