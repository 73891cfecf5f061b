"""The raw-trio floor: the least a trio client can do to stream one chat completion.

One TCP connection per stream (``trio.open_tcp_stream``), a hand-written
request, the response head split by hand, the chunked transfer coding and
the SSE framing parsed by hand, one msgspec decode per ``data:`` event. No
pool, no header objects, no URL objects, no async generators: what is left
is trio's socket wake-ups and the decode. It is the floor the other clients
of ``bench_http.py`` are compared with (peer ``floor`` in ``_peers.py``).

Leaving a stream closes its socket at once (``aclose`` on the way out of the
``async with``), so the floor also bounds the cancel -> close figure.

Bounds, as for any client: a response head of at most 64 KiB, a chunk-size
line of at most 1 KiB, one SSE event of at most 1 MiB; beyond them the stream
fails with `FloorProtocolError` instead of buffering without end.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import msgspec
import trio

MAX_HEAD = 64 * 1024
MAX_SIZE_LINE = 1024
MAX_EVENT = 1024 * 1024
READ = 65536


class FloorProtocolError(Exception):
    """The upstream's response is not what a streaming chat completion looks like."""


class _Delta(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta


class _Event(msgspec.Struct):
    choices: list[_Choice]


#: One ``data:`` payload of a chat-completion chunk, decoded (also the httpx peers').
decode_event = msgspec.json.Decoder(_Event).decode


class Session(msgspec.Struct, frozen=True):
    host: str
    port: int
    path: str
    #: The request head up to (not including) ``Content-Length``: the same for every stream.
    head: bytes


@asynccontextmanager
async def open_session(base_url: str, api_key: str) -> AsyncIterator[Session]:
    """A session is only the parsed address and the constant part of the request head."""
    url = urlsplit(base_url)
    if url.scheme != "http" or url.hostname is None or url.port is None:
        raise ValueError("the floor client speaks plain http to an explicit host:port")
    path = url.path.rstrip("/") + "/v1/chat/completions"
    head = (
        f"POST {path} HTTP/1.1\r\n"
        f"Host: {url.hostname}:{url.port}\r\n"
        f"Authorization: Bearer {api_key}\r\n"
        "Content-Type: application/json\r\n"
        "Accept: text/event-stream\r\n"
        "Connection: close\r\n"
    ).encode()
    yield Session(url.hostname, url.port, path, head)


class _Chunked:
    """Incremental decoder of the chunked transfer coding; `feed` returns body bytes."""

    __slots__ = ("_buf", "_need", "done")

    def __init__(self) -> None:
        self._buf = b""
        #: Bytes of chunk data still to come in the current chunk (-1: a size line is next).
        self._need = -1
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        pos = 0
        while not self.done:
            if self._need < 0:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    if len(buf) - pos > MAX_SIZE_LINE:
                        raise FloorProtocolError("chunk-size line too long")
                    break
                size_text = buf[pos:end].split(b";", 1)[0].strip()
                try:
                    self._need = int(size_text, 16)
                except ValueError:
                    raise FloorProtocolError("bad chunk size") from None
                pos = end + 2
                if self._need == 0:
                    self.done = True  # trailers are not read: the connection is closed next
                    break
            # chunk data, then its CRLF
            have = len(buf) - pos
            if have < self._need + 2:
                if have > self._need:  # data complete, CRLF split across reads
                    out.append(buf[pos : pos + self._need])
                    pos += self._need
                    self._need = 0
                elif have:
                    out.append(buf[pos:])
                    self._need -= have
                    pos = len(buf)
                break
            out.append(buf[pos : pos + self._need])
            pos += self._need + 2
            self._need = -1
        self._buf = buf[pos:]
        return b"".join(out) if len(out) != 1 else out[0]


async def stream(
    session: Session, body: bytes, leave_after: int | None, received: list[int]
) -> tuple[int, float | None]:
    """One streaming request; counts text deltas (also into ``received[0]``).

    Returns (text chunks seen, ``time.monotonic()`` when the consumer left or None).
    """
    count = 0
    sock = await trio.open_tcp_stream(session.host, session.port)
    async with sock:
        await sock.send_all(session.head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        head = b""
        while True:
            data = await sock.receive_some(READ)
            if not data:
                raise FloorProtocolError("connection closed in the response head")
            head += data
            end = head.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(head) > MAX_HEAD:
                raise FloorProtocolError("response head too long")
        lines = head[:end].split(b"\r\n")
        status = lines[0].split(b" ", 2)
        if len(status) < 2 or status[1] != b"200":
            raise FloorProtocolError(f"status {lines[0][:40]!r}")
        chunked = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
        decoder = _Chunked() if chunked else None
        data = head[end + 4 :]
        tail = b""
        while True:
            if decoder is not None:
                data = decoder.feed(data)
            events = (tail + data).split(b"\n\n") if tail else data.split(b"\n\n")
            tail = events.pop()
            if len(tail) > MAX_EVENT:
                raise FloorProtocolError("SSE event too long")
            for event in events:
                if not event.startswith(b"data: "):
                    continue
                payload = event[6:]
                if payload == b"[DONE]":
                    return count, None
                for choice in decode_event(payload).choices:
                    if choice.delta.content:
                        count += 1
                        received[0] += 1
                        if count == leave_after:
                            return count, time.monotonic()
            if decoder is not None and decoder.done:
                return count, None
            data = await sock.receive_some(READ)
            if not data:
                return count, None


def stream_fn(received: list[int], request_body: Any, api_key: str) -> Any:
    """Adapt `stream` to ``_peers.StreamFn`` (session, marker, leave_after)."""

    async def run(session: Session, marker: str, leave_after: int | None) -> Any:
        body = msgspec.json.encode(request_body(marker))
        return await stream(session, body, leave_after, received)

    return run
