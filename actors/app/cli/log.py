"""``llmrt log show ID`` and ``llmrt log tail``: logged calls, printed as ``llmrt call`` prints one.

The answer's text on stdout, the rest on stderr (a header naming the
record, who served it and its request's digest; reasoning, tool calls, the
usage, price and timing line, the finish), through ``llmrt call``'s own
printer (`_call_output`). A retried call prints its attempts as ``llmrt call
--retry`` does; a routed call names the deployments it tried, then the one
that served. ``--json`` prints the records themselves, one JSON line each.

The folder is ``--dir``, else ``[call_log] directory`` of the configuration
(docs/call-log.md).
"""

from __future__ import annotations

import argparse
import datetime
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import trio

import llmrt
from llmrt import Finish, FinishAborted, FinishError, ReasoningDelta, RetryScheduled, TextDelta

from ...call_log import (
    CallRecord,
    LogRecord,
    RetryRecord,
    decode_record,
    find_record,
    log_files,
    read_records,
)
from ._call_output import RED, HumanOutput, JsonOutput, Output, Style, report_finish, usage_parts
from ._command import CommandError, Streams

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["add_arguments", "follow", "print_record", "run"]

#: How often ``tail --follow`` looks for new lines.
POLL_SECONDS = 0.25


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="{show,tail}")
    show = actions.add_parser("show", help="print one logged call by its id")
    show.add_argument("id", help="the record's id (llmrt log tail shows them)")
    tail = actions.add_parser("tail", help="print the last logged calls (and new ones with -f)")
    tail.add_argument("-n", type=int, default=10, metavar="N", help="how many (default 10)")
    tail.add_argument(
        "-f", "--follow", action="store_true", help="then print calls as they are logged"
    )
    for sub in (show, tail):
        sub.add_argument("--dir", default=None, help="the call log's folder ([call_log] directory)")
        # Also after the action (``llmrt log tail --config F``); absent, ``llmrt log``'s own.
        sub.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help="config file")
        sub.add_argument("--json", action="store_true", help="the records as JSON lines")
        sub.add_argument(
            "--color", choices=("auto", "always", "never"), default="auto", help="ANSI colour"
        )


def _directory(args: argparse.Namespace, config: Config) -> Path:
    if args.dir is not None:
        return Path(args.dir)
    from ._serving import call_log_settings

    settings = call_log_settings(argparse.Namespace(), config)
    if settings is None or settings.directory is None:
        raise CommandError("no call log folder: pass --dir DIR or set [call_log] directory")
    return Path(settings.directory)


def run(args: argparse.Namespace, config: Config, streams: Streams) -> int:
    directory = _directory(args, config)
    if not directory.is_dir():
        raise CommandError(f"no call log in {os.fspath(directory)!r}")

    def output() -> Output:
        if args.json:
            return JsonOutput(streams.out, streams.err)
        style = Style.choose(args.color, streams.err, streams.environ)
        return HumanOutput(streams.out, streams.err, style)

    if args.action == "show":
        record = find_record(directory, args.id)
        if record is None:
            raise CommandError(f"no record {args.id!r} in {os.fspath(directory)!r}", status=1)
        return print_record(record, output(), directory)
    status = 0
    for record in list(read_records(directory))[-args.n :] if args.n > 0 else []:
        status = print_record(record, output(), directory)
    if args.follow:
        trio.run(follow, directory, lambda record: print_record(record, output(), directory))
    return status


def print_record(record: LogRecord, output: Output, directory: Path) -> int:
    """Print one record; the exit status ``llmrt call`` would have had."""
    if isinstance(output, JsonOutput):
        output.out.write(llmrt.encode(record).decode() + "\n")
        output.out.flush()
        return 0
    if isinstance(record, CallRecord):
        return _print_attempts(output, [record], [], record.finish)
    if isinstance(record, RetryRecord):
        output.note(
            f"retried call {record.id}: {record.provider}/{record.model}, {_when(record.at)}"
        )
        calls = []
        for attempt in record.attempts:
            found = find_record(directory, attempt.call) if attempt.call else None
            calls.append(found if isinstance(found, CallRecord) else None)
        return _print_attempts(output, calls, list(record.attempts), record.finish)
    tried = []
    if record.routing is not None:
        for routed in record.routing.attempts:
            tried.append(f"{routed.route}/{routed.model} {routed.code or 'served'}")
    output.note(f"routed call {record.id}: group {record.group}: {', '.join(tried) or 'none'}")
    served = find_record(directory, record.calls[-1]) if record.calls else None
    if isinstance(served, CallRecord) and served.finish is not None:
        return _print_attempts(output, [served], [], record.finish)
    if record.finish is not None:
        return report_finish(output, record.finish)
    return 1


def _when(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="milliseconds")


def _print_attempts(
    output: HumanOutput,
    calls: list[CallRecord | None],
    attempts: list[object],
    final: Finish | None,
) -> int:
    """The calls in order, as ``llmrt call`` (``--retry``) prints them live."""
    first = None
    total = 0.0
    for n, call in enumerate(calls):
        if call is None:
            output.note("[an attempt that reached no adapter]", RED)
            continue
        output.note(
            f"call {call.id}: {call.provider}/{call.model} via {call.adapter} "
            f"(registration {call.registration}), {_when(call.at)}, request {call.digest[:19]}"
        )
        for at, chunk in zip(call.offsets, call.chunks, strict=False):
            if type(chunk) is Finish:
                continue
            if first is None and type(chunk) in (TextDelta, ReasoningDelta):
                first = total + at
            output.event(chunk)
        total += call.duration
        retried = attempts[n] if n < len(attempts) else None
        code = getattr(retried, "code", None)
        if code is not None and call.finish is not None:
            reason = call.finish.reason
            if isinstance(reason, FinishError | FinishAborted):
                delay = getattr(retried, "delay_ms", None) or 0.0
                output.event(RetryScheduled(attempt=n + 1, failure=reason.failure, delay_ms=delay))
    output.close()
    summary = usage_parts(output.assembler.usage, output.assembler.cost)
    if first is not None:
        summary.append(f"first token {1000 * first:.1f} ms")
    summary.append(f"total {1000 * total:.1f} ms")
    output.result(" | ".join(summary))
    if final is None:
        output.note("a middleware raised instead of finishing the call", RED)
        return 1
    return report_finish(output, final)


async def follow(
    directory: Path, handle: Callable[[LogRecord], object], *, limit: int | None = None
) -> None:
    """Hand every record logged from now on to ``handle`` (``limit``: stop after that many)."""
    offsets = {path: path.stat().st_size for path in log_files(directory)}
    seen = 0
    while limit is None or seen < limit:
        await trio.sleep(POLL_SECONDS)
        for path in log_files(directory):
            start = offsets.get(path, 0)
            try:
                data = await trio.to_thread.run_sync(_read_from, path, start)
            except OSError:
                continue
            end = data.rfind(b"\n") + 1  # a line still being written waits for the next look
            offsets[path] = start + end
            for line in data[:end].splitlines():
                try:
                    record = decode_record(line)
                except llmrt.DecodeError:
                    continue
                handle(record)
                seen += 1
                if limit is not None and seen >= limit:
                    return


def _read_from(path: Path, start: int) -> bytes:
    with open(path, "rb") as file:
        file.seek(start)
        return file.read()
