"""The cassette format, without I/O: exchanges, their JSON Lines encoding, scrubbing and matching.

A cassette is a JSON Lines file, one `Exchange` per line, each carrying
``"version": 1``. An exchange is one request as it went upstream (secrets
removed) and the response bytes exactly as they came back, cut where each
read off the upstream socket ended, each with its offset in seconds from the
moment the request was complete, and how the exchange ended (the connection
kept for the next request, closed, reset, or left stalled until the client
went away). The response's status and headers are parsed from those bytes
for the reader's sake; the reads are what is replayed.

Secrets: headers named in `SECRET_HEADERS` and query parameters named in
`SECRET_QUERY` are replaced; their values, and any value the caller names,
are then removed wherever else they occur: by `llmrt`'s `Redactor` in the
request (which also removes what merely looks like a credential), and in the
response bytes by a mask of the same length, so that ``Content-Length`` and
chunk sizes stay true and the replayed bytes still parse as they did.
"""

from __future__ import annotations

import base64
import difflib
import json
import urllib.parse
from collections.abc import Collection, Iterable, Sequence
from typing import Final, Literal, TypeAlias

import msgspec

from llmrt._redact import REDACTED, Redactor

__all__ = [
    "FORMAT_VERSION",
    "MATCH_ON",
    "SECRET_HEADERS",
    "SECRET_QUERY",
    "CassetteError",
    "End",
    "EndKind",
    "Exchange",
    "Read",
    "Request",
    "Response",
    "Scrubber",
    "decode_cassette",
    "encode_exchange",
    "mismatch_report",
    "nearest",
    "render_request",
    "request_matches",
]

#: The cassette format this llmrt writes and reads.
FORMAT_VERSION: Final = 1

#: Request headers (and response headers) whose values are secrets, lower case.
SECRET_HEADERS: Final = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "x-auth-token",
    }
)
#: Query parameters whose values are secrets, lower case.
SECRET_QUERY: Final = frozenset(
    {"key", "api_key", "api-key", "apikey", "access_token", "token", "sig", "signature", "secret"}
)
#: What a request is matched on by default: method, path with query, and body.
MATCH_ON: Final = ("method", "path", "body")
#: Every field a request can be matched on.
MATCH_FIELDS: Final = frozenset({"method", "host", "path", "body", "headers"})

#: The byte that masks a secret inside response bytes (one per byte of the secret).
_MASK: Final = b"*"

EndKind: TypeAlias = Literal["keep-alive", "close", "reset", "stall"]


class CassetteError(Exception):
    """A cassette cannot be read, written or used as asked; the message says why.

    `code` is stable: ``"NOT_FOUND"`` (mode ``"none"`` and no file),
    ``"FORMAT"`` (a line that is not an exchange of a known version),
    ``"NO_TARGET"`` (recording without a target), ``"TOO_LARGE"`` (an exchange
    above the byte bound), ``"USAGE"`` (a bad argument).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Read(msgspec.Struct, frozen=True, omit_defaults=True):
    """One read off the upstream socket: `at` seconds after the request; UTF-8 `text` or `b64`."""

    at: float
    text: str | None = None
    b64: str | None = None

    @property
    def data(self) -> bytes:
        return _unbody(self.text, self.b64)


class End(msgspec.Struct, frozen=True):
    """How the exchange ended, `at` seconds after the request.

    ``keep-alive``: the response was complete and the connection stayed open;
    ``close``: the upstream closed it (a FIN); ``reset``: the upstream reset
    it; ``stall``: the upstream sent nothing more and the client left first.
    """

    kind: EndKind
    at: float


class Request(msgspec.Struct, frozen=True, omit_defaults=True):
    """The request as it went upstream, secrets removed; the body as `text` or `b64`."""

    method: str
    url: str
    headers: list[tuple[str, str]]
    text: str | None = None
    b64: str | None = None

    @property
    def body(self) -> bytes:
        return _unbody(self.text, self.b64)


class Response(msgspec.Struct, frozen=True, omit_defaults=True):
    """The status and headers parsed from the reads, for review (None: no parsable head)."""

    status: int | None = None
    headers: list[tuple[str, str]] | None = None


class Exchange(msgspec.Struct, frozen=True, omit_defaults=True):
    """One request and the response bytes it got, read by read."""

    version: int
    request: Request
    response: Response
    reads: list[Read]
    end: End
    #: Which client connection carried it (0-based, in the recording session).
    connection: int = 0


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Exchange)


def encode_exchange(exchange: Exchange) -> bytes:
    """One JSON Lines record: the exchange's JSON and a newline."""
    return _encoder.encode(exchange) + b"\n"


def decode_cassette(data: bytes, *, source: str = "cassette") -> list[Exchange]:
    """Every exchange of a JSON Lines cassette, in order (blank lines skipped).

    Raises `CassetteError` (``FORMAT``) naming the line of a record that is
    not an exchange or has another version.
    """
    exchanges = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            exchange = _decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise CassetteError("FORMAT", f"{source}:{number}: not an exchange: {exc}") from None
        if exchange.version != FORMAT_VERSION:
            raise CassetteError(
                "FORMAT",
                f"{source}:{number}: cassette version {exchange.version} "
                f"(this llmrt reads version {FORMAT_VERSION})",
            )
        exchanges.append(exchange)
    return exchanges


def body_fields(data: bytes) -> tuple[str | None, str | None]:
    """(text, None) when `data` is UTF-8, else (None, base64)."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, base64.b64encode(data).decode("ascii")


def _unbody(text: str | None, b64: str | None) -> bytes:
    if text is not None:
        return text.encode("utf-8")
    if b64 is not None:
        return base64.b64decode(b64)
    return b""


def make_read(at: float, data: bytes) -> Read:
    text, b64 = body_fields(data)
    return Read(at=at, text=text, b64=b64)


# ---- secrets ----------------------------------------------------------------------------------


def _forms(secret: str) -> set[str]:
    """A secret as it may be echoed: as is, JSON-escaped, URL-encoded."""
    escaped = json.dumps(secret)[1:-1]
    return {secret, escaped, escaped.replace("/", "\\/"), urllib.parse.quote(secret, safe="")}


class Scrubber:
    """Removes secrets from one exchange: by header and query name, then by value.

    Built per exchange from the caller's `secrets` and the names to treat as
    secret; `harvest` adds the values the request itself carries under those
    names (an API key in ``Authorization``, ``x-api-key``, ``?key=``).
    """

    def __init__(
        self,
        secrets: Iterable[str] = (),
        *,
        headers: Collection[str] = SECRET_HEADERS,
        query: Collection[str] = SECRET_QUERY,
    ) -> None:
        self._values = {s for s in secrets if s}
        self._headers = frozenset(h.lower() for h in headers)
        self._query = frozenset(q.lower() for q in query)

    def harvest(self, headers: Iterable[tuple[str, str]], target: str) -> None:
        """Learn the secret values `headers` and the query of `target` carry."""
        for name, value in headers:
            if name.lower() in self._headers and value:
                self._values.add(value)
                scheme, _, credentials = value.partition(" ")
                if credentials.strip() and scheme.isalpha():
                    self._values.add(credentials.strip())
        query = urllib.parse.urlsplit(target).query
        for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
            if name.lower() in self._query and value:
                self._values.add(value)

    def _redactor(self) -> Redactor:
        return Redactor(sorted(self._values))

    def header(self, name: str, value: str, redactor: Redactor) -> str:
        if name.lower() in self._headers:
            scheme, _, credentials = value.partition(" ")
            # Keep the scheme ("Bearer") so a reader sees how the key was sent.
            return f"{scheme} {REDACTED}" if credentials and scheme.isalpha() else REDACTED
        return redactor.redact(value)

    def url(self, url: str, redactor: Redactor) -> str:
        split = urllib.parse.urlsplit(url)
        if split.query:
            pairs = urllib.parse.parse_qsl(split.query, keep_blank_values=True)
            query = "&".join(
                f"{urllib.parse.quote(n, safe='')}="
                + (REDACTED if n.lower() in self._query else urllib.parse.quote(v, safe=""))
                for n, v in pairs
            )
            split = split._replace(query=query)
        return redactor.redact(urllib.parse.urlunsplit(split))

    def request(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes
    ) -> Request:
        """The request to record or match: every secret replaced by ``[redacted]``."""
        redactor = self._redactor()
        text, b64 = body_fields(body)
        if text is not None:
            text = redactor.redact(text)
        else:
            b64 = base64.b64encode(self.mask(body)).decode("ascii")
        return Request(
            method=method,
            url=self.url(url, redactor),
            headers=[(n, self.header(n, v, redactor)) for n, v in headers],
            text=text,
            b64=b64,
        )

    def mask(self, data: bytes) -> bytes:
        """`data` with every known secret value overwritten byte for byte (same length)."""
        forms = sorted({f.encode() for s in self._values for f in _forms(s)}, key=len, reverse=True)
        for form in forms:
            if form in data:
                data = data.replace(form, _MASK * len(form))
        return data

    def response(self, data: bytes, head_end: int) -> bytes:
        """The response bytes masked: secret headers' values within the head, secrets by value.

        `head_end` is where the head ends (0: no head was parsed). Lengths are kept.
        """
        if head_end:
            lines = data[:head_end].split(b"\n")
            for i, line in enumerate(lines):
                name, colon, value = line.partition(b":")
                if colon and name.strip().lower().decode("latin-1") in self._headers:
                    kept = value.rstrip(b"\r")
                    lines[i] = name + colon + _MASK * len(kept) + value[len(kept) :]
            data = b"\n".join(lines) + data[head_end:]
        return self.mask(data)


# ---- matching ---------------------------------------------------------------------------------


def _canonical_body(request: Request) -> str:
    """The body compared and shown: JSON re-encoded with sorted keys and indented, else as is."""
    if request.text is None:
        return f"<{len(request.body)} bytes, base64> {request.b64}"
    try:
        value = json.loads(request.text)
    except ValueError:
        return request.text
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _path(url: str) -> str:
    split = urllib.parse.urlsplit(url)
    return split.path + (f"?{split.query}" if split.query else "")


def request_matches(asked: Request, recorded: Request, match_on: Collection[str]) -> bool:
    """Whether `asked` is `recorded` on every field of `match_on` (see `MATCH_FIELDS`)."""
    for field in match_on:
        match field:
            case "method":
                same = asked.method == recorded.method
            case "host":
                same = (
                    urllib.parse.urlsplit(asked.url).netloc
                    == urllib.parse.urlsplit(recorded.url).netloc
                )
            case "path":
                same = _path(asked.url) == _path(recorded.url)
            case "body":
                same = _canonical_body(asked) == _canonical_body(recorded)
            case "headers":
                same = sorted(asked.headers) == sorted(recorded.headers)
            case _:
                raise CassetteError(
                    "USAGE", f"cannot match on {field!r}; use {sorted(MATCH_FIELDS)}"
                )
        if not same:
            return False
    return True


def render_request(request: Request, match_on: Collection[str] = MATCH_FIELDS) -> list[str]:
    """A request as the lines a mismatch diff compares: what `match_on` compares, nothing else."""
    where = request.url if "host" in match_on else _path(request.url)
    lines = [f"{request.method if 'method' in match_on else '*'} {where}"]
    if "headers" in match_on:
        lines.extend(f"{name}: {value}" for name, value in sorted(request.headers))
    if "body" in match_on:
        lines.append("")
        lines.extend(_canonical_body(request).splitlines())
    return lines


def nearest(
    asked: Request, candidates: Sequence[Request], match_on: Collection[str] = MATCH_ON
) -> Request | None:
    """The candidate most like `asked` (same method and path first, then the closest text)."""
    if not candidates:
        return None
    mine = render_request(asked, match_on)

    def likeness(candidate: Request) -> tuple[bool, float]:
        same_place = candidate.method == asked.method and _path(candidate.url) == _path(asked.url)
        ratio = difflib.SequenceMatcher(None, mine, render_request(candidate, match_on)).ratio()
        return same_place, ratio

    return max(candidates, key=likeness)


def mismatch_report(
    asked: Request,
    recorded: Sequence[Request],
    played: int,
    match_on: Collection[str] = MATCH_ON,
) -> str:
    """Why `asked` found no exchange: a diff against the nearest recorded request, on `match_on`."""
    head = f"no recorded exchange matches {asked.method} {_path(asked.url)}"
    if played:
        head += f" ({played} matching exchange(s) were already played)"
    near = nearest(asked, recorded, match_on)
    if near is None:
        lines = render_request(asked, match_on)
        return head + "; the cassette records no exchange:\n" + "\n".join(lines)
    diff = difflib.unified_diff(
        render_request(near, match_on),
        render_request(asked, match_on),
        "recorded",
        "asked",
        lineterm="",
    )
    return head + "; the nearest recorded one differs:\n" + "\n".join(diff)
