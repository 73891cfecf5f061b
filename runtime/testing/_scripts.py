"""Scripts: frozen descriptions of what the local upstream sends for one request.

A script is compiled once, at construction, into a `ResponsePlan`: the
encoded response heads, the body already cut into the writes the server
makes (with chunked framing applied), and how the response ends. Heads and
framing are encoded by h11, so clients are tested against an HTTP codec other
than their own; a script whose headers replace a framing header
(``content-length``, ``transfer-encoding``), or that h11 refuses to encode,
is sent exactly as written instead (`ResponsePlan.encoder` says which). Serving a
script is then a few `send_all` calls and sleeps, with no per-event Python
work, so thousands of concurrent streams can share one script.
"""

from __future__ import annotations

import enum
import math
import os
import pathlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs
import h11
import msgspec
import trio

from ._http import H11Response, raw_response_head
from ._records import RecordedRequest

__all__ = [
    "Ending",
    "ErrorScript",
    "HostileScript",
    "Outcome",
    "EventLike",
    "HeadersLike",
    "ResponsePlan",
    "SSEScript",
    "Script",
    "encode_event",
    "split_events",
]

#: How large one coalesced write may grow when events are sent back to back.
COALESCE_BYTES: Final = 64 * 1024

SSE_CONTENT_TYPE: Final = "text/event-stream; charset=utf-8"

#: An SSE event as a script takes it: raw bytes or text sent as is, or a JSON
#: value sent as one ``data: <json>`` event.
EventLike: TypeAlias = bytes | str | Mapping[str, Any] | list[Any]
HeadersLike: TypeAlias = Mapping[str, str] | Iterable[tuple[str, str]]

_json_encode = msgspec.json.Encoder().encode


def encode_event(event: EventLike) -> bytes:
    """Encode one event: bytes/str verbatim, any other value as ``data: <json>\\n\\n``."""
    if isinstance(event, bytes):
        return event
    if isinstance(event, str):
        return event.encode()
    return b"data: " + _json_encode(event) + b"\n\n"


def split_events(body: bytes) -> tuple[bytes, ...]:
    """Cut an SSE body after each blank line, keeping every byte.

    ``b"".join(split_events(body)) == body`` always holds; a tail without a
    closing blank line is its own last piece. LF, CRLF and CR line ends count.
    """
    events: list[bytes] = []
    current: list[bytes] = []
    for line in body.splitlines(keepends=True):
        current.append(line)
        if line in (b"\n", b"\r\n", b"\r"):
            events.append(b"".join(current))
            current = []
    if current:
        events.append(b"".join(current))
    return tuple(events)


def _events(events: Iterable[EventLike]) -> tuple[bytes, ...]:
    return tuple(encode_event(e) for e in events)


def _header_pairs(headers: HeadersLike) -> tuple[tuple[str, str], ...]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    return tuple((str(k), str(v)) for k, v in items)


def _events_repr(events: tuple[bytes, ...]) -> str:
    return f"<{len(events)} events, {sum(map(len, events))} bytes>"


class Ending(enum.Enum):
    """How a response ends once its writes are sent."""

    COMPLETE = "complete"  # terminal chunk sent (if chunked); the connection may be reused
    STALL = "stall"  # nothing more is sent; the connection is held until the client leaves
    DISCONNECT = "disconnect"  # the server closes the socket mid-body


@attrs.frozen
class ResponsePlan:
    """A script compiled for serving. Built once per script; shared by every response."""

    head_keep_alive: bytes
    head_close: bytes
    first_byte_delay: float
    #: Sleep between consecutive writes (0 when events were coalesced).
    delay: float
    #: Body writes, framing applied; the terminal chunk is part of the last one.
    writes: tuple[bytes, ...]
    ending: Ending
    #: Abort with a TCP RST instead of a FIN (only for `Ending.DISCONNECT`).
    reset: bool
    #: The body is delimited by closing the connection, so it is never reused.
    always_close: bool
    #: Who encoded heads and framing: h11, or by hand (framing the script set itself).
    encoder: Literal["h11", "raw"] = "h11"


def _merge_headers(
    defaults: list[tuple[str, str]], script: tuple[tuple[str, str], ...]
) -> list[tuple[str, str]]:
    # A script's header replaces every default of the same name, framing
    # headers included, so a test can send deliberately broken framing.
    given = {name.lower() for name, _ in script}
    return [h for h in defaults if h[0].lower() not in given] + list(script)


_FRAMING: Final = frozenset({"content-length", "transfer-encoding"})


def _frames_by_hand(script: tuple[tuple[str, str], ...]) -> bool:
    """True when the script sets its own framing: h11 would correct it, so it is sent as given."""
    return any(name.lower() in _FRAMING for name, _ in script)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def _coalesce(events: Sequence[bytes]) -> list[bytes]:
    out: list[bytes] = []
    group: list[bytes] = []
    size = 0
    for event in events:
        group.append(event)
        size += len(event)
        if size >= COALESCE_BYTES:
            out.append(b"".join(group))
            group, size = [], 0
    if group:
        out.append(b"".join(group))
    return out


@attrs.frozen
class _Encoded:
    head_keep_alive: bytes
    head_close: bytes
    writes: tuple[bytes, ...]
    encoder: Literal["h11", "raw"]


def _encode(
    status: int,
    defaults: list[tuple[str, str]],
    script: tuple[tuple[str, str], ...],
    pieces: Sequence[bytes],
    *,
    chunked: bool,
    complete: bool,
    close_delimited: bool,
) -> _Encoded:
    """Encode the heads (keep-alive and close) and body writes, with h11 unless told otherwise.

    h11 frames a response with no length as chunked for an HTTP/1.1 peer and
    as close-delimited for an HTTP/1.0 one, so a close-delimited body is
    encoded as the answer to an HTTP/1.0 request.
    """
    heads = [
        _merge_headers([*defaults, ("connection", value)], script)
        for value in ("close" if close_delimited else "keep-alive", "close")
    ]
    if not _frames_by_hand(script):
        try:
            body = H11Response(http10=close_delimited)
            keep_alive = body.head(status, heads[0])
            close = H11Response(http10=close_delimited).head(status, heads[1])
            writes = [body.data(p) if p else b"" for p in pieces]
            if complete and (end := body.end()):
                # The terminal chunk rides on the last write: no delay precedes it.
                writes = [*writes[:-1], writes[-1] + end] if writes else [end]
            return _Encoded(keep_alive, close, tuple(writes), "h11")
        except h11.LocalProtocolError:
            pass  # e.g. a 1xx or 204 with a body: h11 will not say it, so say it by hand
    writes = [_chunk(p) for p in pieces] if chunked else list(pieces)
    if chunked and complete:
        writes = [*writes[:-1], writes[-1] + b"0\r\n\r\n"] if writes else [b"0\r\n\r\n"]
    return _Encoded(
        raw_response_head(status, heads[0]),
        raw_response_head(status, heads[1]),
        tuple(writes),
        "raw",
    )


def _check_delay(name: str, value: float, *, allow_inf: bool = False) -> None:
    if math.isnan(value) or value < 0 or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{name} must be a non-negative finite number of seconds")


def _check_status(status: int) -> None:
    if not 100 <= status <= 999:
        raise ValueError("status must be a three-digit HTTP status code")


@attrs.frozen
class SSEScript:
    """Stream `events` as a ``text/event-stream`` body.

    - `delay` seconds pass between consecutive events: event i goes out at
      ``t0 + i * delay`` (`trio.sleep_until`, so a `MockClock` makes them free
      and a loaded server catches up rather than drifting); with no delay,
      events are coalesced into writes of up to 64 KiB.
    - `first_byte_delay` seconds pass before the status line is sent
      (``math.inf``: never answer).
    - `stall_after=N`: send the first N events, then send nothing more and
      hold the connection open until the client leaves.
    - `disconnect_after=N`: send the first N events, then close the socket
      without the terminal chunk (a FIN; with `reset=True`, a TCP RST).
    - `chunked=False`: frame by ``Content-Length`` (the full body's length,
      even when a stall or disconnect cuts it short); with
      `close_delimited=True` as well, send no length and close after the body.
    - `headers` are added to (and replace same-named) defaults:
      ``content-type``, ``cache-control``, framing and ``connection``.

    Raises `ValueError` for an out-of-range status, delay or count, or when
    both `stall_after` and `disconnect_after` are given.
    """

    events: tuple[bytes, ...] = attrs.field(converter=_events, repr=_events_repr)
    status: int = 200
    headers: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_header_pairs)
    delay: float = 0.0
    first_byte_delay: float = 0.0
    stall_after: int | None = None
    disconnect_after: int | None = None
    reset: bool = False
    chunked: bool = True
    close_delimited: bool = False
    _plan: ResponsePlan = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        _check_status(self.status)
        _check_delay("delay", self.delay)
        _check_delay("first_byte_delay", self.first_byte_delay, allow_inf=True)
        if self.stall_after is not None and self.disconnect_after is not None:
            raise ValueError("give stall_after or disconnect_after, not both")
        cut = self.stall_after if self.stall_after is not None else self.disconnect_after
        if cut is not None and cut < 0:
            raise ValueError("stall_after / disconnect_after must be >= 0")
        if self.close_delimited and self.chunked:
            raise ValueError("close_delimited needs chunked=False")
        # Frozen attrs classes allow this one write, in their own post-init.
        object.__setattr__(self, "_plan", self._compile(cut))

    @classmethod
    def from_transcript(cls, source: bytes | str | os.PathLike[str], **kwargs: Any) -> SSEScript:
        """Replay a recorded body byte for byte: `source` is the bytes or a file path.

        The body is cut into events at blank lines (`split_events`) so `delay`,
        `stall_after` and `disconnect_after` count events; other keyword
        arguments are `SSEScript`'s. Raises `OSError` if the file cannot be read.
        """
        body = source if isinstance(source, bytes) else pathlib.Path(source).read_bytes()
        return cls(events=split_events(body), **kwargs)

    @property
    def body(self) -> bytes:
        """The whole body the events make (what a complete response carries)."""
        return b"".join(self.events)

    @property
    def plan(self) -> ResponsePlan:
        """The compiled plan the server sends."""
        return self._plan

    def _compile(self, cut: int | None) -> ResponsePlan:
        sent = self.events if cut is None else self.events[:cut]
        ending = (
            Ending.COMPLETE
            if cut is None
            else Ending.STALL
            if self.stall_after is not None
            else Ending.DISCONNECT
        )
        defaults = [("content-type", SSE_CONTENT_TYPE), ("cache-control", "no-cache")]
        if self.chunked:
            defaults.append(("transfer-encoding", "chunked"))
        elif not self.close_delimited:
            defaults.append(("content-length", str(sum(map(len, self.events)))))
        pieces = list(sent) if self.delay > 0 else _coalesce(sent)
        encoded = _encode(
            self.status,
            defaults,
            self.headers,
            pieces,
            chunked=self.chunked,
            complete=ending is Ending.COMPLETE,
            close_delimited=self.close_delimited,
        )
        return ResponsePlan(
            head_keep_alive=encoded.head_keep_alive,
            head_close=encoded.head_close,
            first_byte_delay=self.first_byte_delay,
            delay=self.delay,
            writes=encoded.writes,
            ending=ending,
            reset=self.reset,
            always_close=self.close_delimited,
            encoder=encoded.encoder,
        )


def _body(body: bytes | str | Mapping[str, Any] | list[Any]) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return _json_encode(body)


def _sniff_content_type(body: bytes) -> str:
    head = body.lstrip()[:1]
    if head in (b"{", b"["):
        return "application/json"
    if head == b"<":
        return "text/html; charset=utf-8"
    return "text/plain; charset=utf-8"


@attrs.frozen
class ErrorScript:
    """Answer with a whole, ``Content-Length``-framed body: an HTTP error or any fixed reply.

    `body` is bytes or text sent as is, or a JSON value (encoded). The default
    content type follows the body's first character: ``{``/``[`` JSON, ``<``
    HTML, else plain text. `headers` replace same-named defaults, e.g.
    ``{"retry-after": "2"}``. `first_byte_delay` seconds pass before the
    status line. Raises `ValueError` for a bad status or delay.
    """

    status: int = 500
    headers: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_header_pairs)
    body: bytes = attrs.field(default=b"", converter=_body, repr=lambda b: f"<{len(b)} bytes>")
    first_byte_delay: float = 0.0
    _plan: ResponsePlan = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        _check_status(self.status)
        _check_delay("first_byte_delay", self.first_byte_delay, allow_inf=True)
        defaults = [
            ("content-type", _sniff_content_type(self.body)),
            ("content-length", str(len(self.body))),
        ]
        encoded = _encode(
            self.status,
            defaults,
            self.headers,
            [self.body],
            chunked=False,
            complete=True,
            close_delimited=False,
        )
        plan = ResponsePlan(
            head_keep_alive=encoded.head_keep_alive,
            head_close=encoded.head_close,
            first_byte_delay=self.first_byte_delay,
            delay=0.0,
            writes=encoded.writes,
            ending=Ending.COMPLETE,
            reset=False,
            always_close=False,
            encoder=encoded.encoder,
        )
        object.__setattr__(self, "_plan", plan)

    @property
    def plan(self) -> ResponsePlan:
        """The compiled plan the server sends."""
        return self._plan


#: How a hostile script leaves the connection once it has done its worst.
Outcome: TypeAlias = Literal["keep-alive", "close", "reset"]


@attrs.frozen
class HostileScript:
    """A named misbehaviour: a response sent by its own code, raw bytes or h11 as it needs.

    Built by `llmrt.testing.hostile`; see `MISBEHAVIOURS` for the catalogue.
    `serve(stream, request)` writes the response and says how the connection
    ends: ``"keep-alive"`` (offer it for another request), ``"close"`` (FIN;
    closing with unread input makes the kernel send an RST), ``"reset"``
    (RST). A script that never ends returns once the client leaves (the
    server cancels it). With `at_head`, the script answers as soon as the
    request head is read, before the body, and the connection stops reading;
    this works for a static route or a script queue (a router only sees whole
    requests).
    """

    name: str
    serve: Callable[[trio.abc.Stream, RecordedRequest], Awaitable[Outcome]] = attrs.field(
        repr=False
    )
    at_head: bool = False


#: Anything the server can answer a request with.
Script: TypeAlias = SSEScript | ErrorScript | HostileScript
