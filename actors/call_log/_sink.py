"""Where the call log's lines go: the `CallLogSink` protocol and the JSON Lines files.

A sink receives batches of complete lines (each one record, redacted,
ending with a newline) from the log's one writer task, never from a call.
A sink may be slow or fail: the calls never wait for it (the log drops and
counts what its queue cannot hold, and counts a batch whose write raised).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

import attrs
import trio

__all__ = ["CallLogSink", "JsonLinesSink", "log_files"]

_NAME = re.compile(r"^calls-(\d{6,})\.jsonl$")
#: The JSON Lines file's write buffer, in bytes.
WRITE_BUFFER = 1 << 20


@runtime_checkable
class CallLogSink(Protocol):
    """What the call log writes to."""

    async def write(self, lines: Sequence[bytes]) -> None:
        """Keep ``lines`` (complete JSON Lines). An exception drops the batch, counted."""
        ...

    async def aclose(self) -> None:
        """Flush and release what the sink holds (the runtime is closing)."""
        ...


#: A sink may also offer ``write_blocking(lines)``: the same as ``write``, blocking,
#: safe to call from a worker thread. The log then encodes and writes a batch in one
#: thread hop (`JsonLinesSink` does).


def _own_files(folder: Path) -> list[Path]:
    """One sink's files in ``folder``, oldest first."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _NAME.match(path.name)
        if match is not None:
            found.append((int(match[1]), path))
    return [path for _, path in sorted(found)]


def log_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The call log's files in ``directory`` and its folders (one per worker of ``llmrt
    serve --workers``), oldest first: by when they were last written, then by name."""
    folder = Path(directory)
    files = _own_files(folder)
    if folder.is_dir():
        for sub in sorted(folder.iterdir()):
            if sub.is_dir():
                files += _own_files(sub)

    def key(path: Path) -> tuple[float, str]:
        try:
            return (path.stat().st_mtime, str(path))
        except OSError:
            return (0.0, str(path))

    return sorted(files, key=key)


@attrs.define(eq=False)
class JsonLinesSink:
    """``calls-NNNNNN.jsonl`` files in one folder: rotated by size, capped in total.

    A run starts a new file after the newest one there; a file is closed once
    the next batch would take it past ``max_file_bytes`` (a batch larger than
    that goes alone into a file of its own), and the oldest files are deleted
    while all of them hold more than ``max_total_bytes``. The file work runs in
    a worker thread, so a slow disk holds up no task of the event loop.
    """

    directory: Path = attrs.field(converter=Path)
    max_file_bytes: int = 64 << 20
    max_total_bytes: int = 1 << 30
    _file: IO[bytes] | None = attrs.field(default=None, init=False)
    _size: int = attrs.field(default=0, init=False)
    _number: int = attrs.field(default=0, init=False)
    #: The closed files and their sizes, oldest first (the current one is not in it).
    _closed: list[tuple[Path, int]] = attrs.field(factory=list, init=False)

    async def write(self, lines: Sequence[bytes]) -> None:
        await trio.to_thread.run_sync(self._write, lines)

    def write_blocking(self, lines: Sequence[bytes]) -> None:
        """`write` from a worker thread (the log's writer calls this one)."""
        self._write(lines)

    async def aclose(self) -> None:
        await trio.to_thread.run_sync(self._close)

    @property
    def current(self) -> Path | None:
        """The file written now (None before the first write)."""
        return self._path(self._number) if self._file is not None else None

    def _path(self, number: int) -> Path:
        return self.directory / f"calls-{number:06d}.jsonl"

    def _write(self, lines: Sequence[bytes]) -> None:
        size = sum(map(len, lines))
        if self._file is None:
            self._start()
        elif self._size and self._size + size > self.max_file_bytes:
            self._rotate()
        assert self._file is not None
        # The lines through the file's buffer, not joined first: a joined batch of
        # long calls is megabytes of fresh memory, which costs as much as the write.
        self._file.writelines(lines)
        self._file.flush()
        self._size += size
        self._cap()

    def _start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        existing = _own_files(self.directory)
        self._closed = [(path, path.stat().st_size) for path in existing]
        numbers = [int(_NAME.match(p.name)[1]) for p in existing]  # type: ignore[index]
        self._number = max(numbers, default=0) + 1
        self._open()

    def _open(self) -> None:
        # A buffer of `WRITE_BUFFER` bytes: a batch's lines are copied into memory
        # reused from batch to batch, and written in a few large writes.
        self._file = open(self._path(self._number), "ab", buffering=WRITE_BUFFER)  # noqa: SIM115
        self._size = 0

    def _rotate(self) -> None:
        assert self._file is not None
        self._file.close()
        self._closed.append((self._path(self._number), self._size))
        self._number += 1
        self._open()

    def _cap(self) -> None:
        total = self._size + sum(size for _, size in self._closed)
        while self._closed and total > self.max_total_bytes:
            path, size = self._closed.pop(0)
            path.unlink(missing_ok=True)
            total -= size

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_lines(paths: Sequence[Path]) -> Iterator[bytes]:
    """Every line of ``paths``, in order (a torn last line is skipped)."""
    for path in paths:
        with open(path, "rb") as file:
            for line in file:
                if line.endswith(b"\n"):
                    yield line
