"""Scale-out behind a real load balancer: nginx in front of three ``llmrt serve``.

The gateways are separate processes that know nothing of each other; nginx
(the distribution's package, configured as ``docs/deploy.md`` says) spreads
websockets over them. 300 clients stream through it; one gateway is killed
mid-run and exactly its clients lose their calls; once the clients leave, no
connection is left open on either side of nginx. The gateways require a
bearer token, which passes through nginx untouched.
"""

from __future__ import annotations

import os
import signal
from contextlib import AsyncExitStack
from pathlib import Path

import attrs
import trio
from _nginx import active_connections, find_nginx, running_nginx
from _serving import Served, http_get, metric, poll, serving, slow_demo_config, slow_options

from llmrt import ErrorCode, Finish, FinishError, LlmError
from llmrt.actors.gateway.client import open_gateway_client

CLIENTS = 300
TOKEN = "scale-out-test-token"


@attrs.define
class Client:
    chunks: int = 0
    finish: Finish | None = None
    ended: bool = False


async def gateway_connections(port: int) -> float:
    status, body = await http_get(port, "/metrics")
    assert status == 200
    value = metric(body, "llmrt_gateway_connections")
    assert value is not None
    return value


def test_nginx_is_installed() -> None:
    # CI installs it (.ci/run); a missing nginx fails here instead of skipping.
    assert os.access(find_nginx(), os.X_OK)


async def test_nginx_spreads_300_clients_and_a_killed_gateway_loses_only_its_own(
    tmp_path: Path,
) -> None:
    # Two tokens a second: every call is mid-stream for ten seconds and more.
    config = slow_demo_config(tmp_path, tokens_per_second=2)
    env = {"LLMRT_GATEWAY_TOKEN": TOKEN}
    async with AsyncExitStack() as stack:
        gateways: list[Served] = [
            # Behind a proxy every client has the proxy's address: raise the per-peer
            # cap, as docs/deploy.md says.
            await stack.enter_async_context(
                serving("--config", str(config), "--max-connections-per-peer", "1000", env=env)
            )
            for _ in range(3)
        ]
        ports = [await gateway.port() for gateway in gateways]
        nginx = await stack.enter_async_context(running_nginx(ports, tmp_path))

        # Without the token nginx passes the refusal through.
        try:
            async with open_gateway_client(nginx.url):
                raise AssertionError("a client without the token was let in")
        except LlmError as exc:
            assert exc.code == ErrorCode.AUTH

        clients = [Client() for _ in range(CLIENTS)]
        connected = trio.Semaphore(0)
        started = trio.Semaphore(0)
        go, leave = trio.Event(), trio.Event()

        async def run(client: Client) -> None:
            async with open_gateway_client(nginx.url, token=TOKEN, connect_timeout=30) as gw:
                connected.release()
                await go.wait()
                async with gw.stream(slow_options()) as call:
                    async for chunk in call:
                        client.chunks += 1
                        if client.chunks == 1:
                            started.release()
                        if isinstance(chunk, Finish):
                            client.finish = chunk
                            client.ended = True
                            return
                        if leave.is_set():
                            return  # leaving the block aborts the call

        async with trio.open_nursery() as nursery:
            for client in clients:
                nursery.start_soon(run, client)
            with trio.fail_after(60):
                for _ in range(CLIENTS):
                    await connected.acquire()
            # One upstream websocket per client, spread over the three gateways.
            per_gateway = [await gateway_connections(port) for port in ports]
            assert sum(per_gateway) == CLIENTS
            assert all(n > 0 for n in per_gateway)

            go.set()
            with trio.fail_after(60):
                for _ in range(CLIENTS):
                    await started.acquire()
            assert not any(c.ended for c in clients)  # every call is mid-stream
            victim = 1
            os.kill(gateways[victim].proc.pid, signal.SIGKILL)

            async def victims_ended() -> bool:
                return sum(c.ended for c in clients) >= per_gateway[victim]

            await poll(victims_ended, within=30)
            lost = [c for c in clients if c.ended]
            assert len(lost) == per_gateway[victim]
            for client in lost:
                assert client.finish is not None
                reason = client.finish.reason
                assert isinstance(reason, FinishError)
                assert reason.failure.code == ErrorCode.NETWORK

            # Every other client streams on: each receives more chunks.
            before = {id(c): c.chunks for c in clients if not c.ended}

            async def survivors_streamed() -> bool:
                return all(c.chunks > before[id(c)] for c in clients if id(c) in before)

            await poll(survivors_streamed, within=30)
            assert sum(c.ended for c in clients) == per_gateway[victim]
            leave.set()

        # The survivors served exactly their own clients' calls...
        survivors = [port for i, port in enumerate(ports) if i != victim]
        for i, port in enumerate(ports):
            if i != victim:
                _, body = await http_get(port, "/metrics")
                calls = metric(body, "llmrt_calls_started_total", provider="slow")
                assert calls == per_gateway[i]

        # ...and once the clients left, nginx holds no connection on either side.
        async def all_closed() -> bool:
            upstream = [await gateway_connections(port) for port in survivors]
            return upstream == [0, 0] and await active_connections(nginx) == 1

        await poll(all_closed, within=15)


async def test_an_http_api_stream_passes_through_nginx_as_it_comes(tmp_path: Path) -> None:
    # docs/deploy.md's location block (proxy_buffering off) in front of one gateway; the
    # route streams 20 tokens a second (the answer lasts about 2 s), so a buffering proxy
    # would hold every event back.
    config = slow_demo_config(tmp_path, tokens_per_second=20)
    async with AsyncExitStack() as stack:
        gateway = await stack.enter_async_context(serving("--config", str(config)))
        port = await gateway.port()
        nginx = await stack.enter_async_context(running_nginx([port], tmp_path))
        body = (
            b'{"model": "slow/demo-1", "stream": true, '
            b'"messages": [{"role": "user", "content": "hello hello"}]}'
        )
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{nginx.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        with trio.fail_after(60):
            stream = await trio.open_tcp_stream("127.0.0.1", nginx.port)
            async with stream:
                await stream.send_all(head.encode() + body)
                data = b""
                while b"data: {" not in data:
                    chunk = await stream.receive_some(65536)
                    assert chunk, data
                    data += chunk
                # The first event is through while the call still runs upstream.
                _, page = await http_get(port, "/metrics")
                assert metric(page, "llmrt_calls_in_flight", provider="slow") == 1
                assert data.startswith(b"HTTP/1.1 200")
                assert b"text/event-stream" in data
                while chunk := await stream.receive_some(65536):
                    data += chunk
        assert b"data: [DONE]" in data
        _, page = await http_get(port, "/metrics")
        assert metric(page, "llmrt_calls_in_flight", provider="slow") == 0
