"""The call task's half of a call: dispatch, as functions over the `Call`.

`_call.py` is the consumer's handle (entering, iterating, leaving,
aborting); this module is what the call's own task runs, `run_call`, and
every step it takes: the middleware chain's head, the innermost ``next``
(adapter selection, model info and config, image projection, the replay
gate), forwarding each chunk into the call's mailbox, and the one terminal
finish. Functions over the call rather than methods: the task's coroutine
is ``run_call(call)``, so no bound method or helper object exists per
call, and the two halves of the one call actor sit in two files. They
share the call's slots (this module is the only other writer of them).

The three points a hook on the data path attaches to, each one line:

* `_hand_to_adapter`: the effective request (after config, images and the
  replay gate) handed to the adapter's ``stream``;
* the forwarding step of `run_call`'s loop (``box.put_nowait(chunk)``);
* `_finish`: the terminal item chosen and delivered.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Mapping

import msgspec
import trio

from llmrt._adapter import Adapter
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
from llmrt._request import GenerateOptions
from llmrt._stop_hooks import enter_call
from llmrt._validate import invalid_reason

from ._call import Call, Middleware, Next, _error, _Raise
from ._prepare import (
    apply_config,
    config_of,
    project_images,
    resolve_config,
    validated_model_info,
)
from ._registration import Registration
from ._topology import Route
from .call_log import CallRecorder

__all__ = ["run_call", "CLOSE_TIMEOUT"]

log = logging.getLogger("llmrt.actors")

_CONTENT = frozenset({BlockStart, TextDelta, ReasoningDelta, ToolCallDelta, BlockEnd})
#: How long closing an adapter's iterator may take after a call ended.
CLOSE_TIMEOUT = 5.0


def _not_a_chunk(cls: type) -> Finish:
    return _error(
        ErrorCode.PROTOCOL, f"the adapter yielded {cls.__name__}, which is not a StreamChunk"
    )


async def run_call(call: Call) -> None:
    """The call task: adapter work under `_scope`, then delivery of the terminal item.

    One coroutine on purpose: a parked call holds one frame here, not two.
    Its locals are few on purpose too: trio keeps this frame twice (the
    coroutine and the frame object it inspects at spawn), so each name costs
    16 B per in-flight call. What is needed only before or after the adapter
    work lives in the helpers (`_refusal`, `_priced`, `_finish`, `_ended_task`).
    """
    box = call._box
    # The adapter work `_ended_task` counts (``started`` None: the call did none).
    forwarded = dropped = 0
    started: float | None = None
    first = ended = 0.0
    # When the finish went into the box, if not at ``ended`` (0.0: at ``ended``).
    delivered_at = 0.0
    middleware_failed = False
    # Whether the call's scope is still to be left (a stopped call leaves it last).
    scope_open = False
    try:
        # Stopped before it started, or refused before middleware, lookup and
        # I/O (where the gateway refuses the same request, before any call starts).
        item: Finish | _Raise | None = _refusal(call)
        if item is None:
            # The clock object and method calls on it and on ``box``: no bound
            # method object per call lives in this frame.
            clock = trio.lowlevel.current_clock()
            finish: Finish | None = None
            error: Exception | None = None
            source: AsyncIterator[StreamChunk] | None = None
            saw_block = False
            started = first = call._watch_last = clock.current_time()
            call._watch()
            enter_call(call)  # for llmrt.adapter.close_on_stop and `current_call`
            # The scope entered and left by hand: a ``with`` would keep its bound
            # ``__exit__`` (64 B) in this frame for the whole call.
            call._scope.__enter__()
            try:
                try:
                    opened = await _chain_head(call)
                    if isinstance(opened, Finish):
                        finish = opened
                    else:
                        source = opened
                        record = None if call._chained else call._record
                        async for chunk in source:
                            call._watch_last = clock.current_time()
                            if call._cause is not None:
                                break
                            if record is not None:  # the call log: time, chunk
                                record.times.append(call._watch_last)
                                record.chunks.append(chunk)
                            cls = type(chunk)
                            if cls is Finish:
                                finish = chunk  # type: ignore[assignment]
                                break
                            if cls in _CONTENT:
                                saw_block = True
                            elif cls is UsageChunk:
                                chunk = _priced(call, chunk, record)
                            else:
                                finish = _not_a_chunk(cls)
                                break
                            if not forwarded:
                                first = call._watch_last
                            forwarded += 1
                            # Where each chunk is forwarded: into the consumer's mailbox.
                            if not box.put_nowait(chunk):
                                await _put_waiting(call, chunk)
                except Exception as exc:
                    error = exc  # the adapter's or a middleware's: `_finish` tells which
                finally:
                    # The stopped call's usual end: the adapter's stream ended (its read
                    # on the closed connection ended the body, or the stop's Cancelled
                    # ended it), so there is nothing to close or drain; its lease is
                    # released with the bookkeeping (`_ended_task`).
                    if finish is not None or not _nothing_open(call, source):
                        dropped = await _close_work(call, source, finish is not None)
            except BaseException as exc:  # the stop's Cancelled, caught here; or an outer one
                if not call._scope.__exit__(type(exc), exc, exc.__traceback__):
                    raise
            else:
                # A stopped call leaves its cancelled scope in its bookkeeping step:
                # until then no checkpoint runs in it but `cancel_shielded_checkpoint`.
                scope_open = call._cause is not None or box.gone
                if not scope_open:
                    call._scope.__exit__(None, None, None)
            ended = clock.current_time()
            if box.gone:
                # The consumer left: no finish is made for nobody, and no put raises.
                middleware_failed = _raised_by_middleware(call, error, source) and (
                    call._cause is None or finish is not None
                )
                if call._record is not None:  # but the call log still records how it ended
                    call._record.end(_finish(call, finish, error, source, saw_block))
                return
            item = _finish(call, finish, error, source, saw_block)
            middleware_failed = type(item) is _Raise
            if call._record is not None:
                call._record.end(item)  # the call log: the record is handed over
        if not box.put_nowait(item):
            if scope_open:  # the wait below is a checkpoint: not in the cancelled scope
                scope_open = False
                call._scope.__exit__(None, None, None)
            await box.put(item)
            delivered_at = trio.current_time()
        if type(item) is Finish:
            call._delivered = item
    except trio.BrokenResourceError:
        pass  # the consumer left before the end: nobody to tell
    finally:
        if started is not None and (call._cause is not None or box.gone):
            # A call stopped during its adapter work: its unwinding step did only
            # what its one finish needs (the finish is in the box, or nobody is
            # left to take one). Leaving its scope, releasing its lease and the
            # bookkeeping below get a step of their own, so
            # the unwinding step stays short: the upstream's task, woken by the
            # stop's close, shares that step's scheduler batch and may wait
            # behind it. A call stopped before it started has no upstream.
            await trio.lowlevel.cancel_shielded_checkpoint()
        if scope_open:
            call._scope.__exit__(None, None, None)
        _ended_task(
            call,
            middleware_failed,
            forwarded,
            dropped,
            started,
            first,
            ended,
            delivered_at,
        )


async def _put_waiting(call: Call, chunk: StreamChunk) -> None:
    """Wait for room in the full mailbox: the consumer is behind, so idle time does not count."""
    call._watch_paused = True
    try:
        await call._box.put(chunk)
    finally:
        call._watch_paused = False
        call._watch_last = trio.current_time()


def _refusal(call: Call) -> Finish | None:
    """The finish of a call that does no adapter work (None: it does some).

    Its first cause when it was stopped before its task ran; ``INVALID_REQUEST``
    for a request that breaks its Struct's constraints.
    """
    if call._cause is not None:
        return call._cause
    if call._checked:
        return None
    invalid = invalid_reason(call.options)
    return None if invalid is None else _error(ErrorCode.INVALID_REQUEST, invalid)


def _priced(call: Call, chunk: StreamChunk, record: CallRecorder | None) -> StreamChunk:
    """A ``usage`` chunk with the call's price (the call log keeps the price too)."""
    core = call._core
    series = call._series
    assert series is not None  # set by __aenter__ before the task starts
    chunk = core.pricer.priced(core, series, call.options, chunk)
    if record is not None:
        record.chunks[-1] = chunk
    return chunk


def _nothing_open(call: Call, source: AsyncIterator[StreamChunk] | None) -> bool:
    """Whether the adapter's (and any middleware's) stream has already ended."""
    inner = call._inner
    if inner is not None and inner is not source and getattr(inner, "ag_frame", True) is not None:
        return False
    return source is None or getattr(source, "ag_frame", True) is None


async def _close_work(call: Call, source: AsyncIterator[StreamChunk] | None, finished: bool) -> int:
    """Close what the call opened and release its lease; the chunks dropped after a finish."""
    dropped = 0
    if source is not None:
        if finished and call._cause is None:
            dropped = await _drain(call, source)
        await _aclose(source)
    if call._inner is not None and call._inner is not source:
        # A middleware that stopped iterating ``next`` without closing it.
        await _aclose(call._inner)
    _release(call)
    return dropped


def _ended_task(
    call: Call,
    middleware_failed: bool,
    forwarded: int,
    dropped: int,
    started: float | None,
    first: float,
    ended: float,
    delivered_at: float,
) -> None:
    """The call task's last step: close the box, stop watching, count the call out.

    ``forwarded`` .. ``ended``: its adapter work (``started`` None: none);
    ``delivered_at``: when its finish went into the box (0.0: at ``ended``, or if the call
    did no adapter work, now);
    what it delivered is ``call._delivered`` (None: the consumer left first).
    """
    _release(call)
    call._box.close()
    call._task_done = True
    core = call._core
    series = call._series
    assert series is not None  # set by __aenter__ before the task starts
    if call._stop_counted:
        core.stopper.ended()
    if call._watch_entry is not None:
        core.watchdog.forget(call._watch_entry)
        call._watch_entry = None
    delivered = call._delivered
    latency = None
    if delivered is not None and delivered is call._cause and call._aborted_at is not None:
        latency = (delivered_at or ended or trio.current_time()) - call._aborted_at
    core.call_ended(
        call,
        series,
        delivered,
        middleware_failed,
        latency,
        forwarded,
        dropped,
        started,
        first,
        ended,
    )
    if call._done is not None:
        call._done.set()


async def _chain_head(call: Call) -> AsyncIterator[StreamChunk] | Finish:
    """The head of the chain: the outermost middleware's stream, or (empty chain) the adapter's.

    The empty chain is the innermost ``next`` opened at once, so a call
    without middleware iterates the adapter's own stream: no generator
    layer per chunk. A Finish: the call ended before any stream (lookup,
    config or image projection failed).
    """
    middlewares = call._core.middlewares
    if not middlewares:
        opened = await _open(call, call.options)
        if not isinstance(opened, Finish):
            call._inner = opened
        return opened
    call._chained = True  # `current_call` answers from now on
    nxt: Next = functools.partial(_innermost, call)
    for middleware in reversed(middlewares):
        nxt = _link(middleware, nxt)
    return nxt(call.options)


def _finish(
    call: Call,
    finish: Finish | None,
    error: Exception | None,
    source: AsyncIterator[StreamChunk] | None,
    saw_block: bool,
) -> Finish | _Raise:
    """Where the finish is made: the first cause, a middleware error, or the corrected finish.

    The one terminal item `run_call` delivers (a `_Raise` re-raises a
    middleware's exception in the consumer). ``error``: what the call's
    stream raised (`_raised_by_middleware` tells whose it is).
    """
    if call._cause is not None and finish is None:
        return call._cause
    if error is not None and _raised_by_middleware(call, error, source):
        return _Raise(error)
    if finish is None:
        if error is not None:
            return _adapter_failed(call, error)
        return _error(ErrorCode.PROTOCOL, "the adapter's stream ended without a finish chunk")
    kind = type(finish.reason)
    if kind is FinishStop and not saw_block:
        return _error(ErrorCode.EMPTY_RESPONSE, "the model returned no content")
    if (kind is FinishError or kind is FinishAborted) and not call._chained:
        # Straight from the adapter (no middleware): the one redaction point.
        return _scrub_finish(call, finish)
    return finish


def _raised_by_middleware(
    call: Call, error: Exception | None, source: AsyncIterator[StreamChunk] | None
) -> bool:
    """Whether ``error`` left the middleware chain: not the adapter's own exception, which
    it is when the call iterated the adapter's stream itself (the empty chain)."""
    return error is not None and (source is None or source is not call._inner)


def _scrub(call: Call, failure: LlmFailure) -> LlmFailure:
    """The one redaction point of an adapter's failure (docs/security.md, "Secrets").

    The serving adapter's keys (`Adapter.redactor`), then the secrets the
    process holds (`LlmRuntime.redacting`: a gateway's token), are removed
    by value, whatever the adapter is (HTTP, plugin, scripted); nothing
    after this point (middleware, consumer, gateway frames) redacts again.
    """
    return call._core.secrets.redactor.failure(_redactor(call).failure(failure))


def _scrub_finish(call: Call, finish: Finish) -> Finish:
    """``finish`` with its failure through `_scrub` (the same object when clean)."""
    return call._core.secrets.redactor.finish(_redactor(call).finish(finish))


def _redactor(call: Call) -> Redactor:
    """The serving adapter's redactor (phrasings only before one was selected)."""
    registration = call._registration
    if registration is not None:
        try:
            return registration.adapter.redactor()
        except Exception:
            log.warning("an adapter's redactor() failed; redacting phrasings only")
    return Redactor()


async def _drain(call: Call, source: AsyncIterator[StreamChunk]) -> int:
    """Count what the adapter still emits after its finish, without waiting for it.

    Runs inside the call's own scope, cancelled here: the adapter's work is
    over once it finished, and a cancel scope of its own would cost the
    call as much as a few chunks. The `Cancelled` an adapter meets if it
    waits is swallowed: only shielded closing runs in the scope after this,
    and any outer cancellation is raised again at the next checkpoint.
    """
    dropped = 0
    call._scope.cancel()
    try:
        async for _ in source:
            dropped += 1
    except (Exception, trio.Cancelled):
        pass  # the adapter's own failure after its finish changes nothing
    return dropped


# ---- dispatch ------------------------------------------------------------------------


def _adapter_failed(call: Call, exc: Exception) -> Finish:
    """The error finish for an exception the adapter raised (kept in `adapter_error`)."""
    failure = failure_of(exc)
    clean = _scrub(call, failure)
    if clean is not failure and isinstance(exc, LlmError):
        # In-process diagnostics keep the adapter's error and where it was
        # raised, but not a secret the one redaction point removed.
        exc = LlmError.from_failure(clean).with_traceback(exc.__traceback__)
    call._adapter_error = exc
    return Finish(reason=FinishError(failure=clean))


async def _open(call: Call, options: GenerateOptions) -> AsyncIterator[StreamChunk] | Finish:
    """The innermost ``next`` opened: select the adapter, then start its stream."""
    selected = await _select(call, options)
    if isinstance(selected, Finish):
        return selected
    adapter, options = selected
    log_ = call._core.call_log
    if log_ is not None and call.log_id is not None and call._registration is not None:
        # The call log: the request exactly as the adapter receives it.
        call._record = log_.begin(
            call.log_id, options, call._registration.id, adapter, call._watch_last
        )
    try:
        refusal = refuse_unsupported(adapter, options)
        if refusal is None:
            return _hand_to_adapter(adapter, options)
    except Exception as exc:
        return _adapter_failed(call, exc)
    return Finish(reason=FinishError(failure=refusal))


def _hand_to_adapter(adapter: Adapter, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
    """Where the effective request is handed to the adapter: its config resolved, images
    projected, replay state gated. The adapter's stream is what the call iterates."""
    return adapter.stream(options)


def _innermost(call: Call, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
    if call._inner is not None:
        raise RuntimeError("a middleware called next() twice for one call")
    call._inner = _terminal(call, options)
    return call._inner


async def _terminal(call: Call, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
    """The innermost ``next`` under middleware: `_open`, then the adapter's chunks.

    Adapter failures become an error finish here, so middleware sees them
    as chunks and any exception that leaves the chain is a middleware's.
    """
    source = await _open(call, options)
    if isinstance(source, Finish):
        yield source
        return
    record = call._record
    try:
        async for chunk in source:
            if record is not None:  # the call log: the adapter's chunk, before any middleware
                record.times.append(trio.current_time())
                record.chunks.append(chunk)
            # The adapter's own finish is redacted before any middleware sees it.
            yield _scrub_finish(call, chunk) if type(chunk) is Finish else chunk
    except Exception as exc:
        yield _adapter_failed(call, exc)
    finally:
        await _aclose(source)
        _release(call)


async def _select(call: Call, options: GenerateOptions) -> tuple[Adapter, GenerateOptions] | Finish:
    """Pick the registration, lease it, resolve the config, gate replay state."""
    core = call._core
    if not isinstance(options, GenerateOptions):
        return _error(
            ErrorCode.INVALID_REQUEST,
            f"a request must be GenerateOptions, not {type(options).__name__}",
        )
    if options is not call.options and (invalid := invalid_reason(options)) is not None:
        return _error(ErrorCode.INVALID_REQUEST, invalid)  # a middleware's own request
    if call._target is not None:
        route = call._target.route
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
    if not registration.acquire(call):
        return _error(
            ErrorCode.NO_ADAPTER,
            f"the adapter for provider {options.provider!r} is being disposed",
        )
    call._registration = registration
    call.retry_policy = route.retry_policy
    adapter = registration.adapter
    if route.idle_timeout != call.idle_timeout:
        call.idle_timeout = route.idle_timeout
        call._watch()
    if call._target is None:
        try:
            info = await validated_model_info(
                adapter, options.provider, options.model, registration.model_infos
            )
        except Exception as exc:
            if not isinstance(exc, LlmError) or exc.code != ErrorCode.INVALID_MODEL_INFO:
                call._adapter_error = exc  # raised by the adapter's resolve_model()
            return Finish(reason=FinishError(failure=failure_of(exc)))
        try:
            config, _ = resolve_config(config_of(options), info)
        except LlmError as exc:
            return Finish(reason=FinishError(failure=exc.failure))
        options = apply_config(options, config)
        modalities = info.input_modalities
    else:
        modalities = call._target.input_modalities
    try:
        options = await project_images(options, modalities, adapter, core.image_attachments)
    except Exception as exc:
        if not isinstance(exc, LlmError):
            call._adapter_error = exc  # raised by the adapter's image_request_policy()
        return Finish(reason=FinishError(failure=failure_of(exc)))
    return adapter, _gate_replay(options, registration, core.routes)


def _release(call: Call) -> None:
    if call._registration is not None:
        call._registration.release(call)


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
