"""`TrioTransport` (httpx over trio sockets) and its sans-I/O codec, over real loopback sockets."""

from __future__ import annotations

import functools
import json
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
import trio.testing

import llmrt
from llmrt import (
    ErrorCode,
    Finish,
    FinishAborted,
    FinishError,
    FinishStop,
    GenerateOptions,
    TextDelta,
)
from llmrt.adapter import RuntimeServices
from llmrt.adapters._h11lite import ChunkedDecoder, parse_response_head, request_head
from llmrt.adapters._transport import TrioTransport
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import ErrorScript, SSEScript, Upstream, open_upstream, openai_events

WIRE = pathlib.Path(__file__).parent / "wire"
CHAT = "/chat/completions"
#: A body larger than one network read, so it is never complete with the response head.
BIG = SSEScript(events=[b"data: " + b"x" * 100_000 + b"\n\n"] * 3)


@asynccontextmanager
async def client_for(upstream: Upstream, **kw: object) -> AsyncIterator[httpx.AsyncClient]:
    transport = TrioTransport(**kw)  # type: ignore[arg-type]
    async with httpx.AsyncClient(base_url=upstream.base_url, transport=transport) as client:
        yield client


# ---- the codec, without sockets ---------------------------------------------------------------


def test_chunked_decoder_gives_the_same_payload_whatever_the_read_boundaries() -> None:
    body = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\n"
    whole = ChunkedDecoder()
    assert whole.feed(body) == b"Wikipedia in\r\n\r\nchunks."
    assert whole.done and whole.surplus == 0
    bytewise = ChunkedDecoder()
    pieces = [bytewise.feed(body[i : i + 1]) for i in range(len(body))]
    assert b"".join(pieces) == b"Wikipedia in\r\n\r\nchunks." and bytewise.done


@pytest.mark.parametrize(
    "body", [b"zz\r\nhello\r\n", b"5\r\nhelloXX", b"0x5\r\nhello\r\n", b"-5\r\nhello\r\n"]
)
def test_chunked_decoder_rejects_malformed_framing(body: bytes) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        ChunkedDecoder().feed(body)


def test_response_head_parsing_bounds_and_rejections() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-A:  b \r\n\r\nbody"
    parsed = parse_response_head(head, 1024)
    assert parsed is not None
    assert parsed[0].status == 200 and parsed[0].headers[1] == (b"X-A", b"b")
    assert head[parsed[1] :] == b"body"
    assert parse_response_head(b"HTTP/1.1 200 OK\r\n", 1024) is None
    with pytest.raises(httpx.RemoteProtocolError):
        parse_response_head(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 100, 64)
    with pytest.raises(httpx.RemoteProtocolError):
        parse_response_head(b"HTTP/1.1 200 OK\r\nX: y\r\n folded\r\n\r\n", 1024)
    with pytest.raises(httpx.RemoteProtocolError):
        parse_response_head(b"SPDY/3 200 OK\r\n\r\n", 1024)


def test_request_head_refuses_header_injection() -> None:
    assert request_head(b"GET", b"/", [(b"Host", b"a")]) == b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
    with pytest.raises(httpx.LocalProtocolError):
        request_head(b"GET", b"/", [(b"X", b"a\r\nInjected: 1")])


# ---- requests and bodies ----------------------------------------------------------------------


async def test_get_and_post_go_through_httpx() -> None:
    script = SSEScript(events=openai_events(["Hi", "!"]))
    async with open_upstream(script) as upstream:
        async with client_for(upstream) as client:
            models = await client.get("/models")
            posted = await client.post(CHAT, content=b'{"q": 1}', headers={"X-Test": "yes"})
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "gpt-4.1-mini"
    assert posted.status_code == 200 and posted.content == script.body
    assert posted.http_version == "HTTP/1.1" and posted.reason_phrase == "OK"
    seen = upstream.requests[1]
    assert seen.body == b'{"q": 1}' and seen.headers["x-test"] == "yes"
    assert seen.headers["host"] == f"127.0.0.1:{upstream.port}"
    assert seen.headers["user-agent"].startswith("python-httpx/")


async def test_a_streamed_request_body_is_sent_chunked() -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b'{"a": '
        yield b"1}"

    async with open_upstream(ErrorScript(200, body=b"ok")) as upstream:
        async with client_for(upstream) as client:
            response = await client.post(CHAT, content=parts())
    assert response.content == b"ok"
    assert upstream.requests[0].body == b'{"a": 1}'


@pytest.mark.parametrize("delay", [0.0, 0.0002], ids=["coalesced", "per-event"])
async def test_chunked_sse_body_is_byte_exact(delay: float) -> None:
    transcript = (WIRE / "openai_text.sse").read_bytes()
    script = SSEScript.from_transcript(transcript, delay=delay)
    async with open_upstream(script) as upstream:
        async with client_for(upstream) as client:
            async with client.stream("POST", CHAT, content=b"{}") as response:
                raw = [piece async for piece in response.aiter_raw()]
    assert b"".join(raw) == script.body == transcript
    if delay:
        assert len(raw) > 1  # one piece per network read, not one per response


@pytest.mark.parametrize(
    "script",
    [
        ErrorScript(200, body=b"a content-length body"),
        SSEScript(events=openai_events(["a", "b"]), chunked=False, close_delimited=True),
        BIG,
    ],
    ids=["content-length", "close-delimited", "large-chunked"],
)
async def test_content_length_and_close_delimited_bodies(script: SSEScript | ErrorScript) -> None:
    want = script.body
    async with open_upstream(script) as upstream:
        async with client_for(upstream) as client:
            first = await client.post(CHAT, content=b"{}")
            second = await client.post(CHAT, content=b"{}")
    assert first.content == want and second.content == want
    close_delimited = isinstance(script, SSEScript) and script.close_delimited
    # A close-delimited body leaves no connection to reuse.
    assert len(upstream.connections) == (2 if close_delimited else 1)


# ---- the pool ---------------------------------------------------------------------------------


async def test_sequential_requests_reuse_one_connection() -> None:
    async with open_upstream(BIG) as upstream:
        async with client_for(upstream) as client:
            for _ in range(3):
                async with client.stream("POST", CHAT, content=b"{}") as response:
                    assert await response.aread() == BIG.body
    assert len(upstream.connections) == 1
    assert [r.connection for r in upstream.requests] == [0, 0, 0]


async def test_no_reuse_after_connection_close() -> None:
    script = SSEScript(events=openai_events(["a"]), headers={"connection": "close"})
    async with open_upstream(script) as upstream:
        async with client_for(upstream) as client:
            await client.post(CHAT, content=b"{}")
            await client.post(CHAT, content=b"{}")
            with trio.fail_after(5):
                record = await upstream.wait_connection_closed(0)
    assert len(upstream.connections) == 2 and record.closed_by == "client"


async def test_a_partly_read_body_closes_its_connection() -> None:
    async with open_upstream(BIG) as upstream:
        async with client_for(upstream) as client:
            async with client.stream("POST", CHAT, content=b"{}") as response:
                async for _ in response.aiter_raw():
                    break
            with trio.fail_after(5):
                record = await upstream.wait_connection_closed(0)
            again = await client.post(CHAT, content=b"{}")
    assert record.closed_by == "client" and again.content == BIG.body
    assert upstream.requests[1].connection == 1


async def test_a_cancelled_read_closes_its_connection() -> None:
    stalled = SSEScript(events=openai_events(["a", "b"]), stall_after=1)
    async with open_upstream([stalled, ErrorScript(200, body=b"ok")]) as upstream:
        async with client_for(upstream) as client:

            async def read_forever(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
                with trio.CancelScope() as scope:
                    async with client.stream("POST", CHAT, content=b"{}") as response:
                        task_status.started(scope)
                        async for _ in response.aiter_raw():
                            pass

            async with trio.open_nursery() as nursery:
                scope: trio.CancelScope = await nursery.start(read_forever)
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
            with trio.fail_after(5):
                record = await upstream.wait_connection_closed(0)
            again = await client.post(CHAT, content=b"{}")
    assert record.closed_by == "client"
    assert again.content == b"ok" and upstream.requests[1].connection == 1


async def test_max_connections_queues_the_third_request() -> None:
    stalled = SSEScript(events=openai_events(["a", "b"]), stall_after=1)
    route: list[SSEScript | ErrorScript] = [stalled, stalled, ErrorScript(200, body=b"third")]
    got: list[bytes] = []
    async with open_upstream(route) as upstream:
        limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
        async with client_for(upstream, limits=limits) as client:
            scopes: list[trio.CancelScope] = []

            async def hold(task_status: trio.TaskStatus[None]) -> None:
                with trio.CancelScope() as scope:
                    scopes.append(scope)
                    async with client.stream("POST", CHAT, content=b"{}") as response:
                        task_status.started()
                        await response.aread()

            async def third() -> None:
                got.append((await client.post(CHAT, content=b"{}")).content)

            async with trio.open_nursery() as nursery:
                await nursery.start(hold)
                await nursery.start(hold)
                nursery.start_soon(third)
                await trio.testing.wait_all_tasks_blocked()
                assert len(upstream.requests) == 2  # the third waits for a connection
                scopes[0].cancel()
                with trio.fail_after(5):
                    third_request = await upstream.wait_request(2)
                assert upstream.connections[0].closed.is_set()
                scopes[1].cancel()
    assert got == [b"third"] and third_request.connection == 2


async def test_pool_timeout(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0.02  # loopback I/O lands before the clock jumps
    stalled = SSEScript(events=openai_events(["a", "b"]), stall_after=1)
    async with open_upstream(stalled) as upstream:
        async with client_for(upstream, limits=httpx.Limits(max_connections=1)) as client:
            async with client.stream("POST", CHAT, content=b"{}"):
                with pytest.raises(httpx.PoolTimeout):
                    await client.post(CHAT, content=b"{}", timeout=httpx.Timeout(5.0, pool=1.0))
    assert len(upstream.requests) == 1


async def test_max_keepalive_closes_the_extra_idle_connection() -> None:
    async with open_upstream(BIG) as upstream:
        limits = httpx.Limits(max_connections=10, max_keepalive_connections=1)
        async with client_for(upstream, limits=limits) as client:
            async with client.stream("POST", CHAT, content=b"{}") as one:
                async with client.stream("POST", CHAT, content=b"{}") as two:
                    await one.aread()
                    await two.aread()
            with trio.fail_after(5):
                record = await upstream.wait_connection_closed(1)
            await client.post(CHAT, content=b"{}")
    assert record.closed_by == "client" and upstream.requests[2].connection == 0


async def test_an_expired_idle_connection_is_not_reused(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0.02
    async with open_upstream(ErrorScript(200, body=b"ok")) as upstream:
        limits = httpx.Limits(keepalive_expiry=5.0)
        async with client_for(upstream, limits=limits) as client:
            await client.post(CHAT, content=b"{}")
            await client.post(CHAT, content=b"{}")
            await trio.sleep(10)
            await client.post(CHAT, content=b"{}")
    assert [r.connection for r in upstream.requests] == [0, 0, 1]


@asynccontextmanager
async def open_raw_server(
    handler: Callable[[trio.SocketStream], Awaitable[None]],
) -> AsyncIterator[str]:
    """A one-off loopback server running ``handler`` per connection; yields its base URL."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


async def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    connections: list[int] = []
    closed = trio.Event()

    async def handler(stream: trio.SocketStream) -> None:
        connections.append(1)
        await stream.receive_some(65536)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await stream.aclose()  # the server closes an idle keep-alive connection
        closed.set()

    async with open_raw_server(handler) as base_url:
        async with httpx.AsyncClient(base_url=base_url, transport=TrioTransport()) as client:
            assert (await client.get("/")).content == b"ok"
            await closed.wait()
            assert (await client.get("/")).content == b"ok"
    assert len(connections) == 2


# ---- failures ---------------------------------------------------------------------------------


async def test_a_mid_body_disconnect_is_a_protocol_error() -> None:
    script = SSEScript(events=openai_events(["a", "b", "c"]), disconnect_after=2)
    async with open_upstream(script) as upstream:
        async with client_for(upstream) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post(CHAT, content=b"{}")


async def test_a_reset_mid_body_is_a_read_error() -> None:
    script = SSEScript(events=openai_events(["a", "b", "c"]), disconnect_after=2, reset=True)
    async with open_upstream(script) as upstream:
        async with client_for(upstream) as client:
            with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
                await client.post(CHAT, content=b"{}")


async def test_a_malformed_chunk_size_is_a_protocol_error() -> None:
    script = SSEScript(
        events=[b"zz\r\nhello\r\n0\r\n\r\n"],
        chunked=False,
        close_delimited=True,
        headers={"transfer-encoding": "chunked"},
    )
    async with open_upstream(script) as upstream:
        async with client_for(upstream) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post(CHAT, content=b"{}")


async def test_an_oversized_response_head_is_a_protocol_error() -> None:
    script = ErrorScript(200, body=b"ok", headers={"x-big": "a" * 5000})
    async with open_upstream(script) as upstream:
        async with client_for(upstream, max_head_bytes=4096) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post(CHAT, content=b"{}")


async def test_a_refused_connection_is_a_connect_error() -> None:
    async with open_upstream(ErrorScript(200)) as upstream:
        base_url = upstream.base_url
    async with httpx.AsyncClient(base_url=base_url, transport=TrioTransport()) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get("/")


async def test_a_read_timeout_closes_the_connection(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0.02  # loopback I/O lands before the clock jumps
    stalled = SSEScript(events=openai_events(["a", "b"]), stall_after=1)
    async with open_upstream(stalled) as upstream:
        async with client_for(upstream) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post(CHAT, content=b"{}", timeout=httpx.Timeout(5.0, read=3.0))
            with trio.fail_after(5):
                record = await upstream.wait_connection_closed(0)
    assert record.closed_by == "client"


# ---- the adapters end to end ------------------------------------------------------------------


def adapter(upstream: Upstream) -> OpenAIChatAdapter:
    return OpenAIChatAdapter(
        base_url=upstream.base_url,
        api_key_env="K",
        environ={"K": "sk-test-123"},
        transport=TrioTransport(),
    )


def options() -> GenerateOptions:
    return GenerateOptions(provider="p", model="m", messages=(llmrt.user_message("hi"),))


async def test_the_openai_adapter_streams_a_transcript_through_the_transport() -> None:
    expected = json.loads((WIRE / "expected.json").read_text())["openai_text.sse"]
    script = SSEScript.from_transcript(WIRE / "openai_text.sse", delay=0.0002)
    async with open_upstream(script) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter(upstream))
            for _ in range(2):
                async with rt.stream(options()) as call:
                    chunks = [chunk async for chunk in call]
                text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
                assert text == expected["blocks"][0]["text"]
                last = chunks[-1]
                assert isinstance(last, Finish) and isinstance(last.reason, FinishStop)
    assert len(upstream.connections) == 1  # the body was drained, so the connection was reused


async def test_an_abort_closes_the_upstream_connection() -> None:
    script = SSEScript(events=openai_events(["a", "b", "c"]), stall_after=3)
    async with open_upstream(script) as upstream:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter(upstream))
            async with rt.stream(options()) as call:
                async for chunk in call:
                    if isinstance(chunk, TextDelta):
                        call.abort()
                    last = chunk
            assert isinstance(last, Finish) and isinstance(last.reason, FinishAborted)
            with trio.fail_after(5):
                record = await upstream.wait_connection_closed(0)
    assert record.closed_by == "client"


def _llmrt_system_tasks() -> int:
    """llmrt's tasks in trio's system nursery (none: every task runs where its owner holds it)."""
    root = trio.lowlevel.current_root_task()
    return sum(
        1
        for nursery in root.child_nurseries
        for task in nursery.child_tasks
        if "llmrt" in task.name or "deadline" in task.name.lower()
    )


@asynccontextmanager
async def services_for(transport: TrioTransport) -> AsyncIterator[RuntimeServices]:
    """Runtime services in a nursery the test holds, attached to ``transport``."""
    async with trio.open_nursery() as nursery:
        services = await RuntimeServices.start(nursery)
        transport.attach_runtime(services)
        try:
            yield services
        finally:
            transport.detach_runtime()
            nursery.cancel_scope.cancel()


async def test_a_read_timeout_closes_the_connection_on_the_runtime_heap(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0.02
    stalled = SSEScript(events=openai_events(["a", "b"]), stall_after=1)
    transport = TrioTransport()
    async with open_upstream(stalled) as upstream, services_for(transport) as services:
        async with httpx.AsyncClient(base_url=upstream.base_url, transport=transport) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post(CHAT, content=b"{}", timeout=httpx.Timeout(5.0, read=3.0))
            with trio.fail_after(5):
                record = await upstream.wait_connection_closed(0)
        assert len(services.deadlines) == 0  # the fired entry left the heap
    assert record.closed_by == "client"


async def test_the_read_timeout_bounds_each_wait_not_the_whole_body(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0.02
    # Five events 2 s apart: 8 s in all, each wait 2 s, under a 3 s read timeout.
    paced = SSEScript(events=openai_events(["a", "b", "c"]), delay=2.0)
    async with open_upstream(paced) as upstream, client_for(upstream) as client:
        timeout = httpx.Timeout(5.0, read=3.0)
        async with client.stream("POST", CHAT, content=b"{}", timeout=timeout) as response:
            body = b"".join([part async for part in response.aiter_raw()])
        assert body.count(b"data:") == len(openai_events(["a", "b", "c"]))
        assert trio.current_time() >= 8.0


async def test_the_read_deadline_heap_lets_go_when_nothing_is_left_to_watch(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0.02
    paced = SSEScript(events=openai_events(["a"]), delay=1.0)
    transport = TrioTransport()
    async with open_upstream(paced) as upstream, services_for(transport) as services:
        client = httpx.AsyncClient(base_url=upstream.base_url, transport=transport)
        timeout = httpx.Timeout(5.0, read=3.0)
        async with client.stream("POST", CHAT, content=b"{}", timeout=timeout) as response:
            async for _ in response.aiter_raw():
                assert len(services.deadlines) == 1  # one entry for the connection's reads
        # The connection went back to the pool; past its last deadline nothing is watched.
        await trio.sleep(4.0)
        await trio.testing.wait_all_tasks_blocked()
        assert len(services.deadlines) == 0
        # The heap runs in the nursery its owner holds, not as a system task.
        assert _llmrt_system_tasks() == 0
        assert [t.name for t in services.nursery.child_tasks] == [
            "llmrt._deadlines.DeadlineHeap.run"
        ]
        # A later request on the pooled connection is served as before.
        again = await client.post(CHAT, content=b"{}", timeout=timeout)
        assert again.status_code == 200
        await client.aclose()


async def test_in_a_runtime_the_transport_and_the_watchdog_share_one_heap(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0.02
    stalled = SSEScript(events=openai_events(["a", "b"]), stall_after=1)
    async with open_upstream(stalled) as upstream:
        async with llmrt.open_runtime(stream_idle_timeout=60.0) as rt:
            transport = TrioTransport()
            served = OpenAIChatAdapter(
                base_url=upstream.base_url,
                api_key_env="K",
                environ={"K": "sk-test-123"},
                transport=transport,
                timeout=httpx.Timeout(5.0, read=3.0),
            )
            await rt.register_adapter(["p"], served)
            watchdog = rt._core.watchdog
            assert transport._deadlines is watchdog  # lent by the registration, not its own
            async with rt.stream(options()) as call:
                chunks = [chunk async for chunk in call]
            last = chunks[-1]
            # The read deadline fired on the watchdog's heap; the watchdog itself did not.
            assert isinstance(last, Finish) and isinstance(last.reason, FinishError)
            assert last.reason.failure.code == ErrorCode.TIMEOUT
            assert watchdog.firings == 0
            assert trio.current_time() < 60.0
            with trio.fail_after(5):
                record = await upstream.wait_connection_closed(0)
    assert record.closed_by == "client"
    assert transport._deadlines is None  # the registration took its services back
