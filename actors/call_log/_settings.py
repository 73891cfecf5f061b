"""`CallLogSettings`: the ``[call_log]`` table of ``llmrt.toml`` and ``open_runtime(call_log=...)``.

Pure: no I/O, no trio (the configuration's validation imports it).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = ["CallLogSettings"]

_Positive = Annotated[int, msgspec.Meta(ge=1)]
_Bytes = Annotated[int, msgspec.Meta(ge=4096)]


class CallLogSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where the call log goes and how much of it is kept.

    ``directory``: the folder of the JSON Lines files (made if missing).
    A file is closed and a new one begun past ``max_file_bytes``; the oldest
    files are deleted once they hold more than ``max_total_bytes`` together.
    ``queue``: records waiting for the writer (more are dropped and counted);
    ``max_record_bytes``: a larger record is dropped and counted as oversized.
    """

    directory: str | None = None
    max_file_bytes: _Bytes = 64 << 20
    max_total_bytes: _Bytes = 1 << 30
    queue: _Positive = 4096
    max_record_bytes: _Bytes = 16 << 20

    def __post_init__(self) -> None:
        if self.max_total_bytes < self.max_file_bytes:
            raise ValueError("max_total_bytes must be at least max_file_bytes")
