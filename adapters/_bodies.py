"""Response bodies from outside, bounded: content decoding, and SSE payloads fit to decode.

Two guards between the network and the adapters' decoders:

- `BoundedInflater` decodes a ``gzip`` or ``deflate`` body incrementally: each
  network read comes out as pieces of at most `INFLATE_PIECE` bytes, so the
  SSE parser's line and event bounds apply to what the decompressor produces
  per step (not after a whole bomb was inflated), and the reader yields to
  the event loop between pieces. The output may not exceed `INFLATE_RATIO`
  times the compressed input (past a floor of `INFLATE_FLOOR` bytes): a body
  that inflates more is a bomb, not a provider, and ends as ``PROTOCOL``.
- `check_depth` refuses an SSE payload nested deeper than `llmrt`'s
  ``MAX_NESTING`` (msgspec would recurse into `RecursionError`);
  `GatedSSEParser` applies it to every payload it hands over.
  `describe_json_error` corrects msgspec's message for an unpaired UTF-16
  surrogate escape ("Input data was truncated") once decoding failed.

The adapters ask for ``Accept-Encoding: gzip, deflate`` (`ACCEPT_ENCODING`),
the two codings inflated here; any other coding is refused as ``PROTOCOL``.
Compression is kept, rather than asking for ``identity``, because a hostile
or misconfigured server may compress anyway (so the bounded decoder is
needed in any case) and providers' error and model-list bodies are smaller
compressed. No I/O here.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator, Mapping
from typing import Final

from llmrt import ErrorCode, LlmError
from llmrt._nesting import MAX_NESTING, json_too_deep

from ._sse import SSEEvent, SSEParser

__all__ = [
    "ACCEPT_ENCODING",
    "INFLATE_FLOOR",
    "INFLATE_PIECE",
    "INFLATE_RATIO",
    "BoundedInflater",
    "GatedSSEParser",
    "check_depth",
    "describe_json_error",
    "inflater_for",
]

#: What the adapters ask providers for: the codings `BoundedInflater` decodes.
ACCEPT_ENCODING: Final = "gzip, deflate"
#: The most bytes one decompression step produces.
INFLATE_PIECE: Final = 64 * 1024
#: The most output per compressed input byte (JSON event streams compress 3-20 times).
INFLATE_RATIO: Final = 100
#: Output allowed whatever the ratio, so a short compressed body is never refused.
INFLATE_FLOOR: Final = 1024 * 1024

_GZIP = frozenset({"gzip", "x-gzip"})


class BoundedInflater:
    """Incremental ``gzip``/``deflate`` decoding with a bounded output per step and in total.

    `feed` takes one compressed read and yields its decoded bytes in pieces of
    at most `INFLATE_PIECE`. Raises `LlmError` ``PROTOCOL`` for corrupt data
    and for output above ``max(INFLATE_FLOOR, INFLATE_RATIO * input)``.
    Bytes after the end of the compressed stream are ignored, and so is a
    stream cut short (the body's own framing reports that), as httpx does.
    """

    __slots__ = ("_coding", "_first", "_in", "_out", "_zlib")

    def __init__(self, coding: str) -> None:
        self._coding = coding
        gzip = coding in _GZIP
        self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS)
        # "deflate" means zlib-wrapped (RFC 9110), but some servers send raw deflate.
        self._first = not gzip
        self._in = 0
        self._out = 0

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of ``data``, at most `INFLATE_PIECE` per piece."""
        while data:
            before = len(data)
            try:
                piece = self._zlib.decompress(data, INFLATE_PIECE)
            except zlib.error as exc:
                if self._first:
                    self._first = False
                    self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise LlmError(
                    ErrorCode.PROTOCOL, f"undecodable {self._coding} response body ({exc})"
                ) from None
            self._first = False
            data = self._zlib.unconsumed_tail
            # The ratio counts the input consumed so far, not the whole read.
            self._in += before - len(data)
            if not piece:
                return  # all input consumed, or the end of the compressed stream
            self._out += len(piece)
            if self._out > INFLATE_FLOOR and self._out > INFLATE_RATIO * self._in:
                raise LlmError(
                    ErrorCode.PROTOCOL,
                    f"the {self._coding} response body inflates more than "
                    f"{INFLATE_RATIO} times (a decompression bomb?)",
                )
            yield piece


def inflater_for(headers: Mapping[str, str]) -> BoundedInflater | None:
    """The inflater a response's ``Content-Encoding`` needs, or None for an unencoded body.

    Raises `LlmError` ``PROTOCOL`` for a coding other than ``gzip``/``deflate``
    (never asked for) and for more than one coding (each would multiply the ratio).
    """
    value = headers.get("content-encoding")
    if not value:
        return None
    codings = [c.strip().lower() for c in value.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) == 1 and (codings[0] in _GZIP or codings[0] == "deflate"):
        return BoundedInflater(codings[0])
    raise LlmError(
        ErrorCode.PROTOCOL,
        f"unsupported content coding {value[:60]!r} (llmrt asks for {ACCEPT_ENCODING})",
    )


# A JSON escape: a backslash and the character it escapes, or a \uXXXX code unit.
_ESCAPE = re.compile(rb"\\(?:u([0-9A-Fa-f]{4})|.)", re.S)


def _unpaired_surrogate(data: bytes) -> bytes | None:
    """The first ``\\uXXXX`` escape of a UTF-16 surrogate without its partner, or None."""
    high_end = -1  # where the previous escape ended, if it was a high surrogate
    for match in _ESCAPE.finditer(data):
        unit = match.group(1)
        value = int(unit, 16) if unit is not None else -1
        if high_end >= 0:
            if match.start() != high_end or not 0xDC00 <= value <= 0xDFFF:
                return data[high_end - 6 : high_end]
            high_end = -1
            continue
        if 0xD800 <= value <= 0xDBFF:
            high_end = match.end()
        elif 0xDC00 <= value <= 0xDFFF:
            return match.group(0)
    return data[high_end - 6 : high_end] if high_end >= 0 else None


def check_depth(data: bytes) -> None:
    """Refuse an SSE payload, about to be decoded as JSON, nested more than ``MAX_NESTING`` deep.

    Raises `LlmError` ``PROTOCOL`` (msgspec would recurse into `RecursionError`
    a few hundred levels further, at a depth that depends on the caller's
    stack). Anything else malformed is left for the decoder to report.
    """
    if json_too_deep(data):
        raise LlmError(
            ErrorCode.PROTOCOL,
            f"an event from the provider nests JSON more than {MAX_NESTING} levels deep",
        )


def describe_json_error(exc: Exception, data: bytes) -> str:
    """msgspec's message for a payload it could not decode, corrected where it misleads.

    msgspec says "Input data was truncated" for a string holding half of a
    UTF-16 surrogate pair (``"\\ud83d"``), although nothing was cut; this
    names the escape instead. Only called once decoding failed.
    """
    text = str(exc)
    if "truncated" in text:
        escape = _unpaired_surrogate(data)
        if escape is not None:
            return (
                f"JSON is malformed: the string escape {escape.decode('ascii')} "
                "is half of a UTF-16 surrogate pair"
            )
    return text


class GatedSSEParser(SSEParser):
    """An `SSEParser` whose every payload passed the depth check before it is handed over.

    The common payload costs two byte counts and no call.
    """

    __slots__ = ()

    def feed(self, data: bytes) -> list[SSEEvent]:
        events = super().feed(data)
        for event in events:
            payload = event.data
            if payload.count(b"[") + payload.count(b"{") > MAX_NESTING:
                check_depth(payload)
        return events

    def feed_data(self, data: bytes) -> list[bytes]:
        payloads = super().feed_data(data)
        for payload in payloads:
            if payload.count(b"[") + payload.count(b"{") > MAX_NESTING:
                check_depth(payload)
        return payloads
