"""The provider APIs on the wire: the exact events per API, read in random 1-7 byte reads.

A gateway in the test's loop serves a scripted route; a raw client (h11 for
the framing) reads the answer a few bytes at a time. The events must be
exactly what the API's translator writes for the same script (ids and times
aside), and each must validate against the SDK's own event types.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest
from _api_support import assembled, encode_all, failing_script, sse_events, text_script, tool_script
from _http_wire import (
    api_gateway,
    chat_body,
    exchange,
    messages_body,
    request_bytes,
    responses_body,
)
from _sdks import anthropic, openai, type_adapter

from llmrt.actors.gateway.api import decode_chat, decode_messages, decode_responses

_ID = re.compile(r"^(chatcmpl-|resp_|msg_|rs_|fc_)[0-9a-f]{32}")


def normal(value: Any) -> Any:
    """``value`` with generated ids and clock readings fixed, for comparison."""
    if isinstance(value, dict):
        return {
            k: 0 if k in ("created", "created_at", "completed_at") else normal(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [normal(v) for v in value]
    if isinstance(value, str):
        return _ID.sub(lambda m: m.group(1) + "ID", value)
    return value


def events(body: bytes) -> list[tuple[str | None, Any]]:
    return [
        (name, data.decode() if data == b"[DONE]" else normal(msgspec.json.decode(data)))
        for name, data in sse_events(body)
    ]


CASES = {
    "chat": ("/v1/chat/completions", chat_body, decode_chat),
    "responses": ("/v1/responses", responses_body, decode_responses),
    "messages": ("/v1/messages", messages_body, decode_messages),
}
SCRIPTS = {"tool": tool_script, "text": text_script, "fail": failing_script}


def validate(api: str, name: str | None, data: Any) -> None:
    if data == "[DONE]":
        return
    if api == "chat":
        if "error" in data:
            openai.types.shared.ErrorObject.model_validate(data["error"])
        else:
            openai.types.chat.ChatCompletionChunk.model_validate(data)
    elif api == "responses":
        type_adapter("openai.types.responses.ResponseStreamEvent").validate_python(data)
    else:
        assert name == data["type"]
        if name == "error":  # the in-stream error: not a stream event type of the SDK's
            anthropic.types.ErrorResponse.model_validate(data)
        else:
            type_adapter("anthropic.types.RawMessageStreamEvent").validate_python(data)


@pytest.mark.parametrize("api", CASES)
@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("seed", [1, 2])
async def test_the_exact_events_arrive_in_tiny_reads(api: str, script: str, seed: int) -> None:
    path, body_of, decode = CASES[api]
    more: dict[str, Any] = {"stream": True}
    if api == "chat":
        more["stream_options"] = {"include_usage": True}
    body = body_of(script, **more)
    async with api_gateway() as (server, _, _):
        reply = await exchange(server.port, request_bytes(path, body), seed=seed)
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert reply.headers["transfer-encoding"] == "chunked"
    expected = encode_all(decode(body).encoder(), SCRIPTS[script]())
    got = events(reply.body)
    assert got == events(expected)
    for name, data in got:
        validate(api, name, data)


@pytest.mark.parametrize("api", CASES)
async def test_a_whole_answer_is_the_translators_object(api: str) -> None:
    path, body_of, decode = CASES[api]
    body = body_of("tool")
    async with api_gateway() as (server, _, _):
        reply = await exchange(server.port, request_bytes(path, body), seed=3)
    assert reply.status == 200 and reply.headers["content-type"] == "application/json"
    assert int(reply.headers["content-length"]) == len(reply.body)
    expected = decode(body).answer(assembled(tool_script()))
    assert normal(reply.json()) == normal(msgspec.json.decode(expected))
