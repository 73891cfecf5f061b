"""Issue 10, finding 1: browser origins and DNS rebinding at the gateway's handshake.

The pure policy (`_origin`) is checked on its own; the handshake over real
loopback sockets with hand-written requests, so that ``Origin`` and ``Host``
are exactly what a browser (or an attacker's page) would send.
"""

from __future__ import annotations

import io
import logging
import pathlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio

import llmrt
from llmrt.actors.app.cli import main, parse_args
from llmrt.actors.app.cli._serving import gateway_limits
from llmrt.actors.app.config import ConfigError, load_config
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway._origin import (
    LogThrottle,
    OriginPolicy,
    is_loopback_host,
    normalize_origin,
    split_host,
)
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.demo import DemoAdapter

TOKEN = "0rigin-test-token_abc"


# ---- the pure policy -------------------------------------------------------------------------


def test_origins_and_hosts_parse_to_comparable_forms() -> None:
    assert normalize_origin("HTTP://LocalHost:8765") == ("http", "localhost", 8765)
    assert normalize_origin("https://example.com") == ("https", "example.com", 443)
    assert normalize_origin("http://[::1]:80") == ("http", "[::1]", 80)
    assert normalize_origin("chrome-extension://abcdef") is None  # no known default port
    for bad in ("null", "", "example.com", "http://a/b", "http://u@h", "http://h:99999", "http://"):
        assert normalize_origin(bad) is None, bad
    assert split_host("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert split_host("[0:0::1]:1") == ("[::1]", 1)
    assert split_host("Example.COM") == ("example.com", None)
    assert split_host("a b") is None and split_host("[::1") is None and split_host("h:x") is None
    assert is_loopback_host("localhost") and is_loopback_host("127.9.9.9")
    assert is_loopback_host("[::1]")
    assert not is_loopback_host("evil.example") and not is_loopback_host("localhost.evil.example")
    assert not is_loopback_host("0.0.0.0") and not is_loopback_host("192.168.1.1")


def test_policy_serves_programs_its_own_page_and_listed_origins_only() -> None:
    policy = OriginPolicy.build(["http://localhost:3000/"], loopback=True, token=False)
    host = "127.0.0.1:8765"
    assert policy.check(None, host) is None  # a program: no Origin
    assert policy.check("http://127.0.0.1:8765", host) is None  # the gateway's own page
    assert policy.check("http://localhost:3000", host) is None  # listed
    for origin in (
        "https://evil.example",
        "http://127.0.0.1:8766",  # another local server's page
        "http://localhost:8765",  # a different name is a different origin
        "null",
        "http://127.0.0.1",  # port 80, not the gateway's
    ):
        refusal = policy.check(origin, host)
        assert refusal is not None and refusal.cause == "origin", origin
    # A Host without a port means the scheme's default one.
    assert OriginPolicy(loopback=False).check("https://gw.example", "gw.example") is None
    assert OriginPolicy(loopback=False).check("http://gw.example:8080", "gw.example") is not None


def test_policy_refuses_rebound_names_on_loopback_binds_whatever_the_origin() -> None:
    policy = OriginPolicy.build([], loopback=True, token=False)
    for host in ("evil.example:8765", "localhost.evil.example", "0.0.0.0:8765", None, "a b"):
        for origin in (None, "http://evil.example:8765"):
            refusal = policy.check(origin, host)
            assert refusal is not None and refusal.cause == "host", (host, origin)
    assert policy.check(None, "localhost:8765") is None
    assert policy.check(None, "[::1]:8765") is None
    # Beyond loopback the name is the operator's, and the token guards the gateway.
    assert OriginPolicy(loopback=False).check("http://gw.example:8765", "gw.example:8765") is None


def test_policy_configuration_is_checked() -> None:
    with pytest.raises(ValueError, match="only with a token"):
        OriginPolicy.build(["*"], loopback=True, token=False)
    wildcard = OriginPolicy.build(["*"], loopback=True, token=True)
    assert wildcard.check("https://evil.example", "127.0.0.1:1") is None
    assert wildcard.check("https://evil.example", "evil.example:1") is not None  # Host still
    with pytest.raises(ValueError, match="null"):
        OriginPolicy.build(["null"], loopback=True, token=True)
    with pytest.raises(ValueError, match="not an origin"):
        OriginPolicy.build(["localhost:3000"], loopback=True, token=False)


def test_refusal_messages_are_bounded() -> None:
    refusal = OriginPolicy().check("http://" + "a" * 10_000 + ".example", "127.0.0.1:1")
    assert refusal is not None and len(refusal.message) < 300


def test_log_throttle_allows_one_line_per_key_per_interval_and_stays_small() -> None:
    throttle = LogThrottle(60.0, max_keys=3)
    assert throttle.allow("a", 0.0) == (True, 0)
    assert throttle.allow("a", 10.0) == (False, 0)
    assert throttle.allow("a", 20.0) == (False, 0)
    assert throttle.allow("b", 20.0) == (True, 0)
    assert throttle.allow("a", 60.0) == (True, 2)  # and how many were muted
    for n in range(100):
        throttle.allow(f"k{n}", 61.0 + n)
    assert len(throttle._last) <= 3


# ---- the handshake over loopback -------------------------------------------------------------


@asynccontextmanager
async def gateway(**kw: Any) -> AsyncIterator[GatewayServer]:
    async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
        await rt.register_adapter(["demo"], DemoAdapter())
        limits = Limits(shutdown_grace=0.1, close_timeout=1.0)
        server = await nursery.start(partial(serve_gateway, rt, limits=limits, **kw))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def handshake(server: GatewayServer, *headers: str, host: str | None = None) -> str:
    """Send a websocket upgrade by hand; return the response's status line and body start."""
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    async with stream:
        lines = [
            "GET / HTTP/1.1",
            f"Host: {host or f'127.0.0.1:{server.port}'}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version: 13",
            *headers,
        ]
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        with trio.fail_after(5):
            while not _complete(data):
                more = await stream.receive_some(4096)
                if not more:
                    break
                data += more
    return data.decode("latin-1")


def _complete(data: bytes) -> bool:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    if head.startswith(b"HTTP/1.1 101"):
        return True
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


async def fresh_client_is_served(server: GatewayServer) -> None:
    async with open_gateway_client(server.url) as client:
        providers = await client.list_providers()
    assert [p.id for p in providers] == ["demo"]


async def test_a_foreign_page_is_refused_403_before_the_upgrade_and_programs_still_work(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "llmrt.gateway")
    async with gateway() as server:
        answer = await handshake(server, "Origin: https://evil.example")
        assert answer.startswith("HTTP/1.1 403"), answer
        assert "evil.example" in answer and "--allow-origin" in answer
        for _ in range(5):
            assert (await handshake(server, "Origin: https://evil.example")).startswith(
                "HTTP/1.1 403"
            )
        assert server.refusals == {"origin": 6}
        assert server.connection_count == 0
        # Six refusals from one peer within a minute: one log line.
        lines = [r for r in caplog.records if "refused a handshake" in r.getMessage()]
        assert len(lines) == 1 and "127.0.0.1" in lines[0].getMessage()
        # The gateway's own page, a program, and a fresh client are all served.
        own = await handshake(server, f"Origin: http://127.0.0.1:{server.port}")
        assert own.startswith("HTTP/1.1 101"), own
        assert (await handshake(server)).startswith("HTTP/1.1 101")
        await fresh_client_is_served(server)


async def test_dns_rebinding_is_refused_on_a_loopback_bind() -> None:
    async with gateway() as server:
        rebound = f"evil.example:{server.port}"
        answer = await handshake(server, f"Origin: http://{rebound}", host=rebound)
        assert answer.startswith("HTTP/1.1 403") and "Host" in answer, answer
        assert server.refusals == {"host": 1}
        await fresh_client_is_served(server)


async def test_listed_origins_and_the_wildcard_with_a_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with gateway(allow_origin=["http://localhost:3000"]) as server:
        assert (await handshake(server, "Origin: http://localhost:3000")).startswith("HTTP/1.1 101")
        assert (await handshake(server, "Origin: http://localhost:3001")).startswith("HTTP/1.1 403")
    async with gateway(allow_origin=["*"], token=TOKEN) as server:
        anywhere = "Origin: https://anywhere.example"
        assert (await handshake(server, anywhere)).startswith("HTTP/1.1 401")
        bearer = f"Authorization: Bearer {TOKEN}"
        assert (await handshake(server, anywhere, bearer)).startswith("HTTP/1.1 101")
        # A refusal never logs the token, even when the request carried one.
        async with gateway(token=TOKEN) as strict:
            answer = await handshake(strict, "Origin: https://evil.example", bearer)
            assert answer.startswith("HTTP/1.1 403")
            assert TOKEN not in answer
    assert all(TOKEN not in r.getMessage() for r in caplog.records)
    async with llmrt.open_runtime() as rt:
        with pytest.raises(ValueError, match="only with a token"):
            await serve_gateway(rt, allow_origin=["*"])


# ---- configuration and command line -----------------------------------------------------------


def test_allow_origin_in_llmrt_toml_is_checked_with_its_line(tmp_path: pathlib.Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[gateway]\nallow_origin = ["http://localhost:3000", "*"]\n')
    assert load_config(good, environ={}).gateway.allow_origin == ("http://localhost:3000", "*")
    bad = tmp_path / "bad.toml"
    bad.write_text('[gateway]\nallow_origin = [\n  "http://ok.example",\n  "ok.example",\n]\n')
    with pytest.raises(ConfigError, match=r"bad.toml:4: .*not an origin.*allow_origin\[1\]"):
        load_config(bad, environ={})


def test_serve_refuses_a_wildcard_origin_without_a_token(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["serve", "--port", "0", "--allow-origin", "*"], out=io.StringIO(), environ={})
    assert code == 2
    assert "only with a token" in capsys.readouterr().err


def test_gateway_limits_come_from_llmrt_toml_then_flags(tmp_path: pathlib.Path) -> None:
    file = tmp_path / "gw.toml"
    file.write_text(
        "[gateway]\nidle_timeout = 45.5\nmax_connections_per_peer = 3\n"
        "max_pending_bytes = 65536\nmax_frame_bytes = 8192\n"
    )
    config = load_config(file, environ={})
    args = parse_args(["serve", "--max-connections-per-peer", "7"])
    limits = gateway_limits(args, config.gateway)
    assert (limits.idle_timeout, limits.max_connections_per_peer) == (45.5, 7)
    assert (limits.max_pending_bytes, limits.max_frame_bytes) == (65536, 8192)
    assert gateway_limits(parse_args(["serve"]), load_config(None, environ={}).gateway) == Limits()
    bad = tmp_path / "bad.toml"
    bad.write_text("[gateway]\n\nmax_frame_bytes = 100\n")
    with pytest.raises(ConfigError, match=r"bad.toml:3: max_frame_bytes must be at least 4096"):
        load_config(bad, environ={})
    bad.write_text("[gateway]\nidle_timeout = -1\n")
    with pytest.raises(ConfigError, match=r"bad.toml:2: idle_timeout must be a positive"):
        load_config(bad, environ={})


def test_serve_refuses_nonsense_limits(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "--port", "0", "--idle-timeout", "0"], out=io.StringIO(), environ={})
    assert code == 2
    assert "idle_timeout" in capsys.readouterr().err
