"""What the local upstream records: requests, their headers, and client connections."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Literal

import attrs
import msgspec
import trio

__all__ = ["ConnectionRecord", "Headers", "RecordedRequest"]

# Header values that carry credentials; reprs show them redacted.
_SECRET_HEADERS: Final = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"}
)


class Headers(Mapping[str, str]):
    """Request headers: lower-cased names, arrival order, repeated names kept.

    ``headers[name]`` joins repeated values with ``", "``; `get_list` returns
    them separately; `items_raw` gives every (name, value) pair in order. The
    repr redacts credential headers.
    """

    __slots__ = ("_index", "_items")

    def __init__(self, items: Iterable[tuple[str, str]]) -> None:
        self._items = tuple((name.lower(), value) for name, value in items)
        index: dict[str, list[str]] = {}
        for name, value in self._items:
            index.setdefault(name, []).append(value)
        self._index = index

    def __getitem__(self, name: str) -> str:
        return ", ".join(self._index[name.lower()])

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._index

    def get_list(self, name: str) -> list[str]:
        """Every value sent under `name`, in order (empty if none)."""
        return list(self._index.get(name.lower(), ()))

    @property
    def items_raw(self) -> tuple[tuple[str, str], ...]:
        """Every (lower-cased name, value) pair, in arrival order."""
        return self._items

    def __repr__(self) -> str:
        shown = {
            name: ("<redacted>" if name in _SECRET_HEADERS else self[name]) for name in self._index
        }
        return f"Headers({shown!r})"


def _decode_json(body: bytes) -> Any:
    if not body:
        return None
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None


@attrs.frozen
class RecordedRequest:
    """One request the upstream received.

    `path` is the target without its query; `json` is the decoded body, or
    None when the body is empty or not JSON; `received_at` is
    `trio.current_time()` when the request was complete.
    """

    index: int
    connection: int
    method: str
    target: str
    path: str
    query: str
    version: str
    headers: Headers
    body: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    received_at: float
    json: Any = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "json", _decode_json(self.body))


@attrs.define(eq=False)
class ConnectionRecord:
    """One client TCP connection, as the server saw it.

    `closed_at` is `trio.current_time()` when the server saw the client leave
    (EOF, reset, broken pipe) or closed the socket itself; `closed_by` says
    which. `responses_completed` counts responses sent in full; `closed` is
    set once the socket is closed.
    """

    index: int
    opened_at: float
    peer: tuple[str, int]
    requests: list[RecordedRequest] = attrs.field(
        factory=list, repr=lambda r: f"<{len(r)} requests>"
    )
    responses_completed: int = 0
    closed_at: float | None = None
    closed_by: Literal["client", "server"] | None = None
    #: repr of an unexpected exception that ended the connection, if any.
    error: str | None = None
    closed: trio.Event = attrs.field(factory=trio.Event, repr=False)

    @property
    def completed(self) -> bool:
        """True when at least one request came and every response was sent in full."""
        return bool(self.requests) and self.responses_completed == len(self.requests)

    def mark_closed(self, by: Literal["client", "server"]) -> None:
        """Record the first observed close (later observations keep the first)."""
        if self.closed_at is None:
            self.closed_at = trio.current_time()
            self.closed_by = by
