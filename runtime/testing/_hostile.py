"""A hostile upstream: named misbehaviours a provider (or whatever sits in its place) can commit.

``hostile(name)`` returns a script for any route of the local upstream, so a
test can point a host's HTTP client at the worst an upstream can do and check
that each ends as it should: with one coded failure, soon, in bounded memory,
with every socket closed and no secret repeated. `MISBEHAVIOURS` lists them,
each with the failure code a well-behaved llmrt host reports for it.

Bodies follow the dialect of the request: Anthropic SSE for a path ending in
``/messages``, OpenAI chat-completions SSE otherwise. Well-formed parts are
encoded by h11; the malformed parts are written as raw bytes, because h11
(rightly) refuses to produce them.
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import attrs
import msgspec
import trio

from ._events import anthropic_events, openai_events
from ._http import H11Response, raw_response_head
from ._records import RecordedRequest
from ._scripts import SSE_CONTENT_TYPE, HostileScript, Outcome

__all__ = ["MISBEHAVIOURS", "SECRET_PHRASINGS", "Misbehaviour", "hostile"]

#: The text every well-formed stream of a hostile script carries.
TEXT_PARTS: Final = ("Hello", ", ", "world")
TEXT: Final = "".join(TEXT_PARTS)

#: How `echo-secrets` may repeat the request's key in its 401 body.
SECRET_PHRASINGS: Final = ("authorization", "x-api-key", "token", "json", "html-title")

_WRITE_BYTES: Final = 64 * 1024
_MIB: Final = 1 << 20

_encode = msgspec.json.Encoder().encode

Serve = Callable[[trio.abc.Stream, RecordedRequest], Awaitable[Outcome]]


@attrs.frozen
class Misbehaviour:
    """One entry of the catalogue: what the upstream does and what a sound client reports."""

    name: str
    description: str
    #: The `ErrorCode` a well-behaved llmrt host ends the call with (None: the call succeeds).
    expected_code: str | None
    #: The response is answered as soon as the request head is read (see `HostileScript`).
    at_head: bool
    _build: Callable[..., Serve] = attrs.field(repr=False)


def _anthropic(request: RecordedRequest) -> bool:
    return request.path.endswith("/messages")


def _events(request: RecordedRequest, parts: tuple[str, ...] = TEXT_PARTS) -> list[bytes]:
    if _anthropic(request):
        return anthropic_events(list(parts))
    return openai_events(list(parts))


def _sse_head(encoder: H11Response, extra: list[tuple[str, str]] | None = None) -> bytes:
    headers = [("content-type", SSE_CONTENT_TYPE), ("cache-control", "no-cache")]
    return encoder.head(200, [*headers, *(extra or [])])


def _chunked_sse_head(extra: list[tuple[str, str]] | None = None) -> bytes:
    headers = [
        ("content-type", SSE_CONTENT_TYPE),
        ("transfer-encoding", "chunked"),
        *(extra or []),
    ]
    return raw_response_head(200, headers)


async def _forever(stream: trio.abc.Stream, data: bytes) -> Outcome:
    """Send `data` again and again until the client leaves (the server then cancels us)."""
    while True:
        await stream.send_all(data)


def _sse_response(request: RecordedRequest, parts: tuple[str, ...] = TEXT_PARTS) -> bytes:
    """A whole well-formed chunked SSE response, as h11 encodes it."""
    encoder = H11Response()
    out = _sse_head(encoder)
    for event in _events(request, parts):
        out += encoder.data(event)
    return out + encoder.end()


# --- the misbehaviours ------------------------------------------------------------------------


def _endless_head(*, line_bytes: int = 1024) -> Serve:
    line = b"x-pad: " + b"a" * line_bytes + b"\r\n"
    batch = line * max(1, _WRITE_BYTES // len(line))

    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-type: " + SSE_CONTENT_TYPE.encode())
        await stream.send_all(b"\r\n")
        return await _forever(stream, batch)

    return serve


def _giant_chunk_size(*, digits: int = 64) -> Serve:
    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        await stream.send_all(_chunked_sse_head() + b"f" * digits + b"\r\n")
        await stream.send_all(b": padding\n\n" * 4096)
        return "close"

    return serve


def _informational_flood(*, status: int = 103) -> Serve:
    encoder = H11Response()
    hint = encoder.informational(status, [("link", "</style.css>; rel=preload; as=style")])
    batch = hint * max(1, _WRITE_BYTES // len(hint))

    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        return await _forever(stream, batch)

    return serve


@functools.cache
def _bomb(inflated_mib: int, fill: bytes) -> bytes:
    """A gzip member inflating to `inflated_mib` MiB of `fill`, about 1/1000 of that on the wire.

    Deflating a repeated MiB block after a sync flush yields the same bytes
    every time, so the body is built from two compressed blocks, not by
    deflating the whole inflated size.
    """
    block = fill * (_MIB // len(fill))
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(block) + deflate.flush(zlib.Z_SYNC_FLUSH)
    again = deflate.compress(block) + deflate.flush(zlib.Z_SYNC_FLUSH)
    crc = 0
    for _ in range(inflated_mib):
        crc = zlib.crc32(block, crc)
    size = (inflated_mib * len(block)) & 0xFFFFFFFF
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    body = first + again * (inflated_mib - 1) + deflate.flush(zlib.Z_FINISH)
    return header + body + struct.pack("<II", crc, size)


def _gzip_bomb(*, inflated_mib: int = 1024, fill: bytes = b"a") -> Serve:
    if inflated_mib < 1 or not fill:
        raise ValueError("inflated_mib must be >= 1 and fill non-empty")

    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        body = _bomb(inflated_mib, fill)
        encoder = H11Response()
        head = _sse_head(
            encoder, [("content-encoding", "gzip"), ("content-length", str(len(body)))]
        )
        await stream.send_all(head)
        for i in range(0, len(body), _WRITE_BYTES):
            await stream.send_all(encoder.data(body[i : i + _WRITE_BYTES]))
        encoder.end()
        return "keep-alive"

    return serve


def _keys(request: RecordedRequest) -> list[str]:
    keys = []
    authorization = request.headers.get("authorization", "")
    scheme, _, credentials = authorization.partition(" ")
    if credentials and scheme.lower() == "bearer":
        keys.append(credentials.strip())
    elif authorization:
        keys.append(authorization)
    if api_key := request.headers.get("x-api-key"):
        keys.append(api_key)
    return keys or ["(no key was sent)"]


def _secret_body(phrasing: str, key: str) -> tuple[str, bytes]:
    match phrasing:
        case "authorization":
            return "text/plain", f"Unauthorized: Authorization: Bearer {key} was refused".encode()
        case "x-api-key":
            return "text/plain", f"invalid credentials (x-api-key: {key})".encode()
        case "token":
            return "text/plain", f"authentication failed for token {key}".encode()
        case "json":
            body = {
                "error": {
                    "message": f"Incorrect API key provided: {key}",
                    "type": "authentication_error",
                    "code": "invalid_api_key",
                    "api_key": key,
                },
                "type": "error",
            }
            return "application/json", _encode(body)
        case "html-title":
            html = (
                f"<html><head><title>401 Unauthorized {key}</title></head>"
                f"<body><h1>401</h1><p>key {key} refused</p></body></html>"
            )
            return "text/html; charset=utf-8", html.encode()
        case _:
            raise ValueError(f"unknown phrasing {phrasing!r}; choose from {SECRET_PHRASINGS}")


def _echo_secrets(*, phrasing: str = "json", status: int = 401) -> Serve:
    _secret_body(phrasing, "probe")  # reject an unknown phrasing when the script is built

    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        content_type, body = _secret_body(phrasing, " ".join(_keys(request)))
        encoder = H11Response()
        head = encoder.head(
            status, [("content-type", content_type), ("content-length", str(len(body)))]
        )
        await stream.send_all(head + encoder.data(body) + encoder.end())
        return "keep-alive"

    return serve


def _trickle(*, delay: float = 0.0) -> Serve:
    if not delay >= 0:
        raise ValueError("delay must be >= 0 seconds")

    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        data = _sse_response(request)
        for i in range(len(data)):
            await stream.send_all(data[i : i + 1])
            if delay:
                await trio.sleep(delay)
            else:
                await trio.lowlevel.checkpoint()
        return "keep-alive"

    return serve


def _reset_mid_body(*, after_events: int = 3) -> Serve:
    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        encoder = H11Response()
        out = _sse_head(encoder)
        for event in _events(request)[:after_events]:
            out += encoder.data(event)
        await stream.send_all(out)
        # Let the events reach the client before the RST overtakes them.
        await trio.sleep(0.05)
        return "reset"

    return serve


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _deep_nesting(*, depth: int = 5000) -> Serve:
    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        events = _events(request)
        # A valid-looking event whose payload nests `depth` arrays deep.
        if _anthropic(request):
            bomb = (
                b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                b'"delta":{"type":"text_delta","text":"x"},"extra":' + _nested(depth) + b"}\n\n"
            )
            events.insert(3, bomb)
        else:
            bomb = (
                b'data: {"id":"chatcmpl-deep","object":"chat.completion.chunk","created":0,'
                b'"model":"m","choices":[{"index":0,"delta":{"content":"x"},'
                b'"finish_reason":null}],"extra":' + _nested(depth) + b"}\n\n"
            )
            events.insert(2, bomb)
        encoder = H11Response()
        out = _sse_head(encoder) + b"".join(encoder.data(e) for e in events) + encoder.end()
        await stream.send_all(out)
        return "keep-alive"

    return serve


def _stale_keep_alive() -> Serve:
    answered: set[int] = set()  # connections that have had their one answer

    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        if request.connection in answered:
            # The idle connection "timed out" just as the client reused it:
            # closed with the request unanswered, not one response byte sent.
            return "close"
        answered.add(request.connection)
        encoder = H11Response()
        data = _sse_head(encoder, [("connection", "keep-alive")])
        for event in _events(request):
            data += encoder.data(event)
        await stream.send_all(data + encoder.end())
        return "keep-alive"

    return serve


def _early_413(*, linger: float = 0.1) -> Serve:
    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        body = _encode(
            {
                "type": "error",
                "error": {
                    "type": "request_too_large",
                    "message": "Request exceeds the maximum size",
                },
            }
        )
        encoder = H11Response()
        head = encoder.head(
            413,
            [
                ("content-type", "application/json"),
                ("content-length", str(len(body))),
                ("connection", "close"),
            ],
        )
        await stream.send_all(head + encoder.data(body))
        if isinstance(stream, trio.abc.HalfCloseableStream):
            await stream.send_eof()
        # Unread body bytes are waiting: closing now makes the kernel reset
        # the connection under the client's write, after the answer arrived.
        await trio.sleep(linger)
        return "close"

    return serve


def _garbage_status() -> Serve:
    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        await stream.send_all(b"HTTP/1.1 2OO Okay-ish\r\ncontent-length: 0\r\n\r\n")
        return "close"

    return serve


def _broken_chunked() -> Serve:
    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        first = _events(request)[0]
        body = b"%x\r\n%b\r\n" % (len(first), first) + b"zz\r\nhello\r\n0\r\n\r\n"
        await stream.send_all(_chunked_sse_head() + body)
        return "close"

    return serve


def _blank_line_flood() -> Serve:
    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        await stream.send_all(_chunked_sse_head())
        batch = b"\n" * (_WRITE_BYTES - 16)
        return await _forever(stream, b"%x\r\n%b\r\n" % (len(batch), batch))

    return serve


def _comment_flood() -> Serve:
    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        encoder = H11Response()
        await stream.send_all(_sse_head(encoder) + encoder.data(_events(request)[0]))
        comments = b": keep-alive\n\n" * (_WRITE_BYTES // 14)
        return await _forever(stream, encoder.data(comments))

    return serve


def _giant_deltas(*, count: int = 8, delta_bytes: int = 300_000) -> Serve:
    parts = tuple(chr(ord("a") + i % 26) * delta_bytes for i in range(count))

    async def serve(stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        encoder = H11Response()
        await stream.send_all(_sse_head(encoder))
        for event in _events(request, parts):
            await stream.send_all(encoder.data(event))
        await stream.send_all(encoder.end())
        return "keep-alive"

    return serve


def _entry(
    name: str,
    description: str,
    code: str | None,
    build: Callable[..., Serve],
    *,
    at_head: bool = False,
) -> tuple[str, Misbehaviour]:
    return name, Misbehaviour(name, description, code, at_head, build)


#: Every misbehaviour by name, in a stable order.
MISBEHAVIOURS: Final[Mapping[str, Misbehaviour]] = dict(
    [
        _entry(
            "endless-head",
            "a status line, then header lines forever",
            "PROTOCOL",
            _endless_head,
        ),
        _entry(
            "giant-chunk-size",
            "a chunked body whose first size line is 64 hex digits",
            "PROTOCOL",
            _giant_chunk_size,
        ),
        _entry(
            "1xx-flood",
            "103 Early Hints responses forever, never a final status",
            "PROTOCOL",
            _informational_flood,
        ),
        _entry(
            "gzip-bomb",
            "a gzip body of ~1 MiB inflating to 1 GiB, one endless SSE line",
            "PROTOCOL",
            _gzip_bomb,
        ),
        _entry(
            "echo-secrets",
            "a 401 whose body repeats the request's key (options: phrasing)",
            "AUTH",
            _echo_secrets,
        ),
        _entry(
            "trickle",
            "a well-formed stream sent one byte per write",
            None,
            _trickle,
        ),
        _entry(
            "reset-mid-body",
            "a few events, then a TCP reset",
            "NETWORK",
            _reset_mid_body,
        ),
        _entry(
            "deep-nesting",
            "an SSE event whose JSON nests 5000 arrays deep",
            "PROTOCOL",
            _deep_nesting,
        ),
        _entry(
            "stale-keep-alive",
            "a whole response offering keep-alive; the next request on that connection is"
            " met by a close, unanswered",
            None,
            _stale_keep_alive,
        ),
        _entry(
            "early-413",
            "413 and close as soon as the head is read, while the body is still being written",
            "INVALID_REQUEST",
            _early_413,
            at_head=True,
        ),
        _entry(
            "garbage-status",
            "a status line whose code is not a number",
            "PROTOCOL",
            _garbage_status,
        ),
        _entry(
            "broken-chunked",
            "a chunk size that is not hexadecimal after one good chunk",
            "PROTOCOL",
            _broken_chunked,
        ),
        _entry(
            "blank-line-flood",
            "an SSE body of empty lines forever",
            "PROTOCOL",
            _blank_line_flood,
        ),
        _entry(
            "comment-flood",
            "one event, then SSE comments forever, never another event",
            "PROTOCOL",
            _comment_flood,
        ),
        _entry(
            "giant-deltas",
            "a well-formed stream of 8 text deltas of 300 kB each",
            None,
            _giant_deltas,
        ),
    ]
)


def hostile(name: str, **options: Any) -> HostileScript:
    """The script for misbehaviour `name` (a key of `MISBEHAVIOURS`), with its `options`.

    The result is a script like any other: a whole route, an item of a script
    queue, or a router's answer (an ``at_head`` misbehaviour, ``early-413``,
    needs a static route or a queue). Options, by misbehaviour:
    ``endless-head``: ``line_bytes``; ``giant-chunk-size``: ``digits``;
    ``1xx-flood``: ``status``; ``gzip-bomb``: ``inflated_mib``, ``fill``;
    ``echo-secrets``: ``phrasing`` (one of `SECRET_PHRASINGS`), ``status``;
    ``trickle``: ``delay``; ``reset-mid-body``: ``after_events``;
    ``deep-nesting``: ``depth``; ``early-413``: ``linger``;
    ``giant-deltas``: ``count``, ``delta_bytes``.

    Raises `KeyError` for an unknown name, `TypeError` for an unknown option,
    `ValueError` for a bad option value.
    """
    try:
        entry = MISBEHAVIOURS[name]
    except KeyError:
        raise KeyError(
            f"unknown misbehaviour {name!r}; known: {', '.join(MISBEHAVIOURS)}"
        ) from None
    return HostileScript(name=name, serve=entry._build(**options), at_head=entry.at_head)
