"""Builders of provider SSE events, as bytes, for scripts.

`openai_events` and `anthropic_events` build realistic whole streams from
text fragments. The many per-token events are stamped from a pre-encoded
prefix and suffix around the JSON-encoded fragment, so a 20,000-chunk stream
costs a few milliseconds to build.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec

__all__ = [
    "OPENAI_DONE",
    "anthropic_events",
    "openai_events",
    "sse_comment",
    "sse_data",
    "sse_event",
]

#: The OpenAI end-of-stream sentinel event.
OPENAI_DONE: Final = b"data: [DONE]\n\n"

_encode = msgspec.json.Encoder().encode

#: One streamed tool call: (id, function name, argument fragments).
ToolCallSpec = tuple[str, str, Sequence[str]]


def _payload(payload: Any) -> bytes:
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, str):
        return payload.encode()
    return _encode(payload)


def sse_data(payload: Any) -> bytes:
    """One ``data:`` event: bytes/str verbatim after ``data: ``, any other value as JSON."""
    return b"data: " + _payload(payload) + b"\n\n"


def sse_event(name: str, payload: Any) -> bytes:
    """One named event, ``event: <name>\\ndata: <payload>\\n\\n`` (Anthropic framing)."""
    return b"event: " + name.encode() + b"\ndata: " + _payload(payload) + b"\n\n"


def sse_comment(text: str = "keep-alive") -> bytes:
    """One SSE comment event, ``: <text>\\n\\n`` (DeepSeek's keep-alive)."""
    return b": " + text.encode() + b"\n\n"


def _stamp(prefix: bytes, fragments: Iterable[str], suffix: bytes) -> list[bytes]:
    # Token streams repeat fragments a lot; encode each distinct one once.
    cache: dict[str, bytes] = {}
    out = []
    for fragment in fragments:
        encoded = cache.get(fragment)
        if encoded is None:
            encoded = cache[fragment] = prefix + _encode(fragment) + suffix
        out.append(encoded)
    return out


def openai_events(
    text_chunks: Iterable[str],
    *,
    model: str = "gpt-4.1-mini",
    completion_id: str = "chatcmpl-llmrt-test",
    created: int = 1770000000,
    reasoning_chunks: Iterable[str] = (),
    tool_calls: Sequence[ToolCallSpec] = (),
    finish_reason: str | None = None,
    include_usage: bool = True,
    prompt_tokens: int = 12,
    cached_tokens: int = 0,
    completion_tokens: int | None = None,
    reasoning_tokens: int = 0,
    done: bool = True,
) -> list[bytes]:
    """Build an OpenAI chat.completion.chunk stream.

    Order: a role chunk; one chunk per reasoning fragment (DeepSeek's
    ``reasoning_content``); one per text fragment; for each tool call a first
    fragment with id, type and name, then argument fragments; a finish chunk
    (``finish_reason`` defaults to ``tool_calls`` when tools were called, else
    ``stop``); with `include_usage`, a ``choices: []`` usage chunk
    (`completion_tokens` defaults to the number of content-bearing chunks);
    then ``[DONE]`` unless `done` is false.
    """
    common = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_llmrt",
    }
    head = _encode(common)[:-1]  # the common fields, object left open

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse_data({**common, "choices": [choice], "usage": None})

    def template(field: str) -> tuple[bytes, bytes]:
        prefix = b"data: " + head + b',"choices":[{"index":0,"delta":{"' + field.encode() + b'":'
        return prefix, b'},"logprobs":null,"finish_reason":null}],"usage":null}\n\n'

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    count = len(events)
    prefix, suffix = template("reasoning_content")
    events += _stamp(prefix, reasoning_chunks, suffix)
    prefix, suffix = template("content")
    events += _stamp(prefix, text_chunks, suffix)
    for index, (call_id, name, fragments) in enumerate(tool_calls):
        first = {"index": index, "id": call_id, "type": "function"}
        events.append(
            chunk({"tool_calls": [{**first, "function": {"name": name, "arguments": ""}}]})
        )
        for fragment in fragments:
            call = {"index": index, "function": {"arguments": fragment}}
            events.append(chunk({"tool_calls": [call]}))
    produced = len(events) - count
    if finish_reason is None:
        finish_reason = "tool_calls" if tool_calls else "stop"
    events.append(chunk({}, finish_reason))
    if include_usage:
        completion = produced if completion_tokens is None else completion_tokens
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        }
        events.append(sse_data({**common, "choices": [], "usage": usage}))
    if done:
        events.append(OPENAI_DONE)
    return events


def anthropic_events(
    text_chunks: Iterable[str],
    *,
    model: str = "claude-sonnet-4-5",
    message_id: str = "msg_llmrt_test",
    thinking_chunks: Sequence[str] = (),
    signature: str = "c2lnbmF0dXJl",
    tool_uses: Sequence[ToolCallSpec] = (),
    stop_reason: str | None = None,
    input_tokens: int = 12,
    cache_read_input_tokens: int = 0,
    cache_creation_input_tokens: int = 0,
    output_tokens: int | None = None,
    ping: bool = True,
    stop: bool = True,
) -> list[bytes]:
    """Build an Anthropic Messages stream.

    Order: ``message_start``; a ``ping`` (unless `ping` is false); a thinking
    block (thinking deltas, then a signature delta) when `thinking_chunks` is
    given; a text block when `text_chunks` yields anything; one tool_use
    block per `tool_uses` entry (``input_json_delta`` fragments); a
    ``message_delta`` with ``stop_reason`` (default ``tool_use`` when tools
    were used, else ``end_turn``) and cumulative usage (`output_tokens`
    defaults to the number of delta events); ``message_stop`` unless `stop`
    is false.
    """
    usage = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_creation_input_tokens,
        "cache_read_input_tokens": cache_read_input_tokens,
        "output_tokens": 1,
    }
    message: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    events = [sse_event("message_start", {"type": "message_start", "message": message})]
    if ping:
        events.append(sse_event("ping", {"type": "ping"}))
    index = 0
    deltas = 0

    def block(content_block: dict[str, Any], kind: str, fragments: Iterable[str]) -> int:
        start = {"type": "content_block_start", "index": index, "content_block": content_block}
        events.append(sse_event("content_block_start", start))
        prefix = (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
            b'"delta":{"type":"%b","%b":' % (index, kind.encode(), _FIELD[kind])
        )
        stamped = _stamp(prefix, fragments, b"}}\n\n")
        events.extend(stamped)
        return len(stamped)

    def stop_block() -> None:
        stop_event = {"type": "content_block_stop", "index": index}
        events.append(sse_event("content_block_stop", stop_event))

    if thinking_chunks:
        deltas += block(
            {"type": "thinking", "thinking": "", "signature": ""}, "thinking_delta", thinking_chunks
        )
        delta = {"type": "signature_delta", "signature": signature}
        events.append(
            sse_event(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        )
        stop_block()
        index += 1
    text_start = len(events)
    text_deltas = block({"type": "text", "text": ""}, "text_delta", text_chunks)
    if text_deltas:
        deltas += text_deltas
        stop_block()
        index += 1
    else:
        del events[text_start:]  # no text: no empty text block either
    for tool_id, name, fragments in tool_uses:
        content_block = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
        deltas += block(content_block, "input_json_delta", fragments)
        stop_block()
        index += 1
    if stop_reason is None:
        stop_reason = "tool_use" if tool_uses else "end_turn"
    final_usage = {**usage, "output_tokens": deltas if output_tokens is None else output_tokens}
    message_delta = {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": final_usage,
    }
    events.append(sse_event("message_delta", message_delta))
    if stop:
        events.append(sse_event("message_stop", {"type": "message_stop"}))
    return events


_FIELD: Final = {
    "thinking_delta": b"thinking",
    "text_delta": b"text",
    "input_json_delta": b"partial_json",
}
