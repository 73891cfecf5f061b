"""`CallLog`: records made on the call path, a bounded queue, and one writer task.

A call pays for its record only what cannot wait: at the hand-off to the
adapter a `CallRecorder` keeps a reference to the request (immutable), per
raw chunk its time and the chunk are appended to two lists, and at the end
the recorder goes into the queue, a deque whose bound drops (and counts)
what a slow or stuck sink cannot take. Never an await, never a lock, never
encoding on the call path.

The writer task (in the runtime's nursery) takes the queue's records in
batches; a worker thread turns them into JSON lines (the chunks and their
times as the call path took them, the digest, usage) and removes secrets from
each line, the log's one redaction point: the serving adapter's `Redactor`,
then the secrets the process held when the call ended, remove their values
(and JSON and URL forms) wherever they occur in the line, and the adapter's
own failures among the raw chunks are redacted as the call path redacts a
failure (values and credential-looking phrasings). Then the batch goes to the
sink. A sink that raises (a full disk's ``ENOSPC``) loses that batch, counted
as ``failed``; the calls go on.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

import attrs
import msgspec
import trio

from llmrt._chunks import Finish, StreamChunk
from llmrt._redact import Redactor
from llmrt._request import GenerateOptions

from .._statistics import CallLogStatistics
from ._record import CallRecord, RetryRecord, RoutedRecord, usage_of
from ._sink import CallLogSink

__all__ = ["CallLog", "CallRecorder"]

log = logging.getLogger("llmrt.call_log")

#: Records one worker-thread pass encodes and one sink write receives, at most.
BATCH = 512
#: Raw chunks a batch holds, at most (past its first record): a batch's lines are
#: fresh memory, and a few megabytes of it at a time cost more to touch than the
#: extra thread round trips of smaller batches (about 0.03 us per chunk here).
BATCH_CHUNKS = 16384


def _take_batch(queue: collections.deque[_Queued]) -> list[_Queued]:
    """The next batch off ``queue``: up to `BATCH` records and `BATCH_CHUNKS` raw chunks."""
    batch: list[_Queued] = []
    chunks = 0
    while queue and len(batch) < BATCH and chunks < BATCH_CHUNKS:
        item = queue.popleft()
        batch.append(item)
        chunks += len(item.chunks) if type(item) is CallRecorder else 1
    return batch


#: How long closing waits for the queue to be written.
CLOSE_TIMEOUT = 10.0

_encoder = msgspec.json.Encoder()


@attrs.define(eq=False, slots=True)
class CallRecorder:
    """One call's record while it runs: what the call path hands over, unencoded."""

    _log: CallLog
    id: str
    at: float
    #: trio time of the call's start (the record's ``start``).
    t0: float
    request: GenerateOptions
    registration: int
    adapter: Any
    #: Per raw chunk its trio time, and the chunk: two appends per chunk on the call
    #: path (no tuple, no object the collector must track), and the writer encodes
    #: the lists as they are (no copy, no new float per chunk).
    times: list[float] = attrs.field(factory=list)
    chunks: list[StreamChunk] = attrs.field(factory=list)
    finish: Finish | None = None
    middleware_error: str | None = None
    ended: float = 0.0
    #: The secrets the process held when the call ended (removed from the record).
    held: Redactor | None = None

    def end(self, item: object) -> None:
        """The call's terminal item (a finish, or a middleware's exception): hand it over."""
        self.ended = trio.current_time()
        if type(item) is Finish:
            self.finish = item
        else:
            exc = getattr(item, "exc", item)
            self.middleware_error = type(exc).__name__
        self.held = self._log.held()
        self._log.submit(self)

    def record(self, redactors: tuple[Redactor, ...] = ()) -> CallRecord:
        """The record as it is written (in the writer's thread).

        The adapter's own failures among the chunks go through ``redactors``
        as the call path's failures do (values and phrasings): a finish is
        where provider text quoting a credential usually lands.
        """
        request = _encoder.encode(self.request)
        t0 = self.t0
        chunks = self.chunks  # the call has ended: the writer owns the lists now
        if chunks and type(chunks[-1]) is Finish:
            chunks[-1] = _scrubbed(chunks[-1], redactors)
        adapter = self.adapter
        return CallRecord(
            id=self.id,
            at=self.at,
            provider=self.request.provider,
            registration=self.registration,
            adapter=type(adapter).__name__,
            model=self.request.model,
            digest="sha256:" + hashlib.sha256(request).hexdigest(),
            request=msgspec.Raw(request),  # type: ignore[arg-type]  # encoded once, hashed once
            # The times as taken: no new float per chunk (an offset each cost the
            # writer about 90 ns per chunk, its longer digits 20 ns more to encode).
            start=t0,
            times=self.times,  # type: ignore[arg-type]  # a list encodes as a tuple does
            chunks=chunks,  # type: ignore[arg-type]
            finish=self.finish,
            usage=usage_of(chunks),
            duration=round(max(0.0, self.ended - t0), 6),
            middleware_error=self.middleware_error,
        )

    def redactor(self) -> Redactor | None:
        """The serving adapter's redactor (None if it fails to give one)."""
        try:
            made = self.adapter.redactor()
        except Exception:
            log.warning("an adapter's redactor() failed; the call log redacts phrasings only")
            return None
        return made if isinstance(made, Redactor) else None


def _scrubbed(finish: Finish, redactors: tuple[Redactor, ...]) -> Finish:
    for redactor in redactors:
        finish = redactor.finish(finish)
    return finish


_Queued = CallRecorder | RetryRecord | RoutedRecord


@attrs.define(eq=False)
class CallLog:
    """A runtime's call log: ``begin`` / ``submit`` on the call path, ``run`` as its writer.

    ``held`` gives the redactor of the secrets the process holds (a gateway's
    token); it is read per batch, so a secret held later is removed too.
    """

    sink: CallLogSink
    held: Callable[[], Redactor] = attrs.field(factory=lambda: Redactor)
    queue_size: int = 4096
    max_record_bytes: int = 16 << 20
    _queue: collections.deque[_Queued] = attrs.field(factory=collections.deque, init=False)
    _wake: trio.Event | None = attrs.field(default=None, init=False)
    _prefix: str = attrs.field(factory=lambda: secrets.token_hex(4), init=False)
    _count: int = attrs.field(default=0, init=False)
    _writing: int = attrs.field(default=0, init=False)
    _closing: bool = attrs.field(default=False, init=False)
    _done: trio.Event = attrs.field(factory=trio.Event, init=False)
    recorded: int = attrs.field(default=0, init=False)
    written: int = attrs.field(default=0, init=False)
    dropped: int = attrs.field(default=0, init=False)
    failed: int = attrs.field(default=0, init=False)
    oversized: int = attrs.field(default=0, init=False)
    bytes_written: int = attrs.field(default=0, init=False)
    _warned: bool = attrs.field(default=False, init=False)

    # ---- the call path -----------------------------------------------------------------

    def new_id(self) -> str:
        """A record id: this log's random prefix and a counter."""
        self._count += 1
        return f"{self._prefix}-{self._count:x}"

    def begin(
        self, call_id: str, request: GenerateOptions, registration: int, adapter: Any, t0: float
    ) -> CallRecorder:
        """A call hands ``request`` to ``adapter``: its record begins."""
        return CallRecorder(self, call_id, time.time(), t0, request, registration, adapter)

    def submit(self, item: _Queued) -> None:
        """Queue a finished record, or drop and count it when the queue is full. Never blocks."""
        self.recorded += 1
        queue = self._queue
        if len(queue) >= self.queue_size:
            self.dropped += 1
            return
        queue.append(item)
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()

    def statistics(self) -> CallLogStatistics:
        return CallLogStatistics(
            recorded=self.recorded,
            written=self.written,
            dropped=self.dropped,
            failed=self.failed,
            oversized=self.oversized,
            queued=len(self._queue) + self._writing,
            bytes_written=self.bytes_written,
        )

    # ---- the writer --------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer task: batches from the queue, encoded in a thread, to the sink."""
        task_status.started()
        queue = self._queue
        try:
            while True:
                if not queue:
                    if self._closing:
                        return
                    self._wake = wake = trio.Event()
                    await wake.wait()
                    continue
                batch = _take_batch(queue)
                self._writing = len(batch)
                try:
                    await self._write(batch)
                finally:
                    self._writing = 0
        finally:
            self._done.set()
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                try:
                    await self.sink.aclose()
                except Exception:
                    log.exception("closing the call log's sink failed")

    async def _write(self, batch: list[_Queued]) -> None:
        held = self.held()
        blocking = getattr(self.sink, "write_blocking", None)
        try:
            if blocking is not None:
                # One thread hop for both: a loaded machine makes each hop cost milliseconds.
                lines, failure = await trio.to_thread.run_sync(
                    self._encode_and_write, blocking, batch, held
                )
            else:
                lines, failure = await trio.to_thread.run_sync(self._encode, batch, held), None
        except Exception:
            log.exception("encoding call log records failed")
            self.failed += len(batch)
            return
        if not lines:
            return
        try:
            if failure is not None:
                raise failure
            if blocking is None:
                await self.sink.write(lines)
        except Exception as exc:
            self.failed += len(lines)
            if not self._warned:  # once: a full disk would otherwise log per batch
                self._warned = True
                log.warning("the call log's sink failed (%s); records are dropped and counted", exc)
            return
        self.written += len(lines)
        self.bytes_written += sum(len(line) for line in lines)

    def _encode_and_write(
        self, write: Callable[[list[bytes]], None], batch: list[_Queued], held: Redactor
    ) -> tuple[list[bytes], Exception | None]:
        """`_encode`, then the sink's blocking write, in the same worker thread."""
        lines = self._encode(batch, held)
        if not lines:
            return lines, None
        try:
            write(lines)
        except Exception as exc:
            return lines, exc
        return lines, None

    def _encode(self, batch: list[_Queued], held: Redactor) -> list[bytes]:
        """The batch as redacted JSON lines (in a worker thread)."""
        lines = []
        bound = self.max_record_bytes
        #: Each adapter's redactor, asked once per batch (an HTTP adapter builds one per ask).
        owns: dict[int, Redactor | None] = {}
        for item in batch:
            own = None
            last = held
            if type(item) is CallRecorder:
                key = id(item.adapter)
                if key not in owns:
                    owns[key] = item.redactor()
                own = owns[key]
                last = item.held or held
                value: Any = item.record((own, last) if own is not None else (last,))
            else:
                value = item
            encoded = _encoder.encode(value)
            if (own is not None and own.holds_values) or last.holds_values:
                text = encoded.decode()
                if own is not None:
                    text = own.redact_values(text)
                encoded = last.redact_values(text).encode()
            line = encoded + b"\n"
            if len(line) > bound:
                self.oversized += 1
                continue
            lines.append(line)
        return lines

    async def close(self) -> None:
        """Write what is queued (for at most `CLOSE_TIMEOUT` seconds), then end the writer."""
        self._closing = True
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()
        with trio.move_on_after(CLOSE_TIMEOUT):
            await self._done.wait()
