"""The plain request head of an HTTP API call, read without h11. Sans-I/O.

A call to one of the provider APIs (``POST /v1/chat/completions``, ...) is a
short head and a JSON body framed by ``Content-Length``. Reading that head
with h11 (its state machine, its event objects, its header validation) was
about a third of the task step that reads a request and starts its call,
on the path whose latency the front door is measured by. `parse_plain_head`
reads only that common head, and only when every line of it is plainly
valid: anything else (bare ``LF`` line ends, folded or malformed lines,
``Transfer-Encoding``, ``Expect``, ``Upgrade``, more than one
``Content-Length`` or ``Host``, HTTP/1.1 without ``Host``, a target that is
not a path, a head past the front door's bound) returns None and the caller
reads the same bytes with h11, which answers or refuses them as before.

So this parser decides nothing h11 would decide differently:
``tests/test_plain_head.py`` checks every head it accepts against h11's
reading of it, and that it accepts none that h11 refuses.
"""

from __future__ import annotations

import re
from typing import Final

import attrs

__all__ = ["PlainRequest", "parse_plain_head"]

_TOKEN: Final = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
#: ``method SP origin-form SP HTTP/1.x`` (RFC 9112 section 3), the target visible ASCII.
_REQUEST_LINE: Final = re.compile(rb"(%b) (/[\x21-\x7e]*) HTTP/1\.([01])" % _TOKEN)
#: ``name ":" OWS value OWS`` with h11's value characters (visible, obs-text,
#: and spaces or tabs only between them); no obs-fold (a line starting blank).
_FIELD: Final = re.compile(
    rb"(%b):[ \t]*((?:[\x21-\x7e\x80-\xff](?:[\t\x20-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?)[ \t]*"
    % _TOKEN
)
#: Headers whose presence sends the head to h11 (framing, or more than a plain request).
_TO_H11: Final = frozenset((b"transfer-encoding", b"expect", b"upgrade"))
#: A Content-Length longer than this many digits goes to h11 (it refuses or bounds it).
_LENGTH_DIGITS: Final = 18


@attrs.frozen
class PlainRequest:
    """A request head `parse_plain_head` read: what the HTTP API handler reads of h11's.

    ``headers`` are h11's shape (lower-case names, values without the
    surrounding whitespace, in order); ``content_length`` is 0 without the
    header; ``rest`` is what followed the head in the bytes parsed (the
    body's first bytes, usually all of it).
    """

    method: bytes
    target: bytes
    http_version: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    content_length: int
    rest: bytes


def parse_plain_head(data: bytes, max_head_bytes: int) -> PlainRequest | None:
    """The request head at the start of ``data``, when it is complete and plain; else None.

    None also when the head (with its blank line) is longer than
    ``max_head_bytes``. Never raises.
    """
    end = data.find(b"\r\n\r\n", 0, max_head_bytes)
    if end < 0 or end + 4 > max_head_bytes:
        return None
    lines = data[:end].split(b"\r\n")
    line = _REQUEST_LINE.fullmatch(lines[0])
    if line is None:
        return None
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    host = False
    match = _FIELD.fullmatch
    for raw in lines[1:]:
        field = match(raw)
        if field is None:
            return None
        name = field[1].lower()
        value = field[2]
        if name in _TO_H11:
            return None
        if name == b"content-length":
            if length is not None or not value.isdigit() or len(value) > _LENGTH_DIGITS:
                return None
            length = int(value)
        elif name == b"host":
            if host:
                return None  # h11 refuses a second Host
            host = True
        headers.append((name, value))
    version = b"1." + line[3]
    if version == b"1.1" and not host:
        return None
    return PlainRequest(
        method=line[1],
        target=line[2],
        http_version=version,
        headers=tuple(headers),
        content_length=length or 0,
        rest=data[end + 4 :],
    )
