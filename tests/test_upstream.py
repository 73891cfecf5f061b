"""The local upstream server (`llmrt.testing`), driven by httpx over real loopback sockets."""

from __future__ import annotations

import json
import pathlib
from collections.abc import AsyncIterator

import httpx
import pytest
import trio
from trio.testing import MockClock

from llmrt.testing import (
    OPENAI_DONE,
    ErrorScript,
    RecordedRequest,
    Script,
    SSEScript,
    anthropic_events,
    open_upstream,
    openai_events,
    serve_upstream,
    split_events,
    sse_comment,
    sse_event,
)
from llmrt.testing._http import BadRequest, ParsedRequest, RequestParser

WIRE = pathlib.Path(__file__).parent / "wire"
OPENAI_TEXT = WIRE / "openai_text.sse"
# A bound on waits that involve the real network stack (never a timing assertion).
BOUND = 10.0


async def _events(response: httpx.Response) -> AsyncIterator[list[str]]:
    """Yield each SSE event of a streaming response as its list of lines."""
    lines: list[str] = []
    async for line in response.aiter_lines():
        if line:
            lines.append(line)
        elif lines:
            yield lines
            lines = []


async def _raw_exchange(port: int, data: bytes) -> bytes:
    """Send raw bytes on a fresh connection; return everything until the server closes."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        received = bytearray()
        while chunk := await stream.receive_some(65536):
            received += chunk
    return bytes(received)


# --- streaming bodies -------------------------------------------------------------


async def test_openai_transcript_arrives_byte_exact() -> None:
    expected = OPENAI_TEXT.read_bytes()
    script = SSEScript.from_transcript(OPENAI_TEXT, delay=0.0)
    assert script.body == expected
    with trio.fail_after(BOUND):
        async with open_upstream(script) as upstream, httpx.AsyncClient() as client:
            url = upstream.base_url + "/chat/completions"
            async with client.stream("POST", url, json={"stream": True}) as response:
                body = b"".join([chunk async for chunk in response.aiter_raw()])
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
            assert body == expected


async def test_anthropic_event_framing() -> None:
    script = SSEScript(anthropic_events(["Hello", ", ", "world"], input_tokens=7))
    with trio.fail_after(BOUND):
        async with open_upstream(script) as upstream, httpx.AsyncClient() as client:
            url = upstream.base_url + "/v1/messages"
            async with client.stream("POST", url, json={"stream": True}) as response:
                events = [e async for e in _events(response)]
    names = [e[0].removeprefix("event: ") for e in events]
    payloads = [json.loads(e[1].removeprefix("data: ")) for e in events]
    assert all(len(e) == 2 and e[0].startswith("event: ") for e in events)
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert [p["type"] for p in payloads] == names
    text = "".join(p["delta"]["text"] for p in payloads if p["type"] == "content_block_delta")
    assert text == "Hello, world"
    assert payloads[-2]["usage"]["input_tokens"] == 7
    assert payloads[-2]["usage"]["output_tokens"] == 3


async def test_per_event_delays_on_the_mock_clock(autojump_clock: MockClock) -> None:
    script = SSEScript([{"n": i} for i in range(4)], delay=1.5, first_byte_delay=0.5)
    async with open_upstream(script) as upstream:
        async with httpx.AsyncClient(timeout=None) as client:
            start = trio.current_time()
            seen: list[float] = []
            url = upstream.base_url + "/chat/completions"
            async with client.stream("POST", url, json={}) as response:
                async for _ in _events(response):
                    seen.append(trio.current_time() - start)
    assert seen == pytest.approx([0.5, 2.0, 3.5, 5.0], abs=1e-6)


async def test_stall_holds_until_the_client_closes() -> None:
    script = SSEScript(openai_events(["a", "b", "c"]), stall_after=2)
    async with open_upstream(script) as upstream, httpx.AsyncClient() as client:
        url = upstream.base_url + "/chat/completions"
        with trio.fail_after(BOUND):
            async with client.stream("POST", url, json={}) as response:
                got = []
                async for event in _events(response):
                    got.append(event)
                    if len(got) == 2:
                        break
                record = upstream.connections[0]
                assert record.closed_at is None
                closed_by_client_at = trio.current_time()
                await response.aclose()
        # The server must notice promptly; a missed close would hang here.
        with trio.fail_after(BOUND):
            record = await upstream.wait_connection_closed(0)
        assert record.closed_by == "client"
        assert record.closed_at is not None and record.closed_at >= closed_by_client_at
        assert len(record.requests) == 1 and not record.completed


async def test_leaving_open_upstream_closes_stalled_connections() -> None:
    script = SSEScript([b"data: 1\n\n"], stall_after=1)
    with trio.fail_after(BOUND):
        async with httpx.AsyncClient() as client:
            async with open_upstream(script) as upstream:
                request = client.build_request("POST", upstream.base_url + "/v1/messages")
                response = await client.send(request, stream=True)
                body = response.aiter_raw()
                assert await anext(body) == b"data: 1\n\n"
            with pytest.raises(httpx.RemoteProtocolError):
                async for _ in body:
                    pass
            await response.aclose()
    assert upstream.connections[0].closed_by == "server"


@pytest.mark.parametrize("reset", [False, True])
async def test_disconnect_after_breaks_the_body(reset: bool) -> None:
    events = openai_events(["one", "two", "three"])
    script = SSEScript(events, disconnect_after=2, reset=reset)
    received = bytearray()
    with trio.fail_after(BOUND):
        async with open_upstream(script) as upstream, httpx.AsyncClient() as client:
            url = upstream.base_url + "/chat/completions"
            async with client.stream("POST", url, json={}) as response:
                with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                    async for chunk in response.aiter_raw():
                        received += chunk
            record = await upstream.wait_connection_closed(0)
    if not reset:  # a FIN delivers what was sent; an RST may discard it
        assert bytes(received) == b"".join(events[:2])
    assert record.closed_by == "server" and not record.completed


@pytest.mark.parametrize("close_delimited", [False, True])
async def test_content_length_and_close_delimited_framing(close_delimited: bool) -> None:
    events = [sse_comment(), *openai_events(["x"] * 5)]
    script = SSEScript(events, chunked=False, close_delimited=close_delimited)
    with trio.fail_after(BOUND):
        async with open_upstream(script) as upstream, httpx.AsyncClient() as client:
            response = await client.post(upstream.base_url + "/chat/completions")
            record = await upstream.wait_connection_closed(0) if close_delimited else None
    assert response.content == b"".join(events)
    assert "transfer-encoding" not in response.headers
    if close_delimited:
        assert "content-length" not in response.headers
        assert record is not None and record.closed_by == "server" and record.completed
    else:
        assert response.headers["content-length"] == str(len(response.content))


# --- errors, routing, connections -------------------------------------------------


async def test_error_scripts_arrive_with_their_headers() -> None:
    rate_limited = ErrorScript(
        429,
        {"retry-after": "2", "x-should-retry": "true"},
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
    )
    bad_gateway = ErrorScript(502, body=b"<html><body>502 Bad Gateway</body></html>")
    with trio.fail_after(BOUND):
        async with open_upstream([rate_limited, bad_gateway]) as upstream:
            async with httpx.AsyncClient(base_url=upstream.base_url) as client:
                first = await client.post("/v1/messages", json={})
                second = await client.post("/v1/messages", json={})
    assert first.status_code == 429
    assert first.headers["retry-after"] == "2"
    assert first.headers["x-should-retry"] == "true"
    assert first.headers["content-type"] == "application/json"
    assert first.json()["error"]["type"] == "rate_limit_error"
    assert second.status_code == 502
    assert second.headers["content-type"].startswith("text/html")
    assert second.content == b"<html><body>502 Bad Gateway</body></html>"


async def test_a_script_queue_is_consumed_in_order() -> None:
    queue: list[Script] = [
        ErrorScript(429, {"retry-after": "1"}),
        ErrorScript(503),
        SSEScript(openai_events(["ok"])),
    ]
    with trio.fail_after(BOUND):
        async with open_upstream(queue) as upstream:
            async with httpx.AsyncClient(base_url=upstream.base_url) as client:
                statuses = [(await client.post("/chat/completions")).status_code for _ in range(4)]
                last_ok = await client.get("/models")
    # The fourth request finds the queue empty.
    assert statuses == [429, 503, 200, 500]
    assert last_ok.status_code == 200


async def test_a_router_dispatches_on_path_and_model() -> None:
    def route(request: RecordedRequest) -> Script | None:
        if request.path == "/v1/messages":
            return SSEScript(anthropic_events(["hi"]))
        if request.path == "/chat/completions" and request.json["model"] == "slow":
            return ErrorScript(529)
        if request.path == "/chat/completions":
            return SSEScript(openai_events(["hi"]))
        return None

    with trio.fail_after(BOUND):
        async with open_upstream(route) as upstream:
            async with httpx.AsyncClient(base_url=upstream.base_url) as client:
                anthropic = await client.post("/v1/messages", json={"model": "m"})
                openai = await client.post("/chat/completions", json={"model": "m"})
                overloaded = await client.post("/chat/completions", json={"model": "slow"})
                models = await client.get("/v1/models", headers={"anthropic-version": "2023-06-01"})
                missing = await client.post("/nowhere", json={})
    assert anthropic.text.startswith("event: message_start\n")
    assert openai.content.endswith(OPENAI_DONE)
    assert overloaded.status_code == 529
    assert [m["id"] for m in models.json()["data"]] == ["gpt-4.1-mini", "claude-sonnet-4-5"]
    assert models.json()["data"][0]["type"] == "model"
    assert missing.status_code == 404


async def test_a_failing_router_gets_a_500_and_the_server_lives_on() -> None:
    def route(request: RecordedRequest) -> Script | None:
        if request.json["boom"]:
            raise KeyError("boom")
        return ErrorScript(200, body=b"fine")

    with trio.fail_after(BOUND):
        async with open_upstream(route) as upstream:
            async with httpx.AsyncClient(base_url=upstream.base_url) as client:
                failed = await client.post("/v1/messages", json={"boom": True})
                fine = await client.post("/v1/messages", json={"boom": False})
    assert failed.status_code == 500 and fine.content == b"fine"
    assert upstream.errors == ["KeyError('boom')"]


async def test_keep_alive_reuses_one_connection() -> None:
    with trio.fail_after(BOUND):
        async with open_upstream(SSEScript(openai_events(["a"]))) as upstream:
            async with httpx.AsyncClient(base_url=upstream.base_url) as client:
                for _ in range(2):
                    response = await client.post("/chat/completions", json={})
                    assert response.content.endswith(OPENAI_DONE)
            record = await upstream.wait_connection_closed(0)
            await upstream.wait_all_closed()
    assert len(upstream.connections) == 1
    assert [r.connection for r in upstream.requests] == [0, 0]
    assert len(record.requests) == 2 and record.responses_completed == 2
    assert record.closed_by == "client"


async def test_connection_close_request_is_honoured() -> None:
    with trio.fail_after(BOUND):
        async with open_upstream(ErrorScript(200, body=b"fine")) as upstream:
            async with httpx.AsyncClient(base_url=upstream.base_url) as client:
                response = await client.post("/v1/messages", headers={"connection": "close"})
            record = await upstream.wait_connection_closed(0)
    assert response.headers["connection"] == "close"
    assert record.closed_by == "server" and record.completed


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"THIS IS NOT HTTP\r\n\r\n", b"400"),
        (b"GET / HTTP/2.0\r\n\r\n", b"505"),
        (b"POST /v1/messages HTTP/1.1\r\nContent-Length: nope\r\n\r\n", b"400"),
        (b"POST /v1/messages HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", b"431"),
        (b"POST /v1/messages HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", b"413"),
    ],
)
async def test_a_bad_request_gets_an_error_and_the_server_keeps_serving(
    raw: bytes, status: bytes
) -> None:
    with trio.fail_after(BOUND):
        async with open_upstream(SSEScript(openai_events(["a"]))) as upstream:
            answer = await _raw_exchange(upstream.port, raw)
            async with httpx.AsyncClient(base_url=upstream.base_url) as client:
                good = await client.post("/chat/completions", json={})
    assert answer.startswith(b"HTTP/1.1 " + status + b" ")
    assert good.status_code == 200 and good.content.endswith(OPENAI_DONE)
    assert upstream.connections[0].closed_at is not None


async def test_requests_record_headers_and_json_body() -> None:
    body = {"model": "gpt-4.1-mini", "stream": True, "messages": [{"role": "user"}]}
    headers = [
        ("User-Agent", "llmrt-test/1.0"),
        ("Authorization", "Bearer sk-test-secret"),
        ("X-Multi", "a"),
        ("X-Multi", "b"),
    ]
    with trio.fail_after(BOUND):
        async with open_upstream(SSEScript(openai_events(["a"]))) as upstream:
            async with httpx.AsyncClient(base_url=upstream.base_url) as client:
                await client.post("/chat/completions?x=1", json=body, headers=headers)
            request = await upstream.wait_request(0)
    assert (request.method, request.path, request.query) == ("POST", "/chat/completions", "x=1")
    assert request.headers["user-agent"] == "llmrt-test/1.0"
    assert request.headers["Authorization"] == "Bearer sk-test-secret"
    assert request.headers.get_list("x-multi") == ["a", "b"]
    assert request.json == body
    assert json.loads(request.body) == body
    assert "sk-test-secret" not in repr(request)


async def test_a_chunked_request_body_is_read() -> None:
    async def parts() -> AsyncIterator[bytes]:
        for part in (b'{"model":', b' "m", ', b'"stream": true}'):
            yield part

    with trio.fail_after(BOUND):
        async with open_upstream(ErrorScript(200, body=b"ok")) as upstream:
            async with httpx.AsyncClient(base_url=upstream.base_url) as client:
                response = await client.post("/chat/completions", content=parts())
    assert response.content == b"ok"
    assert upstream.requests[0].headers["transfer-encoding"] == "chunked"
    assert upstream.requests[0].json == {"model": "m", "stream": True}


async def test_serve_upstream_supports_nursery_start() -> None:
    with trio.fail_after(BOUND):
        async with trio.open_nursery() as nursery:
            upstream = await nursery.start(serve_upstream, ErrorScript(418, body=b"teapot"))
            async with httpx.AsyncClient(base_url=upstream.base_url) as client:
                response = await client.post("/v1/messages")
            nursery.cancel_scope.cancel()
    assert response.status_code == 418
    assert upstream.base_url == f"http://127.0.0.1:{upstream.port}"


# --- logic without sockets --------------------------------------------------------


@pytest.mark.parametrize("path", sorted(WIRE.glob("*.sse")), ids=lambda p: p.name)
def test_split_events_keeps_every_byte(path: pathlib.Path) -> None:
    body = path.read_bytes()
    events = split_events(body)
    assert b"".join(events) == body
    assert all(e.endswith(b"\n\n") for e in events)
    assert len(events) == body.count(b"\n\n")


def test_split_events_handles_crlf_and_a_missing_final_blank_line() -> None:
    assert split_events(b"data: a\r\n\r\ndata: b\n\ndata: c") == (
        b"data: a\r\n\r\n",
        b"data: b\n\n",
        b"data: c",
    )


def test_openai_events_form_a_realistic_stream() -> None:
    events = openai_events(
        ["Hel", "lo"],
        reasoning_chunks=["think"],
        tool_calls=[("call_1", "get_weather", ['{"city":', ' "Paris"}'])],
        prompt_tokens=20,
        cached_tokens=5,
    )
    assert events[-1] == OPENAI_DONE
    chunks = [json.loads(e.removeprefix(b"data: ")) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": "", "refusal": None}
    assert "".join(d.get("content", "") for d in deltas[1:]) == "Hello"
    assert deltas[1] == {"reasoning_content": "think"}
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["id"] == "call_1" and calls[0]["function"]["name"] == "get_weather"
    assert "".join(c["function"]["arguments"] for c in calls) == '{"city": "Paris"}'
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 5


def test_anthropic_events_with_thinking_and_tool_use() -> None:
    events = anthropic_events(
        [], thinking_chunks=["hm"], tool_uses=[("toolu_1", "get_time", ['{"tz":', '"UTC"}'])]
    )
    payloads = [json.loads(e.split(b"\ndata: ", 1)[1]) for e in events]
    kinds = [p["content_block"]["type"] for p in payloads if p["type"] == "content_block_start"]
    assert kinds == ["thinking", "tool_use"]
    deltas = [p["delta"]["type"] for p in payloads if p["type"] == "content_block_delta"]
    assert deltas == ["thinking_delta", "signature_delta", "input_json_delta", "input_json_delta"]
    assert payloads[-2]["delta"]["stop_reason"] == "tool_use"
    assert events[0] == sse_event("message_start", payloads[0])


def test_a_long_stream_is_built_and_coalesced() -> None:
    script = SSEScript(openai_events(["tok"] * 20_000))
    plan = script.plan
    assert len(script.events) == 20_004
    assert 1 < len(plan.writes) < 200  # coalesced into large writes, not one per event
    assert plan.writes[-1].endswith(b"0\r\n\r\n")


def test_script_arguments_are_validated() -> None:
    with pytest.raises(ValueError):
        SSEScript([], stall_after=1, disconnect_after=1)
    with pytest.raises(ValueError):
        SSEScript([], delay=-1.0)
    with pytest.raises(ValueError):
        ErrorScript(42)


def test_parser_reads_pipelined_requests_fed_byte_by_byte() -> None:
    wire = (
        b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
        b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2;ext=1\r\nde\r\n1\r\nf\r\n0\r\nX-Trailer: 1\r\n\r\n"
        b"GET /c HTTP/1.0\n\n"
    )
    parser = RequestParser()
    out: list[ParsedRequest | BadRequest] = []
    for i in range(len(wire)):
        out += parser.feed(wire[i : i + 1])
    assert [(r.target, r.body) for r in out if isinstance(r, ParsedRequest)] == [
        ("/a", b"abc"),
        ("/b", b"def"),
        ("/c", b""),
    ]
    assert [r.keep_alive for r in out if isinstance(r, ParsedRequest)] == [True, True, False]
    assert parser.idle


def test_parser_rejects_ambiguous_framing_and_then_stops() -> None:
    parser = RequestParser()
    out = parser.feed(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert out == [BadRequest(400, "both Content-Length and Transfer-Encoding")]
    assert parser.feed(b"GET / HTTP/1.1\r\n\r\n") == []
