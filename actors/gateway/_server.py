"""`serve_gateway`: the gateway's listener, handshake checks, readiness and shutdown.

Task tree::

    serve_gateway ─ nursery ─┬─ listener: `serve_accepting` on the TCP listeners, stopped first
                             └─ connections: a shielded nursery that outlives the listener,
                                │            so that shutdown can give calls a grace period
                                └─ one task per TCP connection: the front door (`_front`)
                                   answers plain HTTP requests (``/healthz``, ``/readyz``,
                                   ``/metrics``, ``/``) or hands a websocket upgrade to
                                   trio-websocket; then handshake checks and a `Connection`

Admission happens at accept (`_admission`): an address that holds
``max_connections_per_peer`` connections (of any phase) gets a 503 before
its head is read; connections still before their head are bounded over all
peers, the oldest shed first; an accept that fails for want of descriptors
is logged once per `CAPACITY_LOG_INTERVAL`, without a traceback, sheds the
oldest unfinished head and pauses accepting briefly (`_listen`).

Readiness: `GatewayServer.drain` turns ``/readyz`` to 503 while everything
else keeps serving, so a load balancer stops sending new clients before the
process stops; `GatewayState.ready` is the one place that decides it.

Shutdown (cancelling `serve_gateway`, or `GatewayServer.aclose`) stops the
listener, lets in-flight calls run for the grace period, aborts the rest
(each client receives an ``aborted`` finish), closes every websocket with
code 1001, and is bounded: whatever is still open after the grace period plus
``close_timeout`` (plus a little) is cancelled.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import re
from collections.abc import Mapping, Sequence
from functools import partial
from importlib import resources

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    WebSocketRequest,
    wrap_server_stream,
)

import llmrt
from llmrt._helpers import raise_sole

from .._runtime import LlmRuntime
from ._admission import Ticket
from ._connection import HEARTBEAT_CLOSE, Connection, GatewayState, Reload
from ._counters import RefusalCause
from ._front import (
    FrontDoor,
    ReplayStream,
    check_metrics_auth,
    early_answer,
    peer_address,
    send_early_answer,
    serve_stream,
)
from ._http_handler import HttpApi
from ._listen import open_reuseport_listeners, serve_accepting
from ._metrics import Figures, GatewayMetrics, Render
from ._origin import LogThrottle, OriginPolicy, Refusal
from ._protocol import (
    FRAME_BYTES_HEADER,
    MIN_FRAME_BYTES,
    Limits,
    bearer_from_headers,
    codec_for,
    split_subprotocols,
    token_matches,
)

__all__ = ["serve_gateway", "GatewayServer", "PLAYGROUND"]

log = logging.getLogger("llmrt.gateway")

_DIGITS = re.compile(r"[0-9]{1,15}")
#: Slack on top of grace + close_timeout before the shutdown cancels what is left.
_SHUTDOWN_SLACK = 1.0
#: The playground page served at ``GET /``: package data of `llmrt.actors.gateway`.
PLAYGROUND = ("playground", "index.html")
#: Seconds between two log lines about accept failing for want of descriptors,
#: and about connections refused or shed at accept (one line per cause).
CAPACITY_LOG_INTERVAL = 10.0
#: Refused connections that may linger at once to deliver their 503 unharmed;
#: past it a refused connection is closed at once (its descriptor matters more).
_LINGERING_REFUSALS = 32
#: Connections waiting for their head that an accept out of descriptors sheds.
_SHED_ON_CAPACITY = 16


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _load_playground() -> bytes | None:
    """The playground page, or None when the package ships none (``GET /`` is then 404)."""
    try:
        return resources.files(__package__).joinpath(*PLAYGROUND).read_bytes()
    except OSError:
        return None


@attrs.define(eq=False)
class GatewayServer:
    """A running gateway, as handed to ``task_status.started`` by `serve_gateway`."""

    host: str
    port: int
    _state: GatewayState
    _metrics: GatewayMetrics
    _stopped: trio.Event = attrs.field(factory=trio.Event, init=False)

    @property
    def url(self) -> str:
        """``ws://host:port/``: where clients connect."""
        return f"ws://{_url_host(self.host)}:{self.port}/"

    @property
    def http_url(self) -> str:
        """``http://host:port``: the base of the plain routes (``/healthz``, ``/metrics``, ...)."""
        return f"http://{_url_host(self.host)}:{self.port}"

    @property
    def limits(self) -> Limits:
        return self._state.limits

    @property
    def connection_count(self) -> int:
        """Open websockets."""
        return len(self._state.connections)

    @property
    def refusals(self) -> dict[str, int]:
        """Connections and handshakes refused, by cause (`RefusalCause`: ``per_peer``, ...)."""
        return dict(self._state.counters.refusals)

    @property
    def pending_heads(self) -> int:
        """TCP connections whose request head is not complete yet."""
        return self._state.admission.pending

    @property
    def accept_errors(self) -> int:
        """Accepts that failed for want of descriptors or kernel memory (EMFILE and co)."""
        return self._state.counters.accept_errors

    @property
    def live_requests(self) -> int:
        """Live calls and metadata requests over all connections."""
        return self._state.live

    @property
    def ready(self) -> bool:
        """What ``GET /readyz`` says: accepting calls (not draining, not shutting down)."""
        return self._state.ready

    def drain(self) -> None:
        """Report not-ready (``GET /readyz`` answers 503) while serving on as before.

        For a rolling restart: drain, wait until the load balancer has noticed
        (a few probe periods), then `aclose`. Idempotent; not a checkpoint.
        """
        self._state.draining = True

    def refused(self, cause: RefusalCause) -> None:
        """Count a request refused by a check outside this module (e.g. ``origin``)."""
        self._state.refused(cause)

    def figures(self) -> Figures:
        """This gateway's figures now: the runtime's statistics and the gateway's counters."""
        return Figures.read(self._state)

    def metrics_text(self) -> bytes:
        """What ``GET /metrics`` would answer now (Prometheus text format)."""
        return self._metrics.render_now()

    async def aclose(self, *, grace: float | None = None) -> None:
        """Shut the gateway down and return once `serve_gateway` has returned.

        Stops accepting; in-flight calls get ``grace`` seconds (default
        ``limits.shutdown_grace``) to end, then are aborted; every websocket is
        closed with code 1001. Idempotent. A checkpoint.
        """
        state = self._state
        if grace is not None and not state.stopping.is_set():
            if not 0 <= grace < float("inf"):
                raise ValueError(f"grace must be >= 0 and finite, got {grace!r}")
            state.grace = grace
        state.stopping.set()
        await self._stopped.wait()


async def _reject(request: WebSocketRequest, status: int, body: str) -> None:
    headers = [(b"WWW-Authenticate", b"Bearer")] if status == 401 else []
    await request.reject(status, extra_headers=headers, body=body.encode())


def _handshake_host(request: WebSocketRequest) -> str | None:
    # wsproto keeps ``Host`` out of the request's headers (it is a field of
    # the handshake event), and trio-websocket exposes no accessor for it.
    host = getattr(getattr(request, "_event", None), "host", None)
    return host if isinstance(host, str) else None


def _header(request: WebSocketRequest, name: bytes) -> str | None:
    for key, value in request.headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _refuse(
    state: GatewayState, request: WebSocketRequest, peer: str, refusal: Refusal
) -> None:
    """Refuse a handshake with 403 (503 for per-peer), count it, log it at a bounded rate."""
    state.refused(refusal.cause)
    log_it, muted = state.refusal_log.allow(peer, trio.current_time())
    if log_it:
        # Only the cause and the refused value: never headers (a token may be among them).
        more = f" ({muted} more refused since the last line)" if muted else ""
        log.warning("refused a handshake from %s: %s%s", peer, refusal.message, more)
    await _reject(request, 503 if refusal.cause == "per_peer" else 403, refusal.message)


async def _handle(
    state: GatewayState, request: WebSocketRequest, ticket: Ticket
) -> WebSocketConnection | None:
    """One websocket (its admission ``ticket``). Its failures end it alone, never the gateway.

    Returns the websocket when it was accepted (for the caller to close).
    """
    accepted: list[WebSocketConnection] = []
    try:
        await _serve_one(state, request, ticket, accepted)
    except ConnectionClosed:
        pass  # the client left during the handshake
    except Exception as exc:
        # A failure that clients can trigger at will must not flood the log:
        # one traceback per kind of failure per minute.
        log_it, muted = state.failure_log.allow(type(exc).__name__, trio.current_time())
        if log_it:
            more = f" ({muted} more since the last one)" if muted else ""
            log.exception("a gateway connection failed (peer %s)%s", ticket.peer, more)
    return accepted[0] if accepted else None


async def _serve_one(
    state: GatewayState,
    request: WebSocketRequest,
    ticket: Ticket,
    accepted: list[WebSocketConnection],
) -> None:
    """Admission, auth and subprotocol checks, then the websocket's `Connection`."""
    limits = state.limits
    counters = state.counters
    peer = ticket.peer
    if state.stopping.is_set():
        state.refused(RefusalCause.SHUTDOWN)
        await _reject(request, 503, "the gateway is shutting down")
        return
    refusal = state.policy.check(_header(request, b"origin"), _handshake_host(request))
    if refusal is not None:
        await _refuse(state, request, peer, refusal)
        return
    # (``max_connections_per_peer`` was checked at accept: this connection holds a slot.)
    if state.admitted >= limits.max_connections:
        state.refused(RefusalCause.LIMITS)
        await _reject(request, 503, f"the gateway serves {limits.max_connections} connections")
        return
    state.admitted += 1
    try:
        offered_token, offered = split_subprotocols(request.proposed_subprotocols)
        if state.token is not None:
            presented = bearer_from_headers(request.headers) or offered_token
            if not token_matches(state.token, presented):
                # Neither the token nor how it failed is logged.
                state.refused(RefusalCause.AUTH)
                await _reject(request, 401, "a valid bearer token is required")
                return
        codec = codec_for(offered)
        if codec is None:
            state.refused(RefusalCause.SUBPROTOCOL)
            await _reject(request, 400, "supported subprotocols: llmrt.v1, llmrt.v1.msgpack")
            return
        frame_limit = limits.max_frame_bytes
        announced = _header(request, FRAME_BYTES_HEADER.encode())
        if announced is not None:
            digits = announced.strip()
            # ASCII digits only, and few of them: int() refuses long or exotic ones.
            asked = int(digits) if _DIGITS.fullmatch(digits) else 0
            if asked < MIN_FRAME_BYTES:
                await _reject(
                    request, 400, f"{FRAME_BYTES_HEADER} must be an integer >= {MIN_FRAME_BYTES}"
                )
                return
            frame_limit = min(frame_limit, asked)
        # The bearer subprotocol is never echoed: the answer names the encoding.
        ws = await request.accept(subprotocol=codec.subprotocol if offered else None)
        accepted.append(ws)
        counters.accepted += 1
        conn = Connection(state, ws, codec, frame_limit=frame_limit, peer=peer)
        await conn.run()
        if conn.close_code == HEARTBEAT_CLOSE:
            with trio.move_on_after(limits.close_timeout):
                await ws.aclose(HEARTBEAT_CLOSE, "heartbeat timeout")
    finally:
        state.admitted -= 1
        # The slot is free once the websocket is done, as its close handshake
        # tells the client (closing the socket follows, bounded).
        state.admission.leave(ticket)


async def _websocket(
    state: GatewayState, stream: ReplayStream, deadline: float, ticket: Ticket | None = None
) -> None:
    """Run trio-websocket over ``stream`` (an upgrade request the front door read).

    What trio-websocket's own server does per connection: the handshake by
    ``deadline``, the handler, then a close bounded by ``close_timeout``.
    ``ticket``: the connection's admission (None: one that holds no slot).
    """
    limits = state.limits
    if ticket is None:
        ticket = Ticket(stream.peer, pending=False, held=False)
    try:
        async with trio.open_nursery() as nursery:
            with trio.CancelScope(deadline=deadline) as handshake:
                request = await wrap_server_stream(
                    nursery, stream, max_message_size=limits.hard_frame_bytes
                )
            if handshake.cancelled_caught:
                state.refused(RefusalCause.TIMEOUT)
            else:
                ws = await _handle(state, request, ticket)
                if ws is not None:
                    with trio.move_on_after(limits.close_timeout):
                        await ws.aclose()
            nursery.cancel_scope.cancel()  # trio-websocket's reader task
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


@attrs.define(eq=False)
class _Doorman:
    """Admits each accepted connection (`_admission`) and starts its task; logs capacity trouble."""

    state: GatewayState
    front: FrontDoor
    conns: trio.Nursery
    #: One line per cause per `CAPACITY_LOG_INTERVAL` (causes, not addresses:
    #: a flood from many addresses costs a line, not one per address).
    _log: LogThrottle = attrs.field(factory=lambda: LogThrottle(CAPACITY_LOG_INTERVAL), init=False)
    _lingering: int = attrs.field(default=0, init=False)

    def _note(self, cause: str, message: str, *args: object) -> None:
        log_it, muted = self._log.allow(cause, trio.current_time())
        if log_it:
            more = f" ({muted} more since the last line)" if muted else ""
            log.warning(message + "%s", *args, more)

    def on_stream(self, stream: trio.SocketStream) -> None:
        state = self.state
        # "?" when it left already: it then fails its first read, or its answer.
        peer = peer_address(stream)
        ticket, shed = state.admission.admit(peer)
        for victim in shed:
            victim.cancel()  # each logs itself as it closes (see _serve)
        if ticket is None:
            state.refused(RefusalCause.PER_PEER)
            limit = state.limits.max_connections_per_peer
            message = f"this address has {limit} connections open (maxConnectionsPerPeer)"
            self._note("per_peer", "refused a connection from %s: %s", peer, message)
            linger = self._lingering < _LINGERING_REFUSALS
            self.conns.start_soon(self._refuse, stream, early_answer(503, message), linger)
            return
        self.conns.start_soon(self._serve, stream, ticket)

    def on_capacity(self, error: OSError, pause: float) -> None:
        self.state.counters.accept_errors += 1
        shed = self.state.admission.oldest(_SHED_ON_CAPACITY)
        for victim in shed:
            victim.cancel()
        name = errno.errorcode.get(error.errno or 0, str(error.errno))
        self._note(
            "capacity",
            "accept failed: %s (%s); pausing accepts for %g s, closing the %d oldest "
            "connection(s) waiting for their request head",
            name,
            os.strerror(error.errno or 0),
            pause,
            len(shed),
        )

    async def _refuse(self, stream: trio.SocketStream, answer: bytes, linger: bool) -> None:
        self._lingering += linger
        try:
            await send_early_answer(stream, answer, linger=linger)
        finally:
            self._lingering -= linger

    async def _serve(self, stream: trio.SocketStream, ticket: Ticket) -> None:
        state = self.state
        try:
            await serve_stream(
                self.front,
                stream,
                upgrade=partial(_websocket, state, ticket=ticket),
                head_seconds=state.limits.handshake_timeout,
                admission=state.admission,
                ticket=ticket,
            )
        finally:
            state.admission.leave(ticket)
            # What the stream's aclose does, without its schedule point (and so with
            # no shielded cancel scope around it, paid per connection).
            stream.socket.close()
        if ticket.closed_shed:
            self._note(
                "pre_head",
                "closed a connection from %s before its request head was complete: %s",
                ticket.peer,
                ticket.shed,
            )


async def _abort_http_after_grace(state: GatewayState) -> None:
    """HTTP API calls still running after the grace period end ``aborted`` (the
    websocket connections do the same for theirs, `Connection._watch_shutdown`)."""
    await trio.sleep(state.grace)
    for controller in list(state.http_calls):
        controller.abort("the gateway is shutting down")


def _bound_address(listener: trio.SocketListener) -> tuple[str, int]:
    host, port, *_ = listener.socket.getsockname()
    return str(host), int(port)


async def serve_gateway(
    runtime: LlmRuntime,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    token: str | None = None,
    limits: Limits | None = None,
    listeners: Sequence[trio.SocketListener] | None = None,
    allow_origin: Sequence[str] = (),
    reuse_port: bool = False,
    metrics_render: Render | None = None,
    metrics_auth: str = "open",
    reload: Reload | None = None,
    aliases: Mapping[str, str] | None = None,
    task_status: trio.TaskStatus[GatewayServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``runtime``'s calls over websockets (protocol ``llmrt.v1``, ``docs/protocol.md``).

    The same port answers plain HTTP: ``GET /healthz``, ``/readyz``,
    ``/metrics`` (Prometheus) and ``/`` (the playground); see
    ``docs/operations.md``.

    Calls ``task_status.started(server)`` once bound (``port=0`` picks a free
    port; see `GatewayServer.port` / `GatewayServer.url`). Runs until
    cancelled or until `GatewayServer.aclose`; either way it shuts down as
    the module docstring says before it returns.

    ``listeners``: already-bound, listening sockets to serve instead of
    binding ``host``/``port`` (e.g. one ``SO_REUSEPORT`` socket per worker
    process); the gateway takes them over and closes them when it stops.
    ``host`` and ``port`` are then read from the first listener.

    ``reuse_port``: bind with ``SO_REUSEPORT``, so that other processes may
    serve the same port (``llmrt serve --workers``; see ``_listen``).

    ``metrics_render``: what writes ``/metrics`` instead of this gateway's
    own figures (the workers' sum; see `Render`).
    ``metrics_auth``: ``"open"`` (``/metrics`` answers anyone who reaches the
    port) or ``"token"`` (it asks for the gateway token as an
    ``Authorization: Bearer`` header, 401 otherwise; needs ``token``).

    ``reload``: what a ``reload`` frame runs (``llmrt serve`` reads its
    configuration file again; docs/configuration.md); without it, or without
    a ``token``, the frame is refused.
    ``aliases``: bare model names the HTTP APIs resolve (``[aliases]`` of
    llmrt.toml: ``{"gpt-5": "openai/gpt-5"}``); see ``docs/http-api.md``.

    ``token``: when set, every client must present it (``Authorization:
    Bearer`` header or the ``llmrt.bearer.<token>`` subprotocol).
    ``allow_origin``: browser origins (``scheme://host[:port]``, or ``*``
    with a token) allowed besides the gateway's own; see ``_origin``.

    Raises `ValueError` before binding when the address is not a loopback
    address and no token is given, when ``token`` is empty or holds
    whitespace, when an ``allow_origin`` entry is not an origin (or is
    ``*`` without a token), or when ``metrics_auth`` is not ``"open"`` or
    ``"token"`` (or is ``"token"`` without a token); `OSError` when binding fails.
    """
    limits = limits if limits is not None else Limits()
    aliases = aliases if aliases is not None else {}
    check_metrics_auth(metrics_auth, token=token is not None)
    if token is not None and (not token or any(c.isspace() for c in token)):
        raise ValueError("the gateway token must be non-empty and hold no whitespace")
    if listeners is not None:
        if not listeners:
            raise ValueError("listeners must hold at least one listening socket")
        hosts = [_bound_address(each)[0] for each in listeners]
        host, port = _bound_address(listeners[0])
    else:
        hosts = [host]
    if token is None and not all(_is_loopback(each) for each in hosts):
        raise ValueError(
            f"refusing to serve on the non-loopback host {host!r} without a token: "
            "pass token=... (clients then authenticate with a bearer token)"
        )
    loopback = all(_is_loopback(each) for each in hosts)
    policy = OriginPolicy.build(allow_origin, loopback=loopback, token=token is not None)
    state = GatewayState(
        runtime=runtime,
        limits=limits,
        version=llmrt.__version__,
        token=token.encode() if token is not None else None,
        policy=policy,
        reload=reload,
    )
    metrics = GatewayMetrics(state, write=metrics_render)
    front = FrontDoor(
        ready=lambda: state.ready,
        metrics=metrics.render,
        page=_load_playground(),
        counters=state.counters,
        metrics_token=state.token if metrics_auth == "token" else None,
        api=HttpApi(state, aliases=dict(aliases)),
    )
    conns_done = trio.Event()
    listener = trio.CancelScope()

    async def run_connections(*, task_status: trio.TaskStatus[trio.Nursery]) -> None:
        # Shielded: cancelling serve_gateway must not cancel the connections
        # before the shutdown below has given their calls the grace period.
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as conns:
                task_status.started(conns)
                await conns_done.wait()
                conns.cancel_scope.cancel()

    async def listen(
        conns: trio.Nursery, *, task_status: trio.TaskStatus[list[trio.SocketListener]]
    ) -> None:
        with listener:
            if listeners is not None:
                bound = list(listeners)
            elif reuse_port:
                bound = await open_reuseport_listeners(host, port)
            else:
                bound = await trio.open_tcp_listeners(port, host=host)
            if front.api is not None:
                front.api.attach(conns)  # each HTTP API call's client watcher runs there
            doorman = _Doorman(state, front, conns)
            await serve_accepting(
                bound, doorman.on_stream, doorman.on_capacity, task_status=task_status
            )

    server: GatewayServer | None = None
    # While it serves, the runtime removes the token from every call failure
    # (the one redaction point): frames need no redaction of their own.
    with runtime.redacting((token,)):
        try:
            async with trio.open_nursery() as nursery:
                try:
                    conns = await nursery.start(run_connections)
                    bound = await nursery.start(listen, conns)
                    # ``localhost`` may bind IPv4 and IPv6 (on different ports when
                    # ``port`` is 0): the first listener is the one advertised.
                    bound_port = _bound_address(bound[0])[1]
                    server = GatewayServer(host=host, port=bound_port, state=state, metrics=metrics)
                    log.info("llmrt gateway listening on %s", server.url)
                    task_status.started(server)
                    await state.stopping.wait()
                finally:
                    with trio.CancelScope(shield=True):
                        listener.cancel()
                        state.stopping.set()
                        if state.connections or state.http_calls:
                            bound_time = state.grace + limits.close_timeout + _SHUTDOWN_SLACK
                            with trio.move_on_after(bound_time):
                                async with trio.open_nursery() as stopping:
                                    stopping.start_soon(_abort_http_after_grace, state)
                                    await state.all_gone.wait()
                                    stopping.cancel_scope.cancel()
                        conns_done.set()
        except BaseExceptionGroup as group:
            # Only the body raises (binding fails; the listener and connection
            # tasks contain their failures): give the caller that exception.
            raise_sole(group)
        finally:
            if server is not None:
                server._stopped.set()
