"""The gateway's front door: plain HTTP routes and websocket upgrades on one TCP port.

Each accepted connection is read up to the end of its request head, with h11,
under a byte bound (`MAX_HEAD_BYTES`) and a time bound (the handshake
timeout), and counted as pending until then (`_admission`: a connection shed
to make room for others gets a 503 instead, see `early_answer`). Then:

* a websocket upgrade (``Upgrade: websocket``) goes to trio-websocket with the
  bytes already read replayed in front of the socket (`ReplayStream`), so the
  handshake and everything after it are trio-websocket's, exactly as before
  the front door existed;
* any other request gets one fixed answer (`FrontDoor.answer`) and the
  connection is closed:

  ========================  =================================================
  ``GET /``                 the playground page (``text/html``)
  ``GET /healthz``          200: the process serves
  ``GET /readyz``           200 while accepting calls, 503 while draining or
                            shutting down
  ``GET /metrics``          Prometheus text exposition (401 without the
                            gateway token when ``metrics_auth = "token"``)
  anything else             404; another method on a known route: 405
  ========================  =================================================

  ``HEAD`` is answered like ``GET``, without the body.

Why no HTTP framework: four fixed ``GET`` routes without request bodies, on a
port whose real traffic is websockets, need a request-head parser and a
response writer, not routing, middleware or an ASGI server (which would also
own the socket that trio-websocket needs). h11 is that parser and writer:
it is the kept HTTP/1.1 library (httpx depends on it, and wsproto parses the
websocket handshake with it), sans-I/O, and it bounds the head it buffers.
One exception: a plain head for the provider APIs (`_http_handler`) that
came whole in the connection's first read is read by
`_head.parse_plain_head`, which takes only heads h11 would read the same way
and leaves every other one (and every head that came in pieces) to h11.

Plain answers carry ``Connection: close``: a scraper or a probe opens one
connection per request, which costs nothing at their rates, and the front
door holds no keep-alive state.

The logic (`is_upgrade`, `FrontDoor.answer`, `content_security_policy`,
`chosen_gateway`) does
no I/O; `serve_stream` is the I/O around it.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final

import attrs
import h11
import trio

from llmrt._helpers import stdlib_socket

from ._admission import Admission, Ticket
from ._counters import GatewayCounters, RefusalCause
from ._head import parse_plain_head
from ._protocol import bearer_from_headers, token_matches

if TYPE_CHECKING:
    from ._http_handler import HttpApi

__all__ = [
    "MAX_HEAD_BYTES",
    "METRICS_AUTH",
    "Answer",
    "check_metrics_auth",
    "FrontDoor",
    "ReplayStream",
    "chosen_gateway",
    "content_security_policy",
    "early_answer",
    "peer_address",
    "send_early_answer",
    "handshake_problem",
    "is_upgrade",
    "read_request_head",
    "serve_stream",
]

log = logging.getLogger("llmrt.gateway")

#: The largest request head read (the request line and all header lines);
#: a larger one is answered 431.
MAX_HEAD_BYTES: Final = 16 * 1024
#: One read of a request head: a whole head in one read where it arrived whole
#: (a flood of large unfinished heads then costs one wake-up per head, not four).
_RECEIVE_BYTES: Final = MAX_HEAD_BYTES
#: After a plain answer, input is read and dropped for at most this long and this
#: much, so that closing does not reset the connection under the answer.
LINGER_SECONDS: Final = 1.0
LINGER_BYTES: Final = 64 * 1024
#: An answer sent before the head was read (a refused or shed connection) is
#: written within this long; then input is dropped for at most as long again.
EARLY_SECONDS: Final = 0.25

_TEXT: Final = b"text/plain; charset=utf-8"
_HTML: Final = b"text/html; charset=utf-8"
#: Routes a scrape or probe may name; anything else is counted as ``other``.
ROUTES: Final = ("/", "/healthz", "/readyz", "/metrics")
#: Who may read ``/metrics``: anyone who reaches the port, or holders of the token.
METRICS_AUTH: Final = ("open", "token")


def check_metrics_auth(value: str, *, token: bool) -> None:
    """Raise `ValueError` unless ``value`` is a `METRICS_AUTH` the gateway can honour."""
    if value not in METRICS_AUTH:
        raise ValueError(f"metrics_auth must be one of {', '.join(METRICS_AUTH)}, got {value!r}")
    if value == "token" and not token:
        raise ValueError('metrics_auth = "token" needs a gateway token to check')


@attrs.frozen
class Answer:
    """One plain HTTP response: status, headers (without framing ones) and body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


_REASONS: Final = {
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    404: b"Not Found",
    405: b"Method Not Allowed",
    426: b"Upgrade Required",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}
#: On every plain answer: no MIME sniffing, and nothing may frame the gateway.
_COMMON: Final = ((b"X-Content-Type-Options", b"nosniff"),)


def _text(status: int, body: str, *extra: tuple[bytes, bytes]) -> Answer:
    headers = ((b"Content-Type", _TEXT), (b"Cache-Control", b"no-store"), *_COMMON, *extra)
    return Answer(status, headers, body.encode())


_SCRIPT = re.compile(rb"<script\b([^>]*)>(.*?)</script\s*>", re.IGNORECASE | re.DOTALL)
_STYLE = re.compile(rb"<style\b[^>]*>(.*?)</style\s*>", re.IGNORECASE | re.DOTALL)
_HAS_SRC = re.compile(rb"\ssrc\s*=", re.IGNORECASE)


def _hashes(bodies: Sequence[bytes]) -> str:
    return "".join(
        f" 'sha256-{base64.b64encode(hashlib.sha256(body).digest()).decode()}'" for body in bodies
    )


def content_security_policy(page: bytes, gateway: str | None = None) -> bytes:
    """The ``Content-Security-Policy`` of the playground page ``page``.

    Nothing but the page's own inline ``<script>`` and ``<style>`` elements
    (allowed by their SHA-256 hashes, computed from the page as served) and
    same-origin files may run or style it: an injected script, inline event
    handler or ``style`` attribute does not run. It may connect to its own
    origin only (``'self'``, which CSP Level 3 browsers match to ``ws:`` and
    ``wss:`` of the same host and port), plus ``gateway``, a source the
    person chose (see `chosen_gateway`); it fetches nothing else from
    elsewhere, cannot be framed, and forms and ``<base>`` are off.
    """
    return _policy(*_inline_hashes(page), gateway)


def _inline_hashes(page: bytes) -> tuple[str, str]:
    """The hash sources of ``page``'s inline scripts and of its styles."""
    scripts = [m.group(2) for m in _SCRIPT.finditer(page) if not _HAS_SRC.search(m.group(1))]
    styles = [m.group(1) for m in _STYLE.finditer(page)]
    return _hashes(scripts), _hashes(styles)


def _policy(script_hashes: str, style_hashes: str, gateway: str | None) -> bytes:
    connect = "'self'" if gateway is None else f"'self' {gateway}"
    policy = (
        "default-src 'none'"
        f"; script-src 'self'{script_hashes}"
        f"; style-src 'self'{style_hashes}"
        "; img-src 'self' data:"
        f"; connect-src {connect}"
        "; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return policy.encode()


#: A host a CSP source can name: DNS labels or dotted IPv4 (CSP has no IPv6 literals).
_CSP_HOST = re.compile(r"[a-z0-9-]+(?:\.[a-z0-9-]+)*")


def chosen_gateway(target: bytes, headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """The gateway the person chose on the playground, as a CSP source; else None.

    The page asks for it by loading itself again at ``/?gateway=URL`` after
    the person pressed Connect with another gateway in the field. Any page
    can navigate a tab to such a URL, so it counts only when the browser
    says the navigation came from this gateway's own origin
    (``Sec-Fetch-Site: same-origin``, a header no page script can set): the
    playground itself, never a page elsewhere, a typed URL or a bookmark. The
    source is ``ws(s)://host[:port]`` rebuilt from a strictly checked URL
    (no user info, no wildcard, no characters a policy would read).
    """
    site = next((v for k, v in headers if k.lower() == b"sec-fetch-site"), None)
    if site is None or site.strip().lower() != b"same-origin":
        return None
    query = target.partition(b"?")[2].decode("ascii", "replace")
    try:
        fields = urllib.parse.parse_qsl(query, max_num_fields=32)
    except ValueError:
        return None
    url = next((v for k, v in fields if k == "gateway"), None)
    if url is None:
        return None
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname or ""
    if (
        parts.scheme not in ("ws", "wss")
        or "@" in parts.netloc
        or parts.fragment
        or not _CSP_HOST.fullmatch(host)
    ):
        return None
    return f"{parts.scheme}://{host}" + ("" if port is None else f":{port}")


def is_upgrade(request: h11.Request) -> bool:
    """Whether ``request`` asks for a websocket (``Upgrade: websocket``, any path)."""
    for name, value in request.headers:
        if name == b"upgrade" and any(
            token.strip().lower() == b"websocket" for token in value.split(b",")
        ):
            return True
    return False


def handshake_problem(request: h11.Request) -> Answer | None:
    """Why an upgrade request is not a websocket handshake, as the answer to send; else None.

    The checks wsproto makes when trio-websocket reads the handshake, made
    here first: wsproto answers a failed one itself but trio-websocket then
    waits out the handshake timeout, and the refusal would not be counted.
    """
    values: dict[bytes, list[bytes]] = {}
    for name, value in request.headers:
        values.setdefault(name, []).append(value)

    def tokens(name: bytes) -> list[bytes]:
        return [t.strip().lower() for v in values.get(name, ()) for t in v.split(b",")]

    version = values.get(b"sec-websocket-version", [None])[-1]
    if request.method != b"GET":
        return _text(400, "a websocket handshake is a GET request\n")
    if b"upgrade" not in tokens(b"connection"):
        return _text(400, "a websocket handshake needs Connection: Upgrade\n")
    if version != b"13":
        return _text(
            426 if version else 400,
            "a websocket handshake needs Sec-WebSocket-Version: 13\n",
            (b"Sec-WebSocket-Version", b"13"),
        )
    if b"sec-websocket-key" not in values:
        return _text(400, "a websocket handshake needs Sec-WebSocket-Key\n")
    if values.get(b"upgrade", [b""])[-1].lower() != b"websocket":
        return _text(400, "a websocket handshake needs Upgrade: websocket\n")
    if b"host" not in values:
        return _text(400, "a websocket handshake needs Host\n")
    return None


@attrs.define(eq=False)
class FrontDoor:
    """The plain HTTP routes of one gateway. No socket I/O.

    ``ready`` says whether the gateway accepts calls (the one readiness
    decision lives with the gateway state); ``metrics`` renders the
    Prometheus exposition and its content type; ``page`` is the playground
    (None: ``GET /`` is 404); ``metrics_token``, when set, is the bearer
    token ``/metrics`` asks for (``metrics_auth = "token"``).
    """

    ready: Callable[[], bool]
    metrics: Callable[[], Awaitable[tuple[bytes, str]]]
    page: bytes | None
    counters: GatewayCounters
    metrics_token: bytes | None = attrs.field(default=None, repr=False)
    #: The provider APIs (``POST /v1/chat/completions``, ...; `_http_handler`), if served.
    api: HttpApi | None = None
    _page_headers: tuple[tuple[bytes, bytes], ...] = attrs.field(init=False)
    _page_hashes: tuple[str, str] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._page_hashes = _inline_hashes(self.page or b"")
        self._page_headers = self._headers_for_page(None)

    def _headers_for_page(self, gateway: str | None) -> tuple[tuple[bytes, bytes], ...]:
        return (
            (b"Content-Type", _HTML),
            (b"Content-Security-Policy", _policy(*self._page_hashes, gateway)),
            (b"Cache-Control", b"no-cache"),
            (b"Referrer-Policy", b"no-referrer"),
            *_COMMON,
        )

    async def answer(
        self, method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]] = ()
    ) -> Answer:
        """The answer to a plain (non-upgrade) request. A checkpoint only for ``/metrics``.

        ``headers`` are the request's; the page's policy reads ``Sec-Fetch-Site``.
        """
        path = target.partition(b"?")[0].decode("ascii", "replace")
        known = path in ROUTES and (path != "/" or self.page is not None)
        self.counters.http_requests[path if known else "other"] += 1
        if not known:
            return _text(404, "not found\n")
        if method not in (b"GET", b"HEAD"):
            return _text(405, "method not allowed\n", (b"Allow", b"GET, HEAD"))
        match path:
            case "/":
                assert self.page is not None
                gateway = chosen_gateway(target, headers)
                if gateway is None:
                    return Answer(200, self._page_headers, self.page)
                return Answer(200, self._headers_for_page(gateway), self.page)
            case "/healthz":
                return _text(200, "ok\n")
            case "/readyz":
                if self.ready():
                    return _text(200, "ready\n")
                return _text(503, "draining\n")
            case _:  # "/metrics"
                if self.metrics_token is not None and not token_matches(
                    self.metrics_token, bearer_from_headers(headers)
                ):
                    # Checked before anything is rendered: a refused scraper costs nothing.
                    self.counters.refused(RefusalCause.AUTH)
                    return _text(
                        401, "a valid bearer token is required\n", (b"WWW-Authenticate", b"Bearer")
                    )
                body, content_type = await self.metrics()
                headers = (
                    (b"Content-Type", content_type.encode()),
                    (b"Cache-Control", b"no-store"),
                    *_COMMON,
                )
                return Answer(200, headers, body)


def early_answer(status: int, text: str) -> bytes:
    """A whole plain-text response for a connection whose head was not read (or not wholly).

    Written by hand: h11 answers only a request it has parsed. ``text`` is the
    gateway's own (ASCII) words, never the client's.
    """
    body = text.encode("ascii", "replace") + b"\n"
    lines = [
        b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"")),
        b"Content-Type: " + _TEXT,
        b"Cache-Control: no-store",
        *(name + b": " + value for name, value in _COMMON),
        b"Content-Length: %d" % len(body),
        b"Connection: close",
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def send_early_answer(stream: trio.SocketStream, answer: bytes, *, linger: bool) -> None:
    """Send ``answer`` and close ``stream``, each step bounded by `EARLY_SECONDS`.

    With ``linger``, input is read and dropped until the peer closes (at most
    `EARLY_SECONDS`, `LINGER_BYTES`) so that closing does not reset the
    connection under the answer; without, the descriptor is freed at once.
    Never raises but for cancellation.
    """
    try:
        with trio.move_on_after(EARLY_SECONDS):
            await stream.send_all(answer)
            if linger:
                await stream.send_eof()
                left = LINGER_BYTES
                while left > 0 and (chunk := await stream.receive_some(_RECEIVE_BYTES)):
                    left -= len(chunk)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # the peer left: nothing to answer
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


def peer_address(stream: trio.SocketStream) -> str:
    """The IP address of ``stream``'s peer; ``"?"`` once it is closed, or when it has none."""
    try:
        name = stream.socket.getpeername()
    except OSError:
        return "?"
    return str(name[0]) if isinstance(name, tuple) else "?"


class ReplayStream(trio.abc.Stream):
    """A socket stream that first returns ``prefix`` (bytes already read from it).

    Adds nothing per frame: sending is the socket stream's own method, and
    so is receiving once the prefix is consumed. trio-websocket cannot tell
    the peer's address through it (its ``request.remote`` is a string):
    `peer` is that address.
    """

    def __init__(self, inner: trio.SocketStream, prefix: bytes) -> None:
        self._inner = inner
        self._prefix = prefix
        # Instance attributes shadow the methods below: no extra call layer.
        self.send_all = inner.send_all  # type: ignore[method-assign]
        self.wait_send_all_might_not_block = inner.wait_send_all_might_not_block  # type: ignore[method-assign]

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if not self._prefix:
            return await self._inner.receive_some(max_bytes)
        await trio.lowlevel.checkpoint()
        if max_bytes is None or max_bytes >= len(self._prefix):
            data, self._prefix = self._prefix, b""
            self.receive_some = self._inner.receive_some  # type: ignore[method-assign]
        else:
            data, self._prefix = self._prefix[:max_bytes], self._prefix[max_bytes:]
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)  # replaced per instance in __init__

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()  # replaced in __init__

    async def aclose(self) -> None:
        await self._inner.aclose()

    @property
    def peer(self) -> str:
        """The client's IP address (``"?"`` once the socket is closed)."""
        return peer_address(self._inner)

    def __repr__(self) -> str:
        return f"<websocket stream from {self.peer}>"


class _Closed(Exception):
    """The peer closed the connection before its request head was complete."""


async def read_request_head(
    stream: trio.abc.ReceiveStream,
    conn: h11.Connection,
    received: Callable[[int], None] | None = None,
    first: bytes | None = None,
) -> tuple[h11.Request, bytes]:
    """Read until ``conn`` (an h11 server connection) has a request head.

    ``conn`` must bound its buffer at `MAX_HEAD_BYTES` (``max_incomplete_event_size``).
    ``received(n)`` is told of every read of ``n`` bytes. ``first``: bytes
    already read from ``stream`` (and told to ``received``), the start of the
    head. Returns the request
    and every byte read (the head, and whatever followed it in the same
    reads). Raises `h11.RemoteProtocolError` for a malformed or oversized
    head (its ``error_status_hint`` is the status to answer), ``_Closed``
    when the peer closes first. A cancellation point, and a schedule point
    whenever it waits for bytes.
    """
    data = bytearray()
    if first is not None:
        if not first:
            raise _Closed
        data += first
        conn.receive_data(first)
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            # Never past the bound: h11 checks its buffer only when a head is
            # incomplete, so one large read could otherwise complete a larger head.
            room = max(1, MAX_HEAD_BYTES + 1 - len(data))
            chunk = bytes(await stream.receive_some(min(_RECEIVE_BYTES, room)))
            if not chunk:
                raise _Closed
            data += chunk
            conn.receive_data(chunk)
            if received is not None:
                received(len(chunk))
        elif isinstance(event, h11.Request):
            return event, bytes(data)
        else:  # h11 yields nothing else before a request; a close is NEED_DATA + b""
            raise _Closed


async def _read_at_once(stream: trio.SocketStream) -> bytes | None:
    """What the socket holds already (``b""``: the peer closed), without waiting; None: nothing.

    A cancellation point, not a schedule point: a client sends its request as
    it connects, so its head is usually here when its task first runs, and is
    acted on with no pass of the run loop before it (and an HTTP API call whose
    head came whole is served with no timer and no h11 connection).
    """
    raw = stdlib_socket(stream)
    if raw is None:
        return None
    await trio.lowlevel.checkpoint_if_cancelled()
    try:
        return raw.recv(_RECEIVE_BYTES)
    except BlockingIOError:
        return None
    except OSError:
        return b""


#: Bodies at least this large are sent as they are, not copied behind the head.
_PASS_THROUGH_BYTES: Final = 64 * 1024


def _encode(conn: h11.Connection, answer: Answer, head_only: bool) -> list[bytes]:
    """The bytes of ``answer``, as few pieces as need no copy of a large body.

    A ``/metrics`` answer is a cached 1.6 MB body at the label bound:
    joining it to its head would copy it on the event loop for every scrape.
    """
    headers = [
        *answer.headers,
        (b"Content-Length", str(len(answer.body)).encode()),
        (b"Connection", b"close"),
    ]
    reason = _REASONS.get(answer.status, b"")
    pieces = [conn.send(h11.Response(status_code=answer.status, headers=headers, reason=reason))]
    if not head_only and answer.body:
        pieces.extend(conn.send_with_data_passthrough(h11.Data(data=answer.body)) or ())
    pieces.append(conn.send(h11.EndOfMessage()))
    small = [p for p in pieces if p is not None]
    if len(answer.body) < _PASS_THROUGH_BYTES:
        return [b"".join(small)]
    return small


async def _linger(stream: trio.SocketStream) -> None:
    """Close gracefully after an answer: end our side, then read until the peer closes.

    Closing a socket with unread input resets the connection, which can
    destroy the answer before the peer has read it (a refused oversized head
    leaves input unread). Bounded by `LINGER_SECONDS` and `LINGER_BYTES`.
    """
    await stream.send_eof()
    left = LINGER_BYTES
    with trio.move_on_after(LINGER_SECONDS):
        while left > 0 and (chunk := await stream.receive_some(_RECEIVE_BYTES)):
            left -= len(chunk)


async def serve_stream(
    front: FrontDoor,
    stream: trio.SocketStream,
    upgrade: Callable[[ReplayStream, float], Awaitable[None]],
    head_seconds: float,
    admission: Admission,
    ticket: Ticket,
) -> None:
    """Serve one TCP connection: a plain answer, or hand the websocket to ``upgrade``.

    ``upgrade(stream, deadline)`` gets the replaying stream and the trio time
    by which its handshake must be done; it owns the stream from then on.
    Everything before that (reading the head, a plain answer) is bounded by
    ``head_seconds``. ``ticket`` is the connection's in ``admission``: its head
    is counted there until complete, and when it is shed meanwhile the
    connection gets a 503 and is closed. The caller frees the ticket. Never
    raises but for cancellation.
    """
    deadline = trio.current_time() + head_seconds
    answer: Answer | None = None
    head_only = False
    answered = handed_over = False
    api_request: h11.Request | None = None

    def received(size: int) -> None:
        for victim in admission.received(ticket, size):
            victim.cancel()

    try:
        first = None if ticket.shed is not None else await _read_at_once(stream)
        if first:
            received(len(first))
            if front.api is not None:
                whole = parse_plain_head(first, MAX_HEAD_BYTES)
                if whole is not None and front.api.claims(whole.target):
                    # The whole head in the first read: nothing to bound or shed.
                    admission.headed(ticket)
                    await front.api.serve(stream, None, whole)
                    return
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        with trio.CancelScope(deadline=deadline) as scope:
            ticket.scope = scope
            if ticket.shed is not None:
                scope.cancel()  # shed before this task ran
            try:
                request, data = await read_request_head(stream, conn, received, first)
            except h11.RemoteProtocolError as exc:
                admission.headed(ticket)
                front.counters.refused(RefusalCause.MALFORMED)
                status = exc.error_status_hint if exc.error_status_hint in _REASONS else 400
                answer = _text(status, "malformed request head\n")
            else:
                admission.headed(ticket)
                head_only = request.method == b"HEAD"
                if is_upgrade(request):
                    answer = handshake_problem(request)
                    if answer is None:
                        handed_over = True
                    else:
                        front.counters.refused(RefusalCause.MALFORMED)
                elif front.api is not None and front.api.claims(request.target):
                    api_request = request  # served below, past the head's time bound
                else:
                    answer = await front.answer(request.method, request.target, request.headers)
            if answer is not None:
                for piece in _encode(conn, answer, head_only):
                    await stream.send_all(piece)
                answered = True
                await _linger(stream)
        if api_request is not None and front.api is not None:
            await front.api.serve(stream, conn, api_request)
            return
        if ticket.shed is not None and not answered and not handed_over:
            front.counters.refused(RefusalCause.PRE_HEAD)
            ticket.closed_shed = True
            await send_early_answer(stream, early_answer(503, ticket.shed), linger=False)
            return
        if scope.cancelled_caught and not answered and not handed_over:
            front.counters.refused(RefusalCause.TIMEOUT)
        if handed_over:
            await upgrade(ReplayStream(stream, data), deadline)
    except (_Closed, trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError):
        pass  # the peer left, or sent something h11 will not answer: just close
    except Exception:
        log.exception("serving a gateway connection failed")
    finally:
        if not handed_over:
            with trio.CancelScope(shield=True):
                await stream.aclose()
