"""Hostile HTTP API clients: each is answered in the API's error shape, and the next is served.

Every case runs against a gateway in the test's loop with small bounds, then
proves the gateway still serves: a normal request right after gets its answer.
"""

from __future__ import annotations

import socket
from typing import Any

import attrs
import pytest
import trio
from _http_wire import (
    Reply,
    api_gateway,
    chat_body,
    exchange,
    messages_body,
    read_reply,
    request_bytes,
)
from _settle import wait_until

from llmrt.actors.gateway import Limits

TOKEN = "hostile-test-token"
SMALL = Limits(shutdown_grace=0.2, max_body_bytes=4096, body_timeout=0.5, heartbeat_timeout=0.5)


def openai_shape(reply: Reply, status: int, code: str | None = None) -> dict[str, Any]:
    assert reply.status == status, reply
    assert reply.headers["content-type"] == "application/json"
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if code is not None:
        assert error["code"] == code
    return error


def anthropic_shape(reply: Reply, status: int, kind: str) -> dict[str, Any]:
    assert reply.status == status, reply
    body = reply.json()
    assert body["type"] == "error" and body["error"]["type"] == kind
    return body["error"]


async def still_serves(port: int, headers: tuple[tuple[str, str], ...] = ()) -> None:
    reply = await exchange(
        port, request_bytes("/v1/chat/completions", chat_body(), headers=headers)
    )
    assert reply.status == 200
    assert reply.json()["choices"][0]["message"]["content"] == "Hello there"


async def test_an_oversized_body_is_413_before_it_is_read() -> None:
    async with api_gateway(SMALL) as (server, _, _):
        big = chat_body("x" * 10_000)
        openai_shape(await exchange(server.port, request_bytes("/v1/chat/completions", big)), 413)
        # Chunked, with no length to refuse up front: refused once the bound is passed.
        head = (
            b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunked = head + b"".join(b"400\r\n" + b"x" * 1024 + b"\r\n" for _ in range(8))
        anthropic_shape(await exchange(server.port, chunked), 413, "request_too_large")
        await still_serves(server.port)


async def test_a_body_sent_slowly_past_the_time_bound_is_408() -> None:
    async with api_gateway(SMALL) as (server, _, _):
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            async with stream:
                body = chat_body()
                await stream.send_all(request_bytes("/v1/chat/completions", body)[: -len(body) + 5])
                reply = await read_reply(stream)  # the rest never comes
        openai_shape(reply, 408, "request_timeout")
        await still_serves(server.port)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b'{"model": "s/m", "messages": ' + b"[" * 200 + b"]" * 200 + b"}", "deep"),
        (b'{"model": "s/m", "messages": [', "not JSON"),
        (
            b'{"model": "s/m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}],'
            b' "top_k": 3}',
            "top_k",
        ),
    ],
)
async def test_bad_json_is_the_apis_400(body: bytes, needle: str) -> None:
    async with api_gateway(SMALL) as (server, _, _):
        reply = await exchange(server.port, request_bytes("/v1/chat/completions", body))
        assert needle in openai_shape(reply, 400)["message"]
        reply = await exchange(server.port, request_bytes("/v1/messages", body))
        assert needle in anthropic_shape(reply, 400, "invalid_request_error")["message"]
        await still_serves(server.port)


async def test_a_wrong_content_type_is_415() -> None:
    async with api_gateway(SMALL) as (server, _, _):
        data = request_bytes("/v1/chat/completions", chat_body(), content_type="text/plain")
        openai_shape(await exchange(server.port, data), 415, "unsupported_media_type")
        await still_serves(server.port)


async def test_an_unknown_model_is_404_model_not_found() -> None:
    async with api_gateway(SMALL) as (server, _, _):
        body = chat_body().replace(b"s/m", b"gpt-5")
        reply = await exchange(server.port, request_bytes("/v1/chat/completions", body))
        assert "provider/model" in openai_shape(reply, 404, "model_not_found")["message"]
        body = messages_body().replace(b"s/m", b"nobody/m")
        reply = await exchange(server.port, request_bytes("/v1/messages", body))
        anthropic_shape(reply, 404, "not_found_error")
        await still_serves(server.port)


async def test_a_missing_or_wrong_token_is_401_and_never_echoed() -> None:
    async with api_gateway(SMALL, token=TOKEN) as (server, _, _):
        for headers in ((), (("Authorization", "Bearer wrong"),), (("x-api-key", "wrong"),)):
            data = request_bytes("/v1/chat/completions", chat_body(), headers=headers)
            reply = await exchange(server.port, data)
            error = openai_shape(reply, 401, "invalid_api_key")
            assert reply.headers["www-authenticate"] == "Bearer"
            assert TOKEN not in error["message"]
            data = request_bytes("/v1/messages", messages_body(), headers=headers)
            anthropic_shape(await exchange(server.port, data), 401, "authentication_error")
        await still_serves(server.port, (("Authorization", f"Bearer {TOKEN}"),))
        await still_serves(server.port, (("x-api-key", TOKEN),))


async def test_a_foreign_origin_is_403_and_gets_no_preflight() -> None:
    allowed = "https://app.example"
    async with api_gateway(SMALL, allow_origin=[allowed]) as (server, _, _):
        foreign = (("Origin", "https://evil.example"),)
        data = request_bytes("/v1/chat/completions", chat_body(), headers=foreign)
        reply = await exchange(server.port, data)
        openai_shape(reply, 403)
        assert "access-control-allow-origin" not in reply.headers
        preflight = (("Access-Control-Request-Method", "POST"),
                     ("Access-Control-Request-Headers", "authorization, content-type"))  # fmt: skip
        reply = await exchange(
            server.port,
            request_bytes("/v1/messages", method="OPTIONS", headers=(*foreign, *preflight)),
        )
        assert reply.status == 403 and "access-control-allow-origin" not in reply.headers
        reply = await exchange(
            server.port,
            request_bytes(
                "/v1/messages", method="OPTIONS", headers=(("Origin", allowed), *preflight)
            ),
        )
        assert reply.status == 204
        assert reply.headers["access-control-allow-origin"] == allowed
        assert reply.headers["access-control-allow-headers"] == "authorization,content-type"
        assert "POST" in reply.headers["access-control-allow-methods"]
        await still_serves(server.port, (("Origin", allowed),))


async def test_remembered_origin_answers_follow_a_new_policy() -> None:
    async with api_gateway(SMALL, allow_origin=["https://app.example"]) as (server, _, _):
        other = (("Origin", "https://other.example"),)
        data = request_bytes("/v1/chat/completions", chat_body(), headers=other)
        for _ in range(2):  # the second answer is the remembered one
            openai_shape(await exchange(server.port, data), 403)
        server._state.policy = attrs.evolve(server._state.policy, any_origin=True)
        await still_serves(server.port, other)
        server._state.policy = attrs.evolve(server._state.policy, any_origin=False)
        openai_shape(await exchange(server.port, data), 403)


async def test_a_client_that_never_reads_is_cut_off_and_its_call_aborted() -> None:
    async with api_gateway(SMALL) as (server, rt, adapter):
        with trio.fail_after(20):
            sock = trio.socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            await sock.connect(("127.0.0.1", server.port))
            stream = trio.SocketStream(sock)
            async with stream:
                body = chat_body("big", stream=True)
                await stream.send_all(request_bytes("/v1/chat/completions", body))
                # Never read: the gateway's writes stall, and its send bound ends the call.
                await wait_until(lambda: rt.statistics().calls_finished.get("aborted", 0) >= 1, 15)
            assert adapter.open_streams == 0
            await still_serves(server.port)
