"""Nesting-depth checks for untrusted JSON, MessagePack and TOML, before they are decoded.

msgspec and `tomllib` decode recursively, so input nested a few thousand deep
raises `RecursionError` from inside the decoder (at a depth that depends on
the caller's own stack). Every boundary that decodes bytes from outside
(gateway frames, SSE payloads, configuration files) asks these functions first
and refuses with its own coded error, at a documented depth.

Each check is cheap on ordinary input: it first counts the bytes that could
open a container (one C-level pass) and only walks the input when that count
is above the limit. None of them validates the input: malformed input that
is not too deep is left for the decoder to report.
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_NESTING",
    "json_too_deep",
    "msgpack_too_deep",
    "toml_too_deep",
]

#: The default limit on nested arrays/objects (maps/tables) in any input from outside.
#: Real requests nest a handful of levels (a tool schema rarely passes 10).
MAX_NESTING = 64

_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.S)
_TOML_TOKEN = re.compile(
    r'"""(?:[^\\]|\\.)*?(?:"""|\Z)'
    r"|'''.*?(?:'''|\Z)"
    r'|"(?:[^"\\\n]|\\.)*"?'
    r"|'[^'\n]*'?"
    r"|#[^\n]*"
    r"|[\[\]{}]",
    re.S,
)
_OPENERS = frozenset((ord("["), ord("{"), "[", "{"))
_CLOSERS = frozenset((ord("]"), ord("}"), "]", "}"))


def _too_deep(matches: list[bytes] | list[str], limit: int) -> bool:
    depth = 0
    for token in matches:
        if len(token) != 1:
            continue  # a string or a comment
        c = token[0] if isinstance(token, bytes) else token
        if c in _OPENERS:
            depth += 1
            if depth > limit:
                return True
        elif c in _CLOSERS and depth:
            depth -= 1
    return False


def json_too_deep(data: bytes | str, limit: int = MAX_NESTING) -> bool:
    """Whether JSON `data` nests arrays/objects more than `limit` deep.

    Brackets inside strings do not count. Not a checkpoint; no I/O.
    """
    if isinstance(data, str):
        if data.count("[") + data.count("{") <= limit:
            return False
        data = data.encode("utf-8", "surrogatepass")
    elif data.count(b"[") + data.count(b"{") <= limit:
        return False
    return _too_deep(_JSON_TOKEN.findall(data), limit)


def toml_too_deep(text: str, limit: int = MAX_NESTING) -> bool:
    """Whether TOML `text` nests inline arrays/tables more than `limit` deep.

    Brackets inside strings (all four kinds) and comments do not count; a
    table header (``[a]``, ``[[a]]``) counts as the one or two levels it opens
    and closes. Not a checkpoint; no I/O.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    return _too_deep(_TOML_TOKEN.findall(text), limit)


#: Bytes that open a MessagePack container: fixmap, fixarray, array16/32, map16/32.
_MSGPACK_CONTAINERS = bytes(range(0x80, 0xA0)) + b"\xdc\xdd\xde\xdf"

#: Payload sizes after the type byte, for the fixed-width MessagePack types.
_FIXED: dict[int, int] = {
    0xC0: 0, 0xC2: 0, 0xC3: 0,  # nil, false, true
    0xCA: 4, 0xCB: 8,  # float32/64
    0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8,  # uint8..64
    0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8,  # int8..64
    0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17,  # fixext 1..16 (type byte + data)
}  # fmt: skip
#: Length-prefixed types: (width of the length, extra bytes after it).
_SIZED: dict[int, tuple[int, int]] = {
    0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0),  # bin8/16/32
    0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1),  # ext8/16/32 (plus a type byte)
    0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0),  # str8/16/32
}  # fmt: skip


def msgpack_too_deep(data: bytes, limit: int = MAX_NESTING) -> bool:
    """Whether MessagePack `data` nests arrays/maps more than `limit` deep.

    Walks the encoding without building values; malformed or truncated input
    that is not too deep returns False (the decoder reports it). Not a
    checkpoint; no I/O.
    """
    if len(data) - len(data.translate(None, _MSGPACK_CONTAINERS)) <= limit:
        return False
    # `pending` holds, per open container, how many items it still expects.
    pending: list[int] = []
    i, n = 0, len(data)
    while i < n:
        b = data[i]
        i += 1
        items = -1
        if b <= 0x7F or b >= 0xE0:
            pass
        elif b <= 0x8F:
            items = 2 * (b & 0x0F)
        elif b <= 0x9F:
            items = b & 0x0F
        elif b <= 0xBF:
            i += b & 0x1F
        elif b in _FIXED:
            i += _FIXED[b]
        elif b in _SIZED:
            width, extra = _SIZED[b]
            i += width + extra + int.from_bytes(data[i : i + width], "big")
        elif b in (0xDC, 0xDE):
            items = int.from_bytes(data[i : i + 2], "big") * (2 if b == 0xDE else 1)
            i += 2
        elif b in (0xDD, 0xDF):
            items = int.from_bytes(data[i : i + 4], "big") * (2 if b == 0xDF else 1)
            i += 4
        else:
            return False  # 0xC1 is never used: malformed
        # This value fills one slot of the innermost open container.
        if pending:
            pending[-1] -= 1
        if items >= 0:
            if len(pending) + 1 > limit:
                return True
            if items:
                pending.append(items)
        while pending and pending[-1] == 0:
            pending.pop()
    return False
