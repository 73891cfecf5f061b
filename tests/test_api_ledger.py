"""Irregular llmrt streams still give well-formed API events (the `Ledger` under every encoder).

llmrt's chunk rules allow deltas without a block start, a tool call's id and
name after its first arguments, a ``block-end`` with more than the deltas (or
all of the content), blocks left open at the finish. Each case below goes
through an encoder, and the events are checked as a client reads them.
"""

from __future__ import annotations

from typing import Any

from _api_support import encode_all, payloads, sse_events
from _sdks import type_adapter

from llmrt import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    ImageBlock,
    ReasoningBlock,
    ReasoningDelta,
    ReplayEnvelope,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
)
from llmrt.actors.gateway.api import decode_chat, decode_messages, decode_responses

STOP = Finish(reason=FinishStop())


def messages_events(script: list[Any]) -> list[dict[str, Any]]:
    call = decode_messages(
        b'{"model":"d/m","max_tokens":9,"messages":[{"role":"user","content":"x"}]}'
    )
    sent = encode_all(call.encoder(message_id="msg_1"), script)
    for _, data in sse_events(sent):
        type_adapter("anthropic.types.RawMessageStreamEvent").validate_json(data, strict=True)
    return payloads(sent)[1:]  # after message_start


def chat_deltas(script: list[Any]) -> list[dict[str, Any]]:
    call = decode_chat(b'{"model":"d/m","messages":[{"role":"user","content":"x"}]}')
    events = payloads(encode_all(call.encoder(), script))
    return [e["choices"][0]["delta"] for e in events if e != "[DONE]" and e.get("choices")]


def responses_types(script: list[Any]) -> list[tuple[str, Any]]:
    call = decode_responses(b'{"model":"d/m","input":"x"}')
    out = []
    for event in payloads(encode_all(call.encoder(response_id="resp_1"), script))[2:]:
        detail = event.get("delta", event.get("item", {}).get("status"))
        out.append((event["type"], detail))
    return out


def test_deltas_without_a_block_start_open_their_block() -> None:
    script = [TextDelta(index=3, text="Hi"), STOP]
    assert messages_events(script)[:3] == [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
    ]


def test_empty_deltas_open_nothing() -> None:
    script = [TextDelta(index=0, text=""), TextDelta(index=0, text="a"), STOP]
    assert chat_deltas(script) == [{"role": "assistant", "content": "a"}, {}]


def test_a_tool_call_is_announced_once_its_id_and_name_are_known() -> None:
    script = [
        BlockStart(index=0, block_type="tool-call"),
        ToolCallDelta(index=0, arguments_delta='{"a"'),
        ToolCallDelta(index=0, id="call_9", arguments_delta=": "),
        ToolCallDelta(index=0, name="f", arguments_delta="1"),
        ToolCallDelta(index=0, arguments_delta="}"),
        BlockEnd(index=0, block=ToolCallBlock(id="call_9", name="f", arguments='{"a": 1}')),
        Finish(reason=FinishToolCalls()),
    ]
    first = {
        "index": 0,
        "id": "call_9",
        "type": "function",
        "function": {"name": "f", "arguments": ""},
    }
    assert chat_deltas(script) == [
        {"role": "assistant", "tool_calls": [first]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]},
        {},
    ]


def test_a_block_end_adds_what_the_deltas_lacked_or_the_whole_block() -> None:
    script = [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="Hel"),
        BlockEnd(index=0, block=TextBlock(text="Hello")),
        # Blocks that arrive whole: no start, no deltas.
        BlockEnd(index=1, block=ReasoningBlock(text="thought")),
        BlockEnd(index=2, block=ToolCallBlock(id="c", name="f", arguments="{}")),
        Finish(reason=FinishToolCalls()),
    ]
    assert chat_deltas(script) == [
        {"role": "assistant", "content": "Hel"},
        {"content": "lo"},
        {"reasoning_content": "thought"},
        {"tool_calls": [{"index": 0, "id": "c", "type": "function",
                         "function": {"name": "f", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
        {},
    ]  # fmt: skip


def test_a_block_end_that_contradicts_its_deltas_leaves_the_deltas_standing() -> None:
    script = [
        TextDelta(index=0, text="abc"),
        BlockEnd(index=0, block=TextBlock(text="xyz")),
        TextDelta(index=0, text="late"),  # after its end: ignored
        STOP,
    ]
    assert chat_deltas(script) == [{"role": "assistant", "content": "abc"}, {}]


def test_a_delta_of_the_wrong_kind_is_ignored() -> None:
    script = [TextDelta(index=0, text="a"), ReasoningDelta(index=0, text="b"), STOP]
    assert chat_deltas(script) == [{"role": "assistant", "content": "a"}, {}]


def test_blocks_open_at_the_finish_are_closed_first() -> None:
    script = [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="cut"),
        Finish(reason=FinishMaxTokens()),
    ]
    assert [e["type"] for e in messages_events(script)] == [
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert responses_types(script)[-4:] == [
        ("response.output_text.done", None),
        ("response.content_part.done", None),
        ("response.output_item.done", "incomplete"),  # cut short by the finish
        ("response.incomplete", None),
    ]


def test_other_blocks_keep_their_place_for_replay_entries() -> None:
    # An image block has no form in these streams, but its replay entry is counted.
    script = [
        BlockStart(index=0, block_type="image"),
        BlockEnd(index=0, block=ImageBlock(media_type="image/png", data="aGk=")),
        BlockStart(index=1, block_type="reasoning"),
        ReasoningDelta(index=1, text="hm"),
        BlockEnd(index=1, block=ReasoningBlock(text="hm")),
        Finish(reason=FinishStop(), replay_state=ReplayEnvelope(blocks=(None, {"signature": "s"}))),
    ]
    events = messages_events(script)
    assert events[0]["content_block"]["type"] == "thinking" and events[0]["index"] == 0
    signature = [e for e in events if e.get("delta", {}).get("type") == "signature_delta"]
    assert signature == [
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "s"},
        }
    ]


def test_an_envelope_that_does_not_fit_the_blocks_is_not_used() -> None:
    script = [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="hm"),
        BlockEnd(index=0, block=ReasoningBlock(text="hm")),
        Finish(reason=FinishStop(), replay_state=ReplayEnvelope(blocks=({"signature": "s"}, None))),
    ]
    events = messages_events(script)
    assert not [e for e in events if e.get("delta", {}).get("type") == "signature_delta"]
