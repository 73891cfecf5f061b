"""Reading a call log back: its records, one by id, and a call rebuilt from its record."""

from __future__ import annotations

import os
from collections.abc import Iterator

from llmrt._assembler import BlockAssembler
from llmrt._chunks import Finish
from llmrt._errors import DecodeError

from ._record import CallRecord, LogRecord, decode_record
from ._sink import log_files, read_lines

__all__ = ["assemble", "find_record", "read_records"]


def read_records(directory: str | os.PathLike[str]) -> Iterator[LogRecord]:
    """Every record of the call log in ``directory``, oldest first (bad lines skipped)."""
    for line in read_lines(log_files(directory)):
        try:
            yield decode_record(line)
        except DecodeError:
            continue


def find_record(directory: str | os.PathLike[str], record_id: str) -> LogRecord | None:
    """The record called ``record_id`` (the newest if several), or None."""
    found = None
    needle = f'"id":"{record_id}"'.encode()
    for line in read_lines(log_files(directory)):
        if needle in line:
            try:
                record = decode_record(line)
            except DecodeError:
                continue
            if record.id == record_id:
                found = record
    return found


def assemble(record: CallRecord) -> BlockAssembler:
    """The logged chunks pushed through a `BlockAssembler`: the answer as the consumer built it.

    The chunks are the adapter's; the terminal finish is the one the consumer
    received (the same unless the call corrected it or redacted a failure).
    """
    assembler = BlockAssembler()
    for chunk in record.chunks:
        if type(chunk) is not Finish:
            assembler.push(chunk)
    if record.finish is not None:
        assembler.push(record.finish)
    return assembler
