"""What the supervisor and its workers say to each other about a reload, one JSON line each.

The supervisor writes to a worker's stdin; the worker writes to its stdout
after its ready line. Both ends already exist (stdin's end of file is how a
worker learns that its supervisor is gone; stdout carries the ready line).

* supervisor -> worker: `ReloadOrder` (read the file again and answer with
  ticket T), `ReloadAnswer` (the report of the round worker asked for);
* worker -> supervisor: `ReloadDone` (this worker's outcome for ticket T),
  `ReloadAll` (a ``reload`` frame reached this worker: reload everyone).

A line longer than `MAX_LINE` or one that does not decode is ignored (and
logged): nothing a worker prints can stop the supervisor.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Final

import msgspec
import trio

from ...gateway._protocol import ReloadReport, WorkerReload

__all__ = [
    "MAX_LINE",
    "RELOAD_SECONDS",
    "ReloadAll",
    "ReloadAnswer",
    "ReloadDone",
    "ReloadOrder",
    "encode_line",
    "lines",
]

log = logging.getLogger("llmrt.workers")

#: The longest line either side reads (a report of many workers fits many times over).
MAX_LINE: Final = 1 << 20
#: How long a reload round waits for every worker's answer.
RELOAD_SECONDS: Final = 30.0


class _Line(msgspec.Struct, frozen=True, kw_only=True, tag_field="op"):
    ticket: int


class ReloadOrder(_Line, frozen=True, tag="reload"):
    pass


class ReloadAnswer(_Line, frozen=True, tag="report"):
    report: ReloadReport


class ReloadDone(_Line, frozen=True, tag="done"):
    result: WorkerReload


class ReloadAll(_Line, frozen=True, tag="reload-all"):
    pass


ToWorker = ReloadOrder | ReloadAnswer
ToSupervisor = ReloadDone | ReloadAll

_to_worker = msgspec.json.Decoder(ToWorker)
_to_supervisor = msgspec.json.Decoder(ToSupervisor)


def encode_line(line: ToWorker | ToSupervisor) -> bytes:
    return msgspec.json.encode(line) + b"\n"


async def _raw_lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[bytes]:
    pending = b""
    skipping = False
    while chunk := await stream.receive_some(65536):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if skipping:
                skipping = False  # the rest of a line that was too long
                continue
            yield line
        if len(pending) > MAX_LINE:
            log.warning("ignoring a line of more than %d bytes", MAX_LINE)
            pending = b""
            skipping = True


async def lines(
    stream: trio.abc.ReceiveStream, *, to_worker: bool
) -> AsyncIterator[ToWorker | ToSupervisor]:
    """The lines ``stream`` carries, decoded; undecodable ones are logged and skipped."""
    decoder: msgspec.json.Decoder[ToWorker] | msgspec.json.Decoder[ToSupervisor] = (
        _to_worker if to_worker else _to_supervisor
    )
    async for raw in _raw_lines(stream):
        if not raw.strip():
            continue
        try:
            yield decoder.decode(raw)
        except msgspec.DecodeError as exc:
            log.warning("ignoring a line that is not a reload message: %s", exc)
