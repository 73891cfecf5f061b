"""``discover_any_url``: where a client-named URL may go, what it reads back (issue 21, finding 8).

Before, ``baseURL: "http://127.0.0.1:A/secret?x="`` made the gateway ``GET
/secret?x=/models`` on a loopback service, and that server's 500 body came
back to the client in the error text. Now a base URL is a scheme, host, port
and path; its host may not resolve (or connect) to a loopback, private or
link-local address unless the operator sets ``discover_allow_private``; and
an endpoint's error body never reaches the client.
"""

from __future__ import annotations

import socket
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

import llmrt
from llmrt import ErrorCode
from llmrt.actors.app.cli._serving import gateway_limits
from llmrt.actors.app.config import Config, ConfigError, load_config, register_settings
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapter import ModelDiscoveryRequest
from llmrt.testing import ErrorScript, open_upstream

SECRET = "internal-only: db password hunter2, admin panel at /admin"
NS = "openai-compatible"


@asynccontextmanager
async def gateway(config: Config | None = None, **limits: Any) -> AsyncIterator[GatewayServer]:
    """A gateway serving ``config``'s discoveries (default: the built-in namespaces only)."""
    async with llmrt.open_runtime() as rt:
        await register_settings(rt, config or Config(routes=()), environ={})
        async with trio.open_nursery() as nursery:
            settings = Limits(shutdown_grace=0.1, close_timeout=1.0, **limits)
            server = await nursery.start(partial(serve_gateway, rt, limits=settings))
            try:
                yield server
            finally:
                nursery.cancel_scope.cancel()


async def ask(server: GatewayServer, base_url: str) -> llmrt.LlmError:
    async with open_gateway_client(server.url) as client:
        with pytest.raises(llmrt.LlmError) as info:
            await client.discover_models(NS, ModelDiscoveryRequest(base_url=base_url))
    return info.value


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "[::1]", "10.1.2.3", "169.254.169.254", "[::ffff:127.0.0.1]"]
)
async def test_a_client_named_private_address_is_refused_before_connecting(host: str) -> None:
    with trio.fail_after(30):
        async with (
            open_upstream(ErrorScript(500, body=SECRET), script_paths=None) as up,
            gateway(discover_any_url=True) as server,
        ):
            port = up.base_url.rsplit(":", 1)[1]
            error = await ask(server, f"http://{host}:{port}/v1")
    assert error.code == ErrorCode.INVALID_REQUEST
    assert "private" in str(error) and "discover_allow_private" in str(error)
    assert up.connections == [] and up.requests == []


@pytest.mark.parametrize(
    "path",
    ["/secret?x=", "/v1#frag", "/v1?"],
)
async def test_a_base_url_with_a_query_or_fragment_is_refused(path: str) -> None:
    with trio.fail_after(30):
        async with (
            open_upstream(ErrorScript(500, body=SECRET), script_paths=None) as up,
            gateway(discover_any_url=True, discover_allow_private=True) as server,
        ):
            error = await ask(server, up.base_url + path)
            userinfo = await ask(server, up.base_url.replace("//", "//user:pw@"))
    for refused in (error, userinfo):
        assert refused.code == ErrorCode.INVALID_REQUEST
        assert "pw" not in str(refused)
    assert "no query" in str(error) and "user name or password" in str(userinfo)
    assert up.requests == []


async def test_an_endpoints_error_body_never_reaches_the_client() -> None:
    with trio.fail_after(30):
        async with (
            open_upstream(ErrorScript(500, body=SECRET), script_paths=None) as up,
            gateway(discover_any_url=True, discover_allow_private=True) as server,
        ):
            error = await ask(server, up.base_url + "/v1")
    assert len(up.requests) == 1  # allowed: it was asked
    assert error.code == ErrorCode.SERVER_ERROR  # the status is in the text: frames carry none
    assert "HTTP 500" in str(error) and "not relayed" in str(error)
    for word in ("hunter2", "internal-only", "admin"):
        assert word not in str(error)


class Rebinding(trio.abc.HostnameResolver):
    """``rebind.example`` resolves to a public address, then (the second time) to loopback."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.asked = 0

    async def getaddrinfo(self, host: Any, port: Any, family: int = 0, type: int = 0,
                          proto: int = 0, flags: int = 0) -> Any:  # fmt: skip
        await trio.lowlevel.checkpoint()
        if host not in (b"rebind.example", "rebind.example"):
            return socket.getaddrinfo(host, port, family, type, proto, flags)
        self.asked += 1
        address = "93.184.215.14" if self.asked == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, self.port))]

    async def getnameinfo(self, sockaddr: Any, flags: int) -> Any:
        raise NotImplementedError


async def test_a_host_that_rebinds_to_loopback_between_check_and_connect_is_refused() -> None:
    with trio.fail_after(30):
        async with (
            open_upstream(ErrorScript(500, body=SECRET), script_paths=None) as up,
            gateway(discover_any_url=True) as server,
        ):
            port = int(up.base_url.rsplit(":", 1)[1])
            resolver = Rebinding(port)
            previous = trio.socket.set_custom_hostname_resolver(resolver)
            try:
                error = await ask(server, f"http://rebind.example:{port}/v1")
            finally:
                trio.socket.set_custom_hostname_resolver(previous)
    assert resolver.asked == 2  # checked public, then connected to loopback
    assert error.code == ErrorCode.INVALID_REQUEST
    assert "private" in str(error) and "hunter2" not in str(error)
    assert up.requests == []  # connected, refused before a byte of the request


async def test_configured_endpoints_are_not_restricted(tmp_path: Path) -> None:
    # The operator's own endpoints (a route, a namespace's base_url) stay reachable on
    # loopback: only URLs a client names are checked.
    with trio.fail_after(30):
        async with open_upstream(ErrorScript(500, body=SECRET), script_paths=None) as up:
            path = tmp_path / "llmrt.toml"
            path.write_text(f'[settings.home]\nbase_url = "{up.base_url}/v1"\n')
            async with gateway(load_config(path, environ={}), discover_any_url=True) as server:
                async with open_gateway_client(server.url) as client:
                    with pytest.raises(llmrt.LlmError) as info:
                        await client.discover_models("home", ModelDiscoveryRequest())
    assert info.value.code == ErrorCode.SERVER_ERROR and len(up.requests) == 1
    # A configured endpoint's error is classified as before (its text is the operator's).
    assert "hunter2" in str(info.value)


def test_config_base_urls_are_scheme_host_port_and_path(tmp_path: Path) -> None:
    for bad, says in (
        ("http://h:8000/v1?key=abc", "no query"),
        ("http://user:secret@h:8000/v1", "user name or password"),
        ("http://h:8000/v1#x", "no query"),
    ):
        path = tmp_path / "llmrt.toml"
        path.write_text(
            textwrap.dedent(
                f"""\
                [[provider]]
                route = "local"
                adapter = "openai_chat"
                base_url = "{bad}"
                """
            )
        )
        with pytest.raises(ConfigError) as info:
            load_config(path, environ={})
        assert info.value.line == 4 and says in info.value.reason
        assert "secret" not in str(info.value)


def test_discover_allow_private_comes_from_the_gateway_table_and_needs_any_url(
    tmp_path: Path,
) -> None:
    from argparse import Namespace

    path = tmp_path / "llmrt.toml"
    path.write_text("[gateway]\ndiscover_any_url = true\ndiscover_allow_private = true\n")
    flags = Namespace(
        idle_timeout=None, max_connections_per_peer=None, max_pending_bytes=None,
        max_frame_bytes=None,
    )  # fmt: skip
    limits = gateway_limits(flags, load_config(path, environ={}).gateway)
    assert limits.discover_any_url and limits.discover_allow_private
    assert Limits().discover_allow_private is False
    path.write_text("[gateway]\ndiscover_allow_private = true\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert info.value.line == 2 and "needs discover_any_url" in info.value.reason
