"""An incremental, sans-I/O Server-Sent Events parser (WHATWG HTML, "event stream" section).

Feed it the raw bytes of a response body in whatever pieces the network
delivers; it returns what each piece completes. Two ways to read it:

- ``feed(raw) -> list[SSEEvent]``: full events (name, data, id, retry);
- ``feed_data(raw) -> list[bytes]``: only the ``data`` payloads, with no
  per-event object. Both OpenAI (no event names) and Anthropic (``data.type``
  repeats the event name) need nothing more, and it is the faster one.

::

    parser = SSEParser()
    async for raw in response.aiter_raw():
        for data in parser.feed_data(raw):
            if is_done(data):
                ...
            chunk = decoder.decode(data)
    parser.close()
    if parser.partial:
        ...  # the body ended in the middle of an event

Use one of the two on a given parser (mixing is allowed but pointless).

Rules implemented: LF, CRLF and CR line ends (a CRLF split across two reads is
one line end); a leading UTF-8 BOM is dropped; ``:`` comment lines and unknown
fields are ignored; one space after the colon is stripped; a line without a
colon is a field with an empty value; several ``data`` lines join with ``\\n``;
a blank line dispatches the event only if it has at least one ``data`` line;
the last event id persists from event to event, as the spec says; at the end
of the body an unfinished event is discarded (see ``close``).

Speed: there is no per-byte and, on the hot path, no per-line Python loop.
A read made of ``data: {...}\\n\\n`` events (OpenAI's) is cut with one
``bytes.split`` on ``\\n\\ndata: ``, which yields the payloads themselves, and
one ``find`` over them proves no other line hid among them; anything else takes
the general path (split at blank lines, then lines). Unfinished bytes are kept
as a list of pieces, joined once when their event completes, so a large event
arriving in small reads costs linear, not quadratic, copying.
"""

from __future__ import annotations

from typing import Any

import msgspec

from llmrt import ErrorCode, LlmError

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_IDLE_LINES",
    "DEFAULT_MAX_LINE_BYTES",
    "SSEEvent",
    "SSEParser",
    "is_done",
]

#: Default bound on one line (field name, colon and value), in bytes.
DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024
#: Default bound on one event's raw text (all its lines and their line ends), in bytes.
DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024
#: Default bound on the lines from one dispatched event to the next (blank lines,
#: comments, events without data, and the next event's own lines).
DEFAULT_MAX_IDLE_LINES = 10_000

_BOM = b"\xef\xbb\xbf"
_DATA = b"data: "


class SSEEvent(msgspec.Struct, frozen=True, gc=False):
    """One dispatched event.

    ``data`` is the raw UTF-8 payload (``data`` lines joined by ``\\n``), ready
    for ``msgspec.json.Decoder.decode``; it is not validated as UTF-8 here.
    ``id`` is the stream's last event id at dispatch time (``""`` if none was
    ever set). ``retry`` is the value of a valid ``retry`` field that appeared
    in this event's lines, else ``None``.
    """

    data: bytes
    event: str = "message"
    id: str = ""
    retry: int | None = None


def is_done(data: bytes) -> bool:
    """Whether an OpenAI-style ``data`` payload is the ``[DONE]`` end sentinel.

    Like the OpenAI SDK, any payload starting with ``[DONE]`` counts.
    """
    return data.startswith(b"[DONE]")


class SSEParser:
    """Incremental SSE parser: ``feed()`` bytes, get completed events; ``close()`` at end of body.

    ``max_line_bytes`` bounds one line and ``max_event_bytes`` one event's raw
    text (comments included); ``max_idle_lines`` bounds the lines from one
    dispatched event to the next (a flood of blank lines or comments costs
    CPU per line without ever producing an event). Past any of them,
    ``feed``/``close`` raise ``LlmError(PROTOCOL)``. After an error
    the parser must not be used again. Not thread-safe; no I/O, no checkpoints.
    """

    __slots__ = (
        "_bom_pending",
        "_closed",
        "_head",
        "_hot",
        "_idle",
        "_last_id",
        "_limit",
        "_line_len",
        "_max_event",
        "_max_idle",
        "_max_line",
        "_names",
        "_partial_at_close",
        "_pending",
        "_pending_len",
        "_prelude",
        "_retry",
        "_skip_lf",
    )

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_idle_lines: int = DEFAULT_MAX_IDLE_LINES,
    ) -> None:
        if max_line_bytes <= 0 or max_event_bytes <= 0 or max_idle_lines <= 0:
            raise ValueError("max_line_bytes, max_event_bytes and max_idle_lines must be positive")
        self._max_line = max_line_bytes
        self._max_event = max_event_bytes
        self._max_idle = max_idle_lines
        # Lines since the last dispatched event (counted where they are parsed).
        self._idle = 0
        # A single-line `data:` event can be checked against one number.
        self._limit = min(max_line_bytes, max_event_bytes) - len(_DATA)
        # Bytes of the event not yet ended by a blank line, as received
        # (after line-end normalisation); never contains b"\n\n".
        self._pending: list[bytes] = []
        self._pending_len = 0
        # Length of the last, unterminated line inside _pending.
        self._line_len = 0
        # The previous read ended in CR: a LF starting the next read belongs to it.
        self._skip_lf = False
        # Until three bytes have arrived we cannot tell whether they are a BOM.
        self._bom_pending = True
        self._head = b""
        self._last_id = ""
        # Event names seen (bytes -> str), so that a name is decoded only once.
        self._names: dict[bytes, str] = {}
        self._retry: int | None = None
        self._closed = False
        self._partial_at_close = False
        # The payload so far of an unfinished single-line `data: ` event (the
        # hot path's tail); when set, _pending is empty.
        self._hot: bytes | None = None
        # Whether feed() must call _fix_start (closed, BOM undecided, LF to skip).
        self._prelude = True

    @property
    def last_event_id(self) -> str:
        """The last event id the stream set (``""`` if none)."""
        return self._last_id

    @property
    def retry(self) -> int | None:
        """The last valid ``retry`` value (milliseconds) the stream sent, if any."""
        return self._retry

    @property
    def partial(self) -> bool:
        """Whether bytes of an unfinished event are buffered (after ``close()``: were).

        ``False`` means the body so far ends on an event boundary (only blank
        lines follow the last dispatched event). Newline-only leftovers do not
        count; a finished line not yet followed by a blank line does.
        """
        if self._closed:
            return self._partial_at_close
        return (
            bool(self._head) or self._hot is not None or any(p.strip(b"\n") for p in self._pending)
        )

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Parse the next piece of the body; return the events it completes, in order.

        Raises ``LlmError(PROTOCOL)`` when a line or an event exceeds its bound,
        and ``RuntimeError`` after ``close()``.
        """
        return self._feed(data, False)

    def feed_data(self, data: bytes) -> list[bytes]:
        """Like `feed`, but return only the completed events' ``data`` payloads.

        The event name, id and retry are dropped (``last_event_id`` and
        ``retry`` are still tracked). Raises as `feed` does.
        """
        return self._feed(data, True)

    def _feed(self, data: bytes, raw: bool) -> list[Any]:
        """`feed` (``raw`` false: a list of `SSEEvent`) or `feed_data` (a list of bytes)."""
        if type(data) is not bytes:
            data = bytes(data)
        if self._prelude:
            data = self._fix_start(data)
        if b"\r" in data:
            # CR never occurs inside a field: it is always (part of) a line end,
            # so normalising all three forms to LF keeps the meaning exactly.
            if data[-1] == 13:
                self._skip_lf = self._prelude = True
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        out: list[Any] = []
        if not data:
            return out
        pieces = data.split(b"\n\ndata: ")
        if len(pieces) == 1:
            self._feed_lf(data, out, raw)
            return out
        # The hot path, for bodies made of `data: ...` events (OpenAI's): the
        # split leaves [head, payload, ..., payload, last]. `head` ends the
        # unfinished event; `last` is a `data: ` event, usually unfinished,
        # kept as the "hot" payload while it is one partial line.
        limit = self._limit
        head = pieces[0]
        hot = self._hot
        if hot is not None and len(hot) + len(head) <= limit:
            # If `head` holds more than the rest of this line, the check below
            # sees its LF and the event is parsed again on the general path.
            pieces[0] = hot + head
        else:
            if head or hot is not None or self._pending:
                self._feed_lf(head + b"\n\n", out, raw)
            del pieces[0]
        self._hot = None
        last = pieces.pop()
        # One find over all the payloads proves that no other line hid among them.
        if b"".join(pieces).find(b"\n") < 0:
            if len(data) > limit and max(map(len, pieces), default=0) > limit:
                raise self._too_big("line", self._max_line)
            if pieces:
                self._idle = 0
            if raw:
                if out:
                    out += pieces
                else:
                    out = pieces
            elif self._last_id:
                last_id = self._last_id
                out += [SSEEvent(p, "message", last_id) for p in pieces]
            else:
                out += map(SSEEvent, pieces)
        else:
            self._feed_lf(b"data: " + b"\n\ndata: ".join(pieces) + b"\n\n", out, raw)
        if last.find(b"\n") < 0 and len(last) <= limit:
            self._hot = last
        else:
            self._feed_lf(_DATA + last, out, raw)
        return out

    def close(self, *, dispatch_partial: bool = False) -> list[SSEEvent]:
        """Mark the end of the body.

        As the spec says, an event not ended by a blank line is discarded, and
        ``[]`` is returned; ``partial`` then tells whether that happened. With
        ``dispatch_partial=True`` such an event is instead dispatched as though
        a blank line had followed (for servers that omit the final blank line).
        Idempotent. Raises ``LlmError(PROTOCOL)`` if the leftover exceeds a bound.
        """
        if self._closed:
            return []
        out: list[SSEEvent] = []
        if self._bom_pending:
            # Fewer than three bytes, all a prefix of the BOM: they are content.
            self._bom_pending = False
            head, self._head = self._head, b""
            if head:
                self._feed_lf(head, out, False)
        self._spill_hot()
        self._partial_at_close = any(p.strip(b"\n") for p in self._pending)
        if self._pending and dispatch_partial:
            event = self._dispatch(b"".join(self._pending))
            if event is not None:
                out.append(event)
        self._pending.clear()
        self._pending_len = self._line_len = 0
        self._closed = self._prelude = True
        return out

    # -- internals ---------------------------------------------------------

    def _fix_start(self, data: bytes) -> bytes:
        """The rare per-feed work: closed check, BOM at stream start, LF after a split CRLF."""
        if self._closed:
            raise RuntimeError("SSEParser.feed() after close()")
        if self._bom_pending:
            data = self._head + data
            if len(data) < 3 and _BOM.startswith(data):
                self._head = data
                return b""
            self._bom_pending = False
            self._head = b""
            if data.startswith(_BOM):
                data = data[3:]
        if self._skip_lf and data:
            self._skip_lf = False
            if data[0] == 10:
                data = data[1:]
        self._prelude = self._bom_pending or self._skip_lf
        return data

    def _spill_hot(self) -> None:
        """Move the hot partial payload, if any, into the general pending buffer."""
        hot = self._hot
        if hot is not None:
            self._hot = None
            self._pending.append(_DATA)
            self._pending_len = self._line_len = 6
            if hot:
                self._append_pending(hot)

    def _feed_lf(self, data: bytes, out: list[Any], raw: bool) -> None:
        """Parse LF-only, non-empty ``data`` (the general path), appending to ``out``.

        Appends `SSEEvent` values, or with ``raw`` their payloads.
        """
        self._spill_hot()
        pending = self._pending
        start = 0
        if pending:
            if data[0] == 10 and pending[-1][-1] == 10:
                # The blank line that ends the pending event straddles two reads.
                block = b"".join(pending)
                start = 1
            else:
                i = data.find(b"\n\n")
                if i < 0:
                    self._append_pending(data)
                    return
                pending.append(data[:i])
                block = b"".join(pending)
                start = i + 2
            pending.clear()
            self._pending_len = self._line_len = 0
            self._parse_blocks([block], out, raw)
        # From `start` on, `data` begins at an event boundary; everything up to
        # its last blank line is complete events, the rest is the new tail.
        end = data.rfind(b"\n\n", start)
        if end >= 0:
            self._parse_blocks(data[start:end].split(b"\n\n"), out, raw)
            start = end + 2
        if start < len(data):
            self._append_pending(data[start:] if start else data)

    def _parse_blocks(self, blocks: list[bytes], out: list[Any], raw: bool) -> None:
        """Parse complete events, one raw block (the lines between blank lines) each."""
        limit = self._limit
        names = self._names
        append = out.append
        for block in blocks:
            if len(block) > limit:
                self._check_block(block)
            if block[:7] == b"event: ":
                # Anthropic's shape: `event: NAME` then one `data: ` line.
                name, sep, payload = block[7:].partition(b"\ndata: ")
                if sep and name.find(b"\n") < 0 and payload.find(b"\n") < 0:
                    self._idle = 0
                    if raw:
                        append(payload)
                        continue
                    event = names.get(name)
                    if event is None:
                        event = name.decode("utf-8", "replace") or "message"
                        if len(names) < 64:
                            names[name] = event
                    append(SSEEvent(payload, event, self._last_id))
                    continue
            elif block[:6] == _DATA and block.find(b"\n") < 0:
                self._idle = 0
                append(block[6:] if raw else SSEEvent(block[6:], "message", self._last_id))
                continue
            if block:
                dispatched = self._dispatch(block)
                if dispatched is not None:
                    append(dispatched.data if raw else dispatched)
                continue
            # Two more blank lines (a run of them splits into empty blocks).
            self._idle += 2
            if self._idle > self._max_idle:
                raise self._too_idle()

    def _append_pending(self, piece: bytes) -> None:
        """Buffer part of an unfinished event, enforcing both bounds."""
        self._pending.append(piece)
        self._pending_len += len(piece)
        if self._pending_len > self._max_event:
            raise self._too_big("event", self._max_event)
        first_lf = piece.find(b"\n")
        if first_lf < 0:
            self._line_len += len(piece)
        else:
            if self._line_len + first_lf > self._max_line or (
                len(piece) > self._max_line and max(map(len, piece.split(b"\n"))) > self._max_line
            ):
                raise self._too_big("line", self._max_line)
            self._line_len = len(piece) - piece.rfind(b"\n") - 1
        if self._line_len > self._max_line:
            raise self._too_big("line", self._max_line)

    def _check_block(self, block: bytes) -> None:
        """Enforce both bounds on a complete event's raw text."""
        if len(block) > self._max_event:
            raise self._too_big("event", self._max_event)
        if max(map(len, block.split(b"\n"))) > self._max_line:
            raise self._too_big("line", self._max_line)

    def _too_idle(self) -> LlmError:
        return LlmError(
            ErrorCode.PROTOCOL,
            f"server-sent event stream: more than {self._max_idle} lines without an event "
            "(blank lines, comments or events without data)",
        )

    @staticmethod
    def _too_big(what: str, limit: int) -> LlmError:
        return LlmError(
            ErrorCode.PROTOCOL, f"server-sent event stream: {what} longer than {limit} bytes"
        )

    def _dispatch(self, block: bytes) -> SSEEvent | None:
        """Process one event's lines (LF-separated; blank lines only at its edges).

        Returns the event, or None when it has no ``data``. The caller has
        enforced the byte bounds; the line bound is checked here, before the
        per-line loop.
        """
        # Its lines, and the blank line that ends it.
        idle = self._idle + block.count(b"\n") + 2
        if idle > self._max_idle:
            raise self._too_idle()
        data: list[bytes] = []
        event = ""
        retry: int | None = None
        for line in block.split(b"\n"):
            if not line:
                continue
            colon = line.find(b":")
            if colon == 0:
                continue  # a comment, e.g. ": keep-alive"
            if colon < 0:
                name, value = line, b""
            else:
                name = line[:colon]
                value = (
                    line[colon + 2 :] if line[colon + 1 : colon + 2] == b" " else line[colon + 1 :]
                )
            if name == b"data":
                data.append(value)
            elif name == b"event":
                event = value.decode("utf-8", "replace")
            elif name == b"id" and b"\0" not in value:
                self._last_id = value.decode("utf-8", "replace")
            elif name == b"retry" and value.isdigit():
                # bytes.isdigit() is ASCII-only, which is what the spec asks for.
                retry = self._retry = int(value)
        if not data:
            self._idle = idle
            return None
        self._idle = 0
        return SSEEvent(b"\n".join(data), event or "message", self._last_id, retry)
