"""The HTTP APIs' calls behave as websocket calls do: pings, aborts, backpressure, traces, retries.

A gateway in the test's loop serves a scripted route (`_http_wire`); raw
loopback clients drive it.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
from _api_support import sse_events, text_script
from _http_wire import (
    BIG,
    PRODUCED,
    api_gateway,
    chat_body,
    exchange,
    messages_body,
    read_reply,
    request_bytes,
    responses_body,
)
from _settle import wait_until

from llmrt import (
    ErrorCode,
    Finish,
    FinishError,
    FinishStop,
    GenerateOptions,
    LlmFailure,
    NormalRetryPolicy,
    TokenUsage,
    UsageChunk,
)
from llmrt.actors._tracecontext import TRACEPARENT
from llmrt.actors.gateway import Limits
from llmrt.actors.gateway._http_handler import _Writer

TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
#: A route that allows no retry: its calls skip the retry executor (`OneAttempt`).
NO_RETRY = NormalRetryPolicy(max_retries=0)
POLICIES = pytest.mark.parametrize("policy", [None, NO_RETRY], ids=["retrying", "no-retry"])
PATHS = {
    "chat": ("/v1/chat/completions", chat_body),
    "responses": ("/v1/responses", responses_body),
    "messages": ("/v1/messages", messages_body),
}


async def test_a_quiet_messages_stream_gets_ping_events() -> None:
    limits = Limits(shutdown_grace=0.2, ping_interval=0.1)
    async with api_gateway(limits) as (server, _, _):
        body = messages_body("quiet", stream=True)
        reply = await exchange(server.port, request_bytes("/v1/messages", body))
    names = [name for name, _ in sse_events(reply.body)]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert "ping" in names  # during the half second of silence


async def test_a_quiet_openai_stream_gets_comments() -> None:
    limits = Limits(shutdown_grace=0.2, ping_interval=0.1)
    async with api_gateway(limits) as (server, _, _):
        body = chat_body("quiet", stream=True)
        reply = await exchange(server.port, request_bytes("/v1/chat/completions", body))
    assert b"\n\n: ping\n\n" in reply.body
    assert reply.body.endswith(b"data: [DONE]\n\n")


async def _until_ping(conn: trio.SocketStream) -> bytes:
    """What ``conn`` receives up to and including a ``: ping`` comment (it must not end first)."""
    got = b""
    while b": ping" not in got:
        data = await conn.receive_some(65536)
        assert data, got
        got += data
    return got


@asynccontextmanager
async def _chat_stream(script: str) -> AsyncIterator[trio.SocketStream]:
    """A raw client's connection, its streamed Chat request sent (pings every 0.1 s)."""
    limits = Limits(shutdown_grace=0.2, ping_interval=0.1)
    async with api_gateway(limits) as (server, _, _):
        body = chat_body(script, stream=True)
        with trio.fail_after(10):
            conn = await trio.open_tcp_stream("127.0.0.1", server.port)
            async with conn:
                await conn.send_all(request_bytes("/v1/chat/completions", body))
                yield conn


async def test_a_client_that_trickles_bytes_does_not_hold_off_the_pings() -> None:
    # One task reads the client and keeps the stream's timers: bytes arriving
    # more often than a tick must not postpone the tick.
    async with _chat_stream("quiet") as conn, trio.open_nursery() as nursery:

        async def trickle() -> None:
            while True:
                await trio.sleep(0.01)
                await conn.send_all(b"x")

        nursery.start_soon(trickle)
        got = await _until_ping(conn)
        nursery.cancel_scope.cancel()
    assert got.startswith(b"HTTP/1.1 200 ")


async def test_a_stream_silent_after_a_block_start_gets_its_head_and_pings() -> None:
    # The block start says nothing in Chat Completions, so the head waits for the
    # first event; the watcher's ping sends it first when the silence lasts.
    async with _chat_stream("silent-start") as conn:
        got = await _until_ping(conn)
        assert got.startswith(b"HTTP/1.1 200 ")
        assert b'"content"' not in got  # the text is still a second away
        while data := await conn.receive_some(65536):  # to the close
            got += data
    assert b"data: [DONE]" in got
    assert got.index(b": ping") < got.index(b'"content"')


@POLICIES
@pytest.mark.parametrize("api", PATHS)
@pytest.mark.parametrize("stream", [True, False])
async def test_a_client_gone_before_the_first_byte_aborts_the_call(
    api: str, stream: bool, policy: Any
) -> None:
    path, body_of = PATHS[api]
    async with api_gateway(retry_policy=policy) as (server, rt, adapter):
        with trio.fail_after(10):
            conn = await trio.open_tcp_stream("127.0.0.1", server.port)
            body = body_of("late", stream=stream)
            await conn.send_all(request_bytes(path, body))
            await wait_until(lambda: adapter.open_streams == 1)
            await conn.aclose()  # nothing was answered yet
            await wait_until(lambda: adapter.open_streams == 0)
            await wait_until(lambda: rt.statistics().calls_finished.get("aborted", 0) == 1)
        assert server.live_requests == 0


@POLICIES
async def test_a_slow_reader_holds_the_upstream_back(policy: Any) -> None:
    PRODUCED[0] = 0
    limits = Limits(shutdown_grace=0.2, heartbeat_timeout=30)
    async with api_gateway(limits, retry_policy=policy) as (server, rt, _adapter):
        with trio.fail_after(30):
            sock = trio.socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            await sock.connect(("127.0.0.1", server.port))
            async with trio.SocketStream(sock) as stream:
                await stream.send_all(
                    request_bytes("/v1/chat/completions", chat_body("big", stream=True))
                )
                await wait_until(lambda: PRODUCED[0] > 0)
                # Unread, the socket buffers fill and the adapter is held far short of the end.
                await trio.sleep(0.5)
                held = PRODUCED[0]
                assert held < BIG // 2
                received = 0
                while data := await stream.receive_some(65536):
                    received += len(data)
            assert PRODUCED[0] == BIG  # once read, everything came through
            assert received > BIG * 1024
            await wait_until(lambda: rt.statistics().calls_finished.get("stop", 0) == 1)


@POLICIES
async def test_traceparent_reaches_the_call(policy: Any) -> None:
    seen: list[str | None] = []

    def middleware(request: GenerateOptions, next: Callable[[GenerateOptions], Any]) -> Any:
        seen.append(TRACEPARENT.get(None))
        return next(request)

    async with api_gateway(middleware=middleware, retry_policy=policy) as (server, _, _):
        headers = (("traceparent", TRACE),)
        reply = await exchange(
            server.port, request_bytes("/v1/chat/completions", chat_body(), headers=headers)
        )
        assert reply.status == 200
        # An invalid one is ignored (W3C Trace Context): the call runs untraced.
        headers = (("traceparent", "00-zz-bad-01"),)
        reply = await exchange(
            server.port, request_bytes("/v1/messages", messages_body(), headers=headers)
        )
        assert reply.status == 200
    assert seen == [TRACE, None]


async def test_the_routes_retry_policy_applies_before_the_first_output() -> None:
    calls = [0]
    failure = LlmFailure(message="busy", code=ErrorCode.OVERLOADED)

    def script(options: GenerateOptions) -> list[Any]:
        calls[0] += 1
        if calls[0] == 1:
            return [Finish(reason=FinishError(failure=failure))]
        return text_script()

    policy = NormalRetryPolicy(max_retries=2, initial_delay_ms=1, max_delay_ms=1)
    async with api_gateway(script=script, retry_policy=policy) as (server, rt, _):
        reply = await exchange(server.port, request_bytes("/v1/responses", responses_body()))
        assert reply.status == 200
        assert reply.json()["output"][0]["content"][0]["text"] == "Hello there"
        assert calls[0] == 2
        assert rt.statistics().retries_by_code == {"OVERLOADED": 1}


@POLICIES
async def test_shutdown_gives_http_calls_the_grace_then_aborts_them(policy: Any) -> None:
    limits = Limits(shutdown_grace=0.2)
    async with api_gateway(limits, retry_policy=policy) as (server, _rt, adapter):
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            async with stream:
                await stream.send_all(
                    request_bytes("/v1/messages", messages_body("stall", stream=True))
                )
                await wait_until(lambda: adapter.open_streams == 1)
                await server.aclose()
                reply = await read_reply(stream)
    events = sse_events(reply.body)
    assert events[-1][0] == "error"  # the in-stream error: the call was aborted
    assert adapter.open_streams == 0


async def test_events_already_here_go_out_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    # The scripted route yields its whole script in one step of the call task,
    # so after the first event (written with the head) the rest is already
    # here: one write, not one per event. Where the script waits (``quiet``),
    # what came before the wait is written before it.
    writes: list[bytes] = []
    real = _Writer.data

    async def data(self: _Writer, data: bytes, *, last: bool = False) -> None:
        writes.append(data)
        await real(self, data, last=last)

    monkeypatch.setattr(_Writer, "data", data)
    async with api_gateway(Limits(shutdown_grace=0.2, ping_interval=0.1)) as (server, _, _):
        body = chat_body("Hello", stream=True)
        reply = await exchange(server.port, request_bytes("/v1/chat/completions", body))
        assert reply.body.endswith(b"data: [DONE]\n\n")
        events = sse_events(reply.body)
        assert len(events) >= 4  # the role and "Hello", " there", the finish, [DONE]
        (one,) = writes  # the head's write took the first; the rest went together
        assert b'"content":" there"' in one and one.endswith(b"data: [DONE]\n\n")
        writes.clear()
        quiet = chat_body("quiet", stream=True)
        reply = await exchange(server.port, request_bytes("/v1/chat/completions", quiet))
    # "Hello" went out with the head before the silence; the rest after it, together.
    (after,) = [w for w in writes if not w.startswith(b":")]  # the keeper's pings aside
    assert b'"content":"Hello"' not in after and b'"content":" there"' in after
    assert reply.body.index(b'"content":"Hello"') < reply.body.index(b": ping")
    assert reply.body.index(b": ping") < reply.body.index(after)


def _usage_first(options: GenerateOptions) -> list[Any]:
    """The usage before any block (some providers report the input's count first), then text."""
    usage = UsageChunk(usage=TokenUsage(input_tokens=7, output_tokens=2))
    return [usage, *text_script()[:4], Finish(reason=FinishStop())]


@POLICIES
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_usage_before_the_first_event_is_in_the_answer(api: str, policy: Any) -> None:
    # The handler holds a usage chunk until the first event it can write: the
    # usage must still reach the API's usage field at the end.
    path, body = PATHS[api]
    more: dict[str, Any] = {"stream": True}
    if api == "chat":
        more["stream_options"] = {"include_usage": True}
    async with api_gateway(script=_usage_first, retry_policy=policy) as (server, _, _):
        reply = await exchange(server.port, request_bytes(path, body("Hello", **more)))
    assert reply.status == 200
    datas = [msgspec.json.decode(data) for _, data in sse_events(reply.body) if data != b"[DONE]"]
    if api == "chat":
        assert "".join(d["choices"][0]["delta"].get("content") or "" for d in datas[:-1]) == (
            "Hello there"
        )
        usage = datas[-1]["usage"]
        assert usage["prompt_tokens"] == 7 and usage["completion_tokens"] == 2
    elif api == "responses":
        assert datas[-1]["type"] == "response.completed"
        assert datas[-1]["response"]["usage"]["input_tokens"] == 7
    else:
        deltas = [d for d in datas if d["type"] == "message_delta"]
        assert deltas[-1]["usage"]["output_tokens"] == 2


@POLICIES
async def test_a_failure_before_any_output_is_the_apis_error_status(policy: Any) -> None:
    # Not a retryable code: the default policy makes one attempt too, at once.
    failure = LlmFailure(message="bad key", code=ErrorCode.AUTH)

    def script(options: GenerateOptions) -> list[Any]:
        return [Finish(reason=FinishError(failure=failure))]

    async with api_gateway(script=script, retry_policy=policy) as (server, rt, _):
        reply = await exchange(
            server.port, request_bytes("/v1/chat/completions", chat_body(stream=True))
        )
        stats = rt.statistics()
    assert reply.status == 401
    assert reply.json()["error"]["message"] == "bad key"
    assert stats.calls_finished == {"error": 1}
    assert stats.attempts_per_call == {1: 1}
