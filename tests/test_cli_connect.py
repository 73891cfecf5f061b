"""Connecting ``--via``: bounded whatever the peer does, and refusals that say what happened.

Issue 10, finding 4 (a peer that accepts TCP and never answers the upgrade)
and the connection messages of finding 12 (a refused connect, a missing
token), through the Python client on a mock clock and through the CLI as a
real process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import attrs
import pytest
import trio
import trio.testing
from _cli_process import kill, spawn_cli
from _ports import free_port

import llmrt
from llmrt import ErrorCode, LlmError
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.demo import DemoAdapter

TOKEN = "connect-test-token-0123456789"
#: A real-seconds bound on each process test; a hang before the fix lasted forever.
BOUND = 30


@pytest.fixture
def settling_clock() -> trio.testing.MockClock:
    """A mock clock that jumps only once the loopback I/O in flight has settled.

    ``autojump_clock`` jumps as soon as every task waits, which can be before
    a loopback TCP connect completes; this one waits 50 ms of real time first,
    so the timeout below fires during the upgrade, where the hang was.
    """
    return trio.testing.MockClock(autojump_threshold=0.05)


@attrs.define(eq=False)
class SilentPeer:
    """A TCP listener that accepts connections and never sends a byte."""

    port: int = 0
    accepted: list[trio.SocketStream] = attrs.field(factory=list)
    connected: trio.Event = attrs.field(factory=trio.Event)

    async def hold(self, stream: trio.SocketStream) -> None:
        self.accepted.append(stream)
        self.connected.set()
        await trio.sleep_forever()


@asynccontextmanager
async def silent_peer() -> AsyncIterator[SilentPeer]:
    peer = SilentPeer()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, peer.hold, 0, host="127.0.0.1"))
        peer.port = listeners[0].socket.getsockname()[1]
        try:
            yield peer
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def token_gateway() -> AsyncIterator[GatewayServer]:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        async with trio.open_nursery() as nursery:
            limits = Limits(shutdown_grace=0.1, close_timeout=1.0)
            server = await nursery.start(partial(serve_gateway, rt, limits=limits, token=TOKEN))
            try:
                yield server
            finally:
                nursery.cancel_scope.cancel()


async def test_connecting_to_a_silent_peer_is_bounded_by_the_connect_timeout(
    settling_clock: trio.testing.MockClock,
) -> None:
    async with silent_peer() as peer:
        port = peer.port
        started = trio.current_time()
        with trio.fail_after(60):  # on the mock clock: the hang ran into this
            with pytest.raises(LlmError) as info:
                async with open_gateway_client(f"ws://127.0.0.1:{port}/", connect_timeout=5):
                    pass
        elapsed = trio.current_time() - started
        assert len(peer.accepted) == 1  # the peer did accept: the upgrade is what stalled
    assert info.value.code == ErrorCode.NETWORK
    assert f"127.0.0.1:{port}" in info.value.failure.message
    assert "within 5 s" in info.value.failure.message
    assert 5 <= elapsed < 6


async def test_cli_call_via_a_silent_peer_gives_up_after_its_connect_timeout() -> None:
    async with silent_peer() as peer:
        port = peer.port
        cli = await spawn_cli(
            "call", "x", "--via", f"ws://127.0.0.1:{port}/", "--connect-timeout", "0.5"
        )
        try:
            with trio.fail_after(BOUND):
                code, out, err = await cli.finish()
        finally:
            await kill(cli)
    assert code == 1, (out, err)
    assert "NETWORK" in err and f"127.0.0.1:{port}" in err and "0.5 s" in err
    assert "Traceback" not in err


async def test_cli_ctrl_c_while_connecting_exits_at_once() -> None:
    async with silent_peer() as peer:
        port = peer.port
        cli = await spawn_cli("call", "x", "--via", f"ws://127.0.0.1:{port}/")
        try:
            with trio.fail_after(BOUND):
                await peer.connected.wait()  # the CLI now waits for the upgrade answer
                cli.interrupt()
                code, out, err = await cli.finish()
        finally:
            await kill(cli)
    assert code == 130, (out, err)
    assert f"^C: aborting the call to demo/demo-1 (connecting to ws://127.0.0.1:{port}/)" in err
    assert "stopped before the call was sent" in err


async def test_a_refused_connection_is_network_and_names_the_endpoint() -> None:
    port = free_port()
    with trio.fail_after(BOUND), pytest.raises(LlmError) as info:
        async with open_gateway_client(f"ws://127.0.0.1:{port}/"):
            pass
    message = info.value.failure.message
    assert info.value.code == ErrorCode.NETWORK
    assert f"127.0.0.1:{port}" in message and "refused" in message
    assert "HandshakeError" not in message


async def test_no_token_is_not_called_a_refused_token() -> None:
    async with token_gateway() as server:
        with pytest.raises(LlmError) as info:
            async with open_gateway_client(server.url):
                pass
        assert info.value.code == ErrorCode.AUTH
        assert "none was sent" in info.value.failure.message
        assert "refused the token" not in info.value.failure.message
        with pytest.raises(LlmError) as wrong:
            async with open_gateway_client(server.url, token="not-the-token"):
                pass
        assert "refused the token" in wrong.value.failure.message
        # The CLI names the variable the token comes from.
        cli = await spawn_cli("call", "x", "--via", server.url)
        try:
            with trio.fail_after(BOUND):
                code, out, err = await cli.finish()
        finally:
            await kill(cli)
    assert code == 1, (out, err)
    assert "none was sent" in err and "$LLMRT_GATEWAY_TOKEN" in err and "--token-env" in err
    assert TOKEN not in err
