"""Issue 21, finding 2: connections before their request head are capped, per peer and in total.

Over real loopback sockets (port 0). Linux routes all of 127.0.0.0/8 to the
loopback interface, so a socket bound to 127.0.0.N before connecting is a
client at another peer address: that is how one test plays an attacker and
a legitimate client at once. Nothing here waits on time: the gateway's
handshake timeout is an hour, so whatever a test sees before its bound is
the cap's doing, never a timeout's.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial

import pytest
import trio
import trio.testing
from _settle import wait_until
from trio_websocket import ConnectionRejected, wrap_client_stream

import llmrt
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway._admission import Admission
from llmrt.actors.gateway._front import MAX_HEAD_BYTES
from llmrt.actors.gateway._listen import ACCEPT_PAUSE_MAX
from llmrt.actors.gateway._server import CAPACITY_LOG_INTERVAL
from llmrt.adapters.scripted import ScriptedAdapter, text_script

#: Long enough that no test here ever meets it: what happens is the caps' doing.
HOUR = 3600.0
#: A bound on each wire exchange, in real seconds (a hang fails, nothing is timed).
BOUND = 10.0


def limits(**overrides: float) -> Limits:
    settings: dict[str, float] = {
        "handshake_timeout": HOUR,
        "shutdown_grace": 0.1,
        "close_timeout": 1.0,
        **overrides,
    }
    return Limits(**settings)  # type: ignore[arg-type]


@asynccontextmanager
async def gateway(gateway_limits: Limits) -> AsyncIterator[GatewayServer]:
    async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
        await rt.register_adapter(["ok"], ScriptedAdapter(text_script(["fine"])))
        server = await nursery.start(partial(serve_gateway, rt, limits=gateway_limits))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def connect_from(source: str, server: GatewayServer) -> trio.SocketStream:
    """A TCP connection to ``server`` from the loopback address ``source``."""
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    try:
        await sock.bind((source, 0))
        await sock.connect(("127.0.0.1", server.port))
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


async def opened(held: AsyncExitStack, source: str, server: GatewayServer) -> trio.SocketStream:
    """`connect_from`, closed when ``held`` closes."""
    stream = await connect_from(source, server)
    held.push_async_callback(stream.aclose)
    return stream


async def read_all(stream: trio.SocketStream) -> bytes:
    """Everything the gateway sends until it closes the connection."""
    data = b""
    with trio.fail_after(BOUND):
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def hello_from(source: str, server: GatewayServer) -> dict[str, object]:
    """A whole websocket handshake from ``source`` and the ``hello`` frame that follows."""
    with trio.fail_after(BOUND):
        stream = await connect_from(source, server)
        async with trio.open_nursery() as nursery:
            ws = await wrap_client_stream(nursery, stream, "127.0.0.1", "/")
            hello: dict[str, object] = json.loads(await ws.get_message())
            await ws.aclose()
    return hello


async def refused_from(source: str, server: GatewayServer) -> int | None:
    """The status a websocket handshake from ``source`` is refused with (None: accepted)."""
    status: int | None = None
    with trio.fail_after(BOUND):
        stream = await connect_from(source, server)
        try:
            async with trio.open_nursery() as nursery:
                ws = await wrap_client_stream(nursery, stream, "127.0.0.1", "/")
                await ws.aclose()
        except* ConnectionRejected as group:
            (rejected,) = group.exceptions
            assert isinstance(rejected, ConnectionRejected)
            status = rejected.status_code
    return status


async def test_silent_sockets_hold_their_address_s_slots_and_no_more() -> None:
    async with gateway(limits(max_connections_per_peer=4)) as server, AsyncExitStack() as held:
        silent = [await opened(held, "127.0.0.1", server) for _ in range(4)]
        await wait_until(lambda: server.pending_heads == 4)
        # The fifth socket of that address is answered before it sends a byte.
        async with await connect_from("127.0.0.1", server) as extra:
            answer = await read_all(extra)
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"maxConnectionsPerPeer" in answer
        # So is a handshake of that address ...
        assert await refused_from("127.0.0.1", server) == 503
        assert server.refusals["per_peer"] == 2
        # ... while another address is served at once, and the silent ones still wait.
        hello = await hello_from("127.0.0.2", server)
        assert hello["type"] == "hello"
        assert server.pending_heads == 4
        for stream in silent:
            await stream.aclose()
        await wait_until(lambda: server.pending_heads == 0)
        assert (await hello_from("127.0.0.1", server))["type"] == "hello"


async def test_unfinished_heads_over_all_peers_are_capped_oldest_first() -> None:
    cap = limits(max_pre_head_connections=6)
    async with gateway(cap) as server, AsyncExitStack() as held:
        first = [await opened(held, "127.0.0.3", server) for _ in range(6)]
        await wait_until(lambda: server.pending_heads == 6)
        later = [await opened(held, "127.0.0.4", server) for _ in range(6)]
        # Each newcomer took the place of the oldest silent socket, which got a 503.
        for stream in first:
            answer = await read_all(stream)
            assert answer.startswith(b"HTTP/1.1 503 ")
            assert b"maxPreHeadConnections" in answer
        await wait_until(lambda: server.refusals.get("pre_head") == 6)
        assert server.pending_heads == 6
        # A client that speaks at once is served although the cap is full of silent sockets.
        assert (await hello_from("127.0.0.5", server))["type"] == "hello"
        assert server.pending_heads <= 6
        # It displaced the oldest of the later ones, not itself.
        answer = await read_all(later[0])
        assert b"maxPreHeadConnections" in answer


async def test_bytes_held_by_unfinished_heads_are_bounded_in_total() -> None:
    budget = 3 * MAX_HEAD_BYTES
    async with gateway(limits(max_pre_head_bytes=budget)) as server, AsyncExitStack() as held:
        # Heads that never end: each one just under the per-head bound.
        partial_head = b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * (MAX_HEAD_BYTES - 64)
        admission = server._state.admission
        streams = []
        for n in range(6):
            stream = await opened(held, f"127.0.1.{n + 1}", server)
            await stream.send_all(partial_head)
            streams.append(stream)
        # All read: three whole heads fit the budget, the three oldest were shed.
        await wait_until(
            lambda: admission.pending == 3 and admission.pending_bytes == 3 * len(partial_head)
        )
        assert server.refusals["pre_head"] == 3
        assert admission.pending_bytes <= budget
        answer = await read_all(streams[0])
        assert answer.startswith(b"HTTP/1.1 503 ") and b"maxPreHeadBytes" in answer
        assert (await hello_from("127.0.1.100", server))["type"] == "hello"


# ---- EMFILE on accept -----------------------------------------------------------------------


class ExhaustedListener(trio.abc.Listener[trio.SocketStream]):
    """A real listener whose ``accept`` fails with EMFILE while ``exhausted`` is set.

    (`trio.SocketListener` cannot be subclassed: this wraps one.)
    """

    def __init__(self, inner: trio.SocketListener) -> None:
        self.inner = inner
        self.socket = inner.socket  # what serve_gateway reads the address from
        self.exhausted = True
        self.attempts = 0

    async def accept(self) -> trio.SocketStream:
        self.attempts += 1
        if self.exhausted:
            await trio.lowlevel.checkpoint()
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return await self.inner.accept()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_emfile_on_accept_is_logged_once_per_interval_and_accepting_goes_on(
    mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    (inner,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    listener = ExhaustedListener(inner)
    async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
        await rt.register_adapter(["ok"], ScriptedAdapter(text_script(["fine"])))
        serve = partial(serve_gateway, rt, listeners=[listener], limits=limits())  # type: ignore[list-item]
        server: GatewayServer = await nursery.start(serve)
        # Three intervals of exhaustion, on the mock clock.
        elapsed = 0.0
        while elapsed < 3 * CAPACITY_LOG_INTERVAL:
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(0.05)
            elapsed += 0.05
        await trio.testing.wait_all_tasks_blocked()
        lines = [r for r in caplog.records if "accept failed" in r.getMessage()]
        assert 3 <= len(lines) <= 4  # one per interval, not one per attempt
        assert all(r.exc_info is None and "EMFILE" in r.getMessage() for r in lines)
        assert not [r for r in caplog.records if r.exc_info is not None]
        # The pauses grew: far fewer attempts than a 100 ms retry (or a spin) would make.
        assert listener.attempts <= elapsed / ACCEPT_PAUSE_MAX + 10
        assert server.accept_errors == listener.attempts
        assert "more since the last line" in lines[-1].getMessage()
        # Descriptors are back: the next accept serves a client.
        listener.exhausted = False
        mock_clock.jump(ACCEPT_PAUSE_MAX)
        got = trio.Event()
        result: dict[str, object] = {}

        async def client() -> None:
            result.update(await hello_from("127.0.0.1", server))
            got.set()

        nursery.start_soon(client)
        await got.wait()
        assert result["type"] == "hello"
        nursery.cancel_scope.cancel()


def test_admission_sheds_oldest_pending_and_frees_slots() -> None:
    admission = Admission(Limits(max_connections_per_peer=2, max_pre_head_connections=2))
    a, shed = admission.admit("a")
    assert a is not None and shed == []
    b, _ = admission.admit("b")
    assert b is not None
    c, shed = admission.admit("c")
    assert c is not None and shed == [a] and a.shed is not None
    assert admission.pending == 2 and admission.per_peer == {"a": 1, "b": 1, "c": 1}
    admission.headed(b)
    assert admission.pending == 1
    a2, shed = admission.admit("a")
    assert a2 is not None and shed == []
    assert admission.admit("a") == (None, [])  # "a" holds two (one shed, still open)
    admission.leave(a)
    admission.leave(a)  # idempotent
    assert admission.per_peer["a"] == 1
    assert admission.oldest(5) == [c, a2] and c.shed is not None and admission.pending == 0
    for ticket in (b, c, a2):
        admission.leave(ticket)
    assert admission.per_peer == {} and admission.pending == 0 and admission.pending_bytes == 0


#: A gateway in a process of its own whose descriptors are few (RLIMIT_NOFILE).
_FEW_FILES_CHILD = """
import functools, logging, resource, sys
import trio, llmrt
from llmrt.actors.gateway import Limits, serve_gateway

hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(message)s")

async def main():
    limits = Limits(handshake_timeout=3600.0, shutdown_grace=0.1, close_timeout=1.0)
    async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
        server = await nursery.start(functools.partial(serve_gateway, rt, limits=limits))
        print(server.port, flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)
        nursery.cancel_scope.cancel()

trio.run(main)
"""


async def test_a_process_out_of_descriptors_keeps_serving_and_logs_no_tracebacks() -> None:
    files = 96
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", _FEW_FILES_CHILD, str(files)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    err = bytearray()
    try:
        assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
        with trio.fail_after(30):
            line = b""
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(64)
                assert chunk, "the gateway process ended before it listened"
                line += chunk
        port = int(line)

        class Server:  # what connect_from and hello_from read
            def __init__(self, port: int) -> None:
                self.port = port

        server = Server(port)
        async with AsyncExitStack() as held:
            # More silent sockets, from more addresses, than the process has descriptors.
            for n in range(3 * files):
                await opened(held, f"127.0.4.{1 + n % 8}", server)  # type: ignore[arg-type]
            # A client that speaks is served while the silent ones stay connected.
            hello = await hello_from("127.0.5.1", server)  # type: ignore[arg-type]
            assert hello["type"] == "hello"
        await proc.stdin.aclose()
        with trio.fail_after(30):
            while chunk := await proc.stderr.receive_some(65536):
                err += chunk
            await proc.wait()
    finally:
        with trio.CancelScope(shield=True):
            proc.kill()
            await proc.wait()
    text = err.decode("utf-8", "replace")
    assert "Traceback" not in text
    lines = [each for each in text.splitlines() if "accept failed: EMFILE" in each]
    assert len(lines) == 1, text[-2000:]
