"""The gateway's front door: plain HTTP routes beside websocket upgrades on one port.

Routes are requested over real loopback sockets (port 0) and read with h11's
client side, so statuses, headers and bodies are checked as a client sees them.
"""

from __future__ import annotations

import base64
import hashlib
import re
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from importlib import resources
from typing import Any

import h11
import pytest
import trio
from _settle import wait_until
from prometheus_client.parser import text_string_to_metric_families
from trio_websocket import ConnectionRejected, open_websocket_url

import llmrt
from llmrt import LlmError
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway._connection import GatewayState
from llmrt.actors.gateway._counters import GatewayCounters, RefusalCause, payload_bytes
from llmrt.actors.gateway._front import (
    MAX_HEAD_BYTES,
    FrontDoor,
    ReplayStream,
    chosen_gateway,
    content_security_policy,
    handshake_problem,
    is_upgrade,
)
from llmrt.actors.gateway._protocol import JSON, ListProvidersFrame
from llmrt.actors.gateway._server import _websocket
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.demo import DemoAdapter

LIMITS = Limits(shutdown_grace=0.2, close_timeout=2.0)
TOKEN = "front-door-token_123"


@asynccontextmanager
async def gateway(rt: llmrt.LlmRuntime, **kw: Any) -> AsyncIterator[GatewayServer]:
    kw.setdefault("limits", LIMITS)
    async with trio.open_nursery() as nursery:
        server = await nursery.start(partial(serve_gateway, rt, **kw))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


class Reply:
    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status = status
        self.headers = {name.decode().lower(): value.decode() for name, value in headers}
        self.body = body


async def exchange(server: GatewayServer, data: bytes) -> bytes:
    """Send raw bytes, return everything the server sends until it closes."""
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    async with stream:
        await stream.send_all(data)
        out = bytearray()
        while chunk := await stream.receive_some(65536):
            out += chunk
        return bytes(out)


def parse(data: bytes, method: bytes = b"GET") -> Reply:
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method=method, target=b"/", headers=[(b"Host", b"x")]))
    client.send(h11.EndOfMessage())
    client.receive_data(data)
    client.receive_data(b"")
    response = client.next_event()
    assert isinstance(response, h11.Response), response
    body = bytearray()
    while True:
        event = client.next_event()
        if isinstance(event, h11.Data):
            body += event.data
        else:
            assert isinstance(event, h11.EndOfMessage), event
            break
    return Reply(response.status_code, list(response.headers), bytes(body))


async def request(server: GatewayServer, path: str, method: str = "GET", **headers: str) -> Reply:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: 127.0.0.1",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode()
    return parse(await exchange(server, raw), method.encode())


# ---- routes over the wire ----------------------------------------------------------------


async def test_each_route_answers_with_its_status_and_content_type() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        async with gateway(rt) as server:
            page = await request(server, "/")
            assert page.status == 200
            assert page.headers["content-type"] == "text/html; charset=utf-8"
            assert page.headers["x-content-type-options"] == "nosniff"
            assert page.headers["cache-control"] == "no-cache"
            assert page.headers["content-security-policy"].startswith("default-src 'none'")
            shipped = resources.files("llmrt.actors.gateway").joinpath("playground", "index.html")
            assert page.body == shipped.read_bytes()  # the package data file, as installed
            assert page.headers["content-security-policy"] == (
                content_security_policy(page.body).decode()
            )

            health = await request(server, "/healthz")
            assert (health.status, health.body) == (200, b"ok\n")
            assert health.headers["content-type"] == "text/plain; charset=utf-8"

            ready = await request(server, "/readyz")
            assert ready.status == 200
            assert ready.headers["content-type"] == "text/plain; charset=utf-8"

            metrics = await request(server, "/metrics")
            assert metrics.status == 200
            assert metrics.headers["content-type"].startswith("text/plain; version=")
            names = {f.name for f in text_string_to_metric_families(metrics.body.decode())}
            assert "llmrt_calls_started" in names  # a counter's family drops ``_total``

            for path in ("/nope", "/metrics/", "/index.html", "/healthz/x"):
                missing = await request(server, path)
                assert missing.status == 404, path
                assert missing.headers["content-type"] == "text/plain; charset=utf-8"

            post = await request(server, "/metrics", "POST", **{"Content-Length": "0"})
            assert post.status == 405 and post.headers["allow"] == "GET, HEAD"

            head = await request(server, "/healthz", "HEAD")
            assert head.status == 200 and head.body == b""
            assert head.headers["content-length"] == "3"

            query = await request(server, "/readyz?verbose=1")
            assert query.status == 200


async def test_readyz_turns_503_while_draining_and_everything_else_keeps_serving() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        async with gateway(rt) as server:
            assert server.ready
            server.drain()
            server.drain()  # idempotent
            assert not server.ready
            ready = await request(server, "/readyz")
            assert (ready.status, ready.body) == (503, b"draining\n")
            assert (await request(server, "/healthz")).status == 200
            # Draining is a signal to the load balancer, not a refusal.
            async with open_gateway_client(server.url) as client:
                assert (await client.list_providers())[0].id == "demo"


async def test_websocket_upgrades_work_on_any_path_beside_the_routes() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        async with gateway(rt) as server:
            for path in ("/", "/metrics", "/some/where"):
                url = f"ws://127.0.0.1:{server.port}{path}"
                async with open_gateway_client(url) as client:
                    assert [p.id for p in await client.list_providers()] == ["demo"]
            assert (await request(server, "/healthz")).status == 200


async def test_a_malformed_or_oversized_head_is_refused_and_counted() -> None:
    async with llmrt.open_runtime() as rt:
        async with gateway(rt) as server:
            bad = parse(await exchange(server, b"NOT HTTP AT ALL\r\n\r\n"))
            assert bad.status == 400
            huge = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 10)
            assert parse(await exchange(server, huge + b"\r\n\r\n")).status == 431
            # The gateway serves on.
            assert (await request(server, "/healthz")).status == 200
            assert server._state.counters.refusals[RefusalCause.MALFORMED] == 2
            text = server.metrics_text().decode()
            assert 'llmrt_gateway_refused_total{cause="malformed"} 2.0' in text


async def test_a_broken_websocket_handshake_is_refused_at_once_and_counted() -> None:
    async with llmrt.open_runtime() as rt:
        async with gateway(rt) as server:
            head = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            with trio.fail_after(5):  # not the 10 s handshake timeout
                no_key = parse(await exchange(server, head + b"Sec-WebSocket-Version: 13\r\n\r\n"))
                old = parse(await exchange(server, head + b"Sec-WebSocket-Version: 8\r\n\r\n"))
            assert no_key.status == 400 and b"Sec-WebSocket-Key" in no_key.body
            assert old.status == 426 and old.headers["sec-websocket-version"] == "13"
            assert server._state.counters.refusals[RefusalCause.MALFORMED] == 2


async def test_a_websocket_handshake_that_never_completes_times_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with llmrt.open_runtime() as rt:
        state = GatewayState(runtime=rt, limits=Limits(), version="x", token=None)
        ours, theirs = trio.socket.socketpair()
        stream = trio.SocketStream(ours)
        async with trio.SocketStream(theirs) as peer:
            start = trio.current_time()
            # The head so far: wsproto waits for the rest until the deadline.
            await _websocket(state, ReplayStream(stream, b"GET / HTTP/1.1\r\n"), start + 5.0)
            assert trio.current_time() - start == pytest.approx(5.0)
            assert await peer.receive_some() == b""  # closed
        assert state.counters.refusals[RefusalCause.TIMEOUT] == 1


def test_handshake_problems_are_the_ones_wsproto_refuses() -> None:
    good = [
        (b"Host", b"x"),
        (b"Upgrade", b"websocket"),
        (b"Connection", b"keep-alive, Upgrade"),
        (b"Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ=="),
        (b"Sec-WebSocket-Version", b"13"),
    ]

    def problem(method: str = "GET", drop: bytes = b"", **replace: bytes) -> int | None:
        headers = [
            (name, replace.get(name.decode().replace("-", "_").lower(), value))
            for name, value in good
            if name.lower() != drop
        ]
        answer = handshake_problem(h11.Request(method=method, target="/", headers=headers))
        return None if answer is None else answer.status

    assert problem() is None
    assert problem("POST") == 400
    assert problem(drop=b"connection") == 400
    assert problem(drop=b"sec-websocket-key") == 400
    assert problem(drop=b"sec-websocket-version") == 400
    assert problem(sec_websocket_version=b"8") == 426
    assert problem(upgrade=b"h2c, websocket") == 400


async def test_an_incomplete_head_is_closed_at_the_handshake_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with llmrt.open_runtime() as rt:
        async with gateway(rt, limits=Limits(handshake_timeout=3.0)) as server:
            start = trio.current_time()
            assert await exchange(server, b"GET /healthz HTTP/1.1\r\nHost:") == b""
            assert 3.0 <= trio.current_time() - start < 4.0
            assert server._state.counters.refusals[RefusalCause.TIMEOUT] == 1


async def test_refused_handshakes_are_counted_by_cause() -> None:
    async with llmrt.open_runtime() as rt:
        limits = Limits(max_connections=1, shutdown_grace=0.2, close_timeout=2.0)
        async with gateway(rt, token=TOKEN, limits=limits) as server:
            with pytest.raises(ConnectionRejected):
                async with open_websocket_url(server.url):
                    pass
            with pytest.raises(ConnectionRejected):
                async with open_websocket_url(
                    server.url,
                    subprotocols=["nope"],
                    extra_headers=[(b"Authorization", f"Bearer {TOKEN}".encode())],
                ):
                    pass
            await wait_until(lambda: server._state.admitted == 0)  # the refusals are done
            async with open_gateway_client(server.url, token=TOKEN):
                with pytest.raises(LlmError):
                    async with open_gateway_client(server.url, token=TOKEN):
                        pass
            server.refused(RefusalCause.ORIGIN)  # the hook an Origin check reports through
            counters = server._state.counters
            assert dict(counters.refusals) == {
                "auth": 1,
                "subprotocol": 1,
                "limits": 1,
                "origin": 1,
            }
            assert counters.accepted == 1


async def test_frames_and_bytes_of_websockets_are_counted() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        async with gateway(rt) as server:
            async with open_gateway_client(server.url) as client:
                await client.list_providers()
                await client.list_providers()
            counters = server._state.counters
            # hello + two results out; two list-providers in.
            await wait_until(lambda: counters.frames_sent == 3)
            assert counters.frames_received == 2
            # Payload bytes: two list-providers frames of equal size in.
            frame = JSON.encode(ListProvidersFrame(id="r1"))
            assert counters.bytes_received == 2 * len(frame)
            assert counters.bytes_sent > 200  # the hello alone is larger


async def test_serves_already_bound_listeners_and_closes_them_when_it_stops() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        async with gateway(rt, listeners=listeners) as server:
            assert server.port == port and server.host == "127.0.0.1"
            assert (await request(server, "/healthz")).status == 200
            async with open_gateway_client(server.url) as client:
                assert (await client.list_providers())[0].id == "demo"
    assert listeners[0].socket.fileno() == -1


async def test_non_loopback_listeners_need_a_token() -> None:
    listeners = await trio.open_tcp_listeners(0, host="0.0.0.0")
    try:
        async with llmrt.open_runtime() as rt:
            with pytest.raises(ValueError, match="without a token"):
                await serve_gateway(rt, listeners=listeners)
    finally:
        for each in listeners:
            await each.aclose()


# ---- the logic, without sockets ----------------------------------------------------------


def _front(page: bytes | None = b"<html></html>", ready: bool = True) -> FrontDoor:
    async def metrics() -> tuple[bytes, str]:
        return b"# metrics\n", "text/plain; version=0.0.4; charset=utf-8"

    return FrontDoor(ready=lambda: ready, metrics=metrics, page=page, counters=GatewayCounters())


async def test_answers_without_sockets() -> None:
    front = _front()
    assert (await front.answer(b"GET", b"/")).status == 200
    assert (await front.answer(b"GET", b"/readyz")).status == 200
    assert (await _front(ready=False).answer(b"GET", b"/readyz")).status == 503
    assert (await front.answer(b"GET", b"/metrics")).body == b"# metrics\n"
    assert (await front.answer(b"DELETE", b"/healthz")).status == 405
    assert (await front.answer(b"DELETE", b"/elsewhere")).status == 404
    assert (await _front(page=None).answer(b"GET", b"/")).status == 404
    assert dict(front.counters.http_requests) == {
        "/": 1,
        "/readyz": 1,
        "/metrics": 1,
        "/healthz": 1,
        "other": 1,
    }


def test_the_page_policy_allows_exactly_its_own_inline_script_and_style() -> None:
    script = b"console.log('hi</p>')"
    style = b"body { color: red }"
    page = (
        b"<html><head><style media='x'>" + style + b"</style>"
        b"<script type=module>" + script + b"</script >"
        b"<script src='/app.js'></script></head></html>"
    )
    csp = content_security_policy(page).decode()

    def digest(body: bytes) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(body).digest()).decode() + "'"

    directives = dict(part.strip().split(" ", 1) for part in csp.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self' " + digest(script)
    assert directives["style-src"] == "'self' " + digest(style)
    # Its own origin only ('self' covers ws:/wss: of the same host and port).
    assert directives["connect-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in csp
    assert re.fullmatch(r"[ -~]+", csp)  # a header value: printable ASCII only


SAME_ORIGIN = ((b"sec-fetch-site", b"same-origin"),)


def _query(url: str) -> bytes:
    return b"/?gateway=" + urllib.parse.quote(url, safe="").encode()


def test_a_chosen_gateway_is_allowed_only_when_the_page_itself_asked() -> None:
    url = "ws://127.0.0.1:9000/"
    assert chosen_gateway(_query(url), SAME_ORIGIN) == "ws://127.0.0.1:9000"
    assert chosen_gateway(_query("wss://Gw.Example.com/x?y=1"), SAME_ORIGIN) == (
        "wss://gw.example.com"
    )
    assert chosen_gateway(b"/?a=1&gateway=ws%3A%2F%2Flocalhost%3A80%2F", SAME_ORIGIN) == (
        "ws://localhost:80"
    )
    # Any other page can send a tab to this URL: only the browser's word that
    # the navigation came from the gateway's own origin counts.
    for site in (b"same-site", b"cross-site", b"none", b""):
        assert chosen_gateway(_query(url), ((b"sec-fetch-site", site),)) is None, site
    assert chosen_gateway(_query(url), ()) is None
    assert chosen_gateway(b"/", SAME_ORIGIN) is None


def test_a_chosen_gateway_must_be_a_plain_websocket_origin() -> None:
    for url in (
        "http://127.0.0.1:9000/",  # not a websocket URL
        "ws://user:pw@127.0.0.1:9000/",  # user info
        "ws://*.example.com/",  # a wildcard
        "ws://[::1]:9000/",  # CSP cannot name an IPv6 literal
        "ws://127.0.0.1:99999/",  # no such port
        "ws://a;script-src *; x/",  # an attempt to write into the policy
        "ws://a b/",
        "ws://example.com/#frag",
        "ws:///nohost",
        "not a url",
    ):
        assert chosen_gateway(_query(url), SAME_ORIGIN) is None, url


async def test_the_page_policy_names_the_chosen_gateway() -> None:
    front = _front(page=b"<script>x</script>")
    query = _query("ws://127.0.0.1:9000/")

    def connect_src(answer_headers: tuple[tuple[bytes, bytes], ...]) -> str:
        policy = dict(answer_headers)[b"Content-Security-Policy"].decode()
        return dict(p.strip().split(" ", 1) for p in policy.split(";"))["connect-src"]

    plain = await front.answer(b"GET", query)
    assert connect_src(plain.headers) == "'self'"
    chosen = await front.answer(b"GET", query, SAME_ORIGIN)
    assert connect_src(chosen.headers) == "'self' ws://127.0.0.1:9000"
    assert chosen.body == plain.body
    assert dict(chosen.headers)[b"Content-Security-Policy"] == content_security_policy(
        b"<script>x</script>", "ws://127.0.0.1:9000"
    )
    assert front.counters.http_requests["/"] == 2


def test_payload_bytes_are_utf8_lengths() -> None:
    assert payload_bytes("abc") == 3
    assert payload_bytes("héllo ✓") == len("héllo ✓".encode())
    assert payload_bytes(b"\x00\xff") == 2


def test_is_upgrade_reads_the_upgrade_header_token() -> None:
    def req(*headers: tuple[bytes, bytes]) -> h11.Request:
        return h11.Request(method="GET", target="/", headers=[(b"Host", b"x"), *headers])

    assert is_upgrade(req((b"Upgrade", b"websocket"), (b"Connection", b"Upgrade")))
    assert is_upgrade(req((b"Upgrade", b"h2c, WebSocket")))
    assert not is_upgrade(req((b"Upgrade", b"h2c")))
    assert not is_upgrade(req())
