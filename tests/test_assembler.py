"""`BlockAssembler`: one example test per assembly rule."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from llmrt import (
    BlockAssembler,
    BlockEnd,
    BlockStart,
    ErrorCode,
    Finish,
    FinishError,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    ImageBlock,
    LlmError,
    LlmFailure,
    ModelSource,
    ReasoningBlock,
    ReasoningDelta,
    ReplayEnvelope,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
    decode_chunk,
)


def assemble(chunks: Iterable[StreamChunk]) -> BlockAssembler:
    assembler = BlockAssembler()
    for chunk in chunks:
        assembler.push(chunk)
    return assembler


def test_empty_stream() -> None:
    a = BlockAssembler()
    assert a.blocks() == ()
    assert a.usage is None
    assert a.finish == FinishStop()
    assert a.replay_state is None


def test_blocks_come_out_in_first_seen_index_order() -> None:
    a = assemble(
        [
            ReasoningDelta(index=5, text="think"),
            TextDelta(index=2, text="a"),
            BlockEnd(index=9, block=TextBlock(text="ended without start")),
            ToolCallDelta(index=0, id="c", name="n", arguments_delta="{}"),
            TextDelta(index=2, text="b"),
            ReasoningDelta(index=5, text="ing"),
        ]
    )
    assert a.blocks() == (
        ReasoningBlock(text="thinking"),
        TextBlock(text="ab"),
        TextBlock(text="ended without start"),
        ToolCallBlock(id="c", name="n", arguments="{}"),
    )


def test_block_start_fixes_the_position() -> None:
    a = assemble(
        [
            BlockStart(index=1, block_type="text"),
            BlockStart(index=0, block_type="reasoning"),
            ReasoningDelta(index=0, text="r"),
            TextDelta(index=1, text="t"),
        ]
    )
    assert a.blocks() == (TextBlock(text="t"), ReasoningBlock(text="r"))


def test_block_start_without_deltas_gives_an_empty_block() -> None:
    a = assemble(
        [
            BlockStart(index=0, block_type="text"),
            BlockStart(index=1, block_type="reasoning"),
            BlockStart(index=2, block_type="tool-call"),
        ]
    )
    assert a.blocks() == (
        TextBlock(text=""),
        ReasoningBlock(text=""),
        ToolCallBlock(id="", name="", arguments=""),
    )


def test_deltas_for_a_closed_index_are_ignored() -> None:
    a = assemble(
        [
            TextDelta(index=0, text="hel"),
            BlockEnd(index=0, block=TextBlock(text="hello")),
            TextDelta(index=0, text=" again"),
            BlockEnd(index=0, block=TextBlock(text="replaced?")),
            BlockStart(index=0, block_type="reasoning"),
        ]
    )
    assert a.blocks() == (TextBlock(text="hello"),)


def test_delta_of_the_wrong_kind_is_ignored() -> None:
    a = assemble(
        [
            BlockStart(index=0, block_type="text"),
            TextDelta(index=0, text="visible"),
            ReasoningDelta(index=0, text="not mine"),
            ToolCallDelta(index=0, id="c", arguments_delta="{}"),
            ReasoningDelta(index=1, text="r"),
            TextDelta(index=1, text="not mine either"),
            ToolCallDelta(index=2, id="c", name="n", arguments_delta="{"),
            TextDelta(index=2, text="x"),
            ToolCallDelta(index=2, arguments_delta="}"),
        ]
    )
    assert a.blocks() == (
        TextBlock(text="visible"),
        ReasoningBlock(text="r"),
        ToolCallBlock(id="c", name="n", arguments="{}"),
    )


def test_open_text_and_reasoning_blocks_assemble_from_deltas() -> None:
    a = assemble(
        [TextDelta(index=0, text=t) for t in ["Hel", "", "lo, ", "wörld ✓"]]
        + [ReasoningDelta(index=1, text=t) for t in ["a", "b"]]
    )
    assert a.blocks() == (TextBlock(text="Hello, wörld ✓"), ReasoningBlock(text="ab"))


def test_tool_call_id_and_name_come_from_the_first_delta_that_has_them() -> None:
    a = assemble(
        [
            ToolCallDelta(index=0, arguments_delta='{"a"'),
            ToolCallDelta(index=0, id="call_1", arguments_delta=":"),
            ToolCallDelta(index=0, id="call_2", name="search", arguments_delta="1"),
            ToolCallDelta(index=0, name="other", arguments_delta="}"),
        ]
    )
    assert a.blocks() == (ToolCallBlock(id="call_1", name="search", arguments='{"a":1}'),)


def test_tool_call_arguments_are_concatenated_raw_never_parsed() -> None:
    fragments = ['{"q": "tr', 'io", ', "oops not json", " \\u00e9 ", '"x": ']
    a = assemble(
        [ToolCallDelta(index=0, id="c", name="n", arguments_delta=fragments[0])]
        + [ToolCallDelta(index=0, arguments_delta=f) for f in fragments[1:]]
    )
    (block,) = a.blocks()
    assert isinstance(block, ToolCallBlock)
    assert block.arguments == "".join(fragments)


def test_tool_call_without_id_or_name_assembles_with_empty_strings() -> None:
    a = assemble([ToolCallDelta(index=3, arguments_delta="{}")])
    assert a.blocks() == (ToolCallBlock(id="", name="", arguments="{}"),)


def test_block_end_is_authoritative_over_deltas() -> None:
    a = assemble(
        [
            TextDelta(index=0, text="partial"),
            ToolCallDelta(index=1, id="c", name="n", arguments_delta='{"broken'),
            BlockEnd(index=0, block=TextBlock(text="the real text")),
            BlockEnd(index=1, block=ToolCallBlock(id="c", name="n", arguments='{"fixed":1}')),
        ]
    )
    assert a.blocks() == (
        TextBlock(text="the real text"),
        ToolCallBlock(id="c", name="n", arguments='{"fixed":1}'),
    )


def test_block_end_may_change_the_block_type() -> None:
    image = ImageBlock(media_type="image/png", data="AA==")
    a = assemble(
        [
            BlockStart(index=0, block_type="text"),
            TextDelta(index=0, text="x"),
            BlockEnd(index=0, block=image),
        ]
    )
    assert a.blocks() == (image,)


def _truncated_stream(envelope: ReplayEnvelope | None) -> list[StreamChunk]:
    return [
        ReasoningDelta(index=0, text="r"),
        ToolCallDelta(index=1, id="c1", name="a", arguments_delta="{}"),
        TextDelta(index=2, text="t"),
        BlockEnd(index=3, block=ToolCallBlock(id="c2", name="b", arguments='{"cut')),
        Finish(reason=FinishMaxTokens(), replay_state=envelope),
    ]


def test_max_tokens_drops_tool_calls_and_prunes_the_envelope() -> None:
    envelope = ReplayEnvelope(response={"id": "r"}, blocks=("e0", "e1", {"e": 2}, "e3"))
    a = assemble(_truncated_stream(envelope))
    assert a.finish == FinishMaxTokens()
    assert a.blocks() == (ReasoningBlock(text="r"), TextBlock(text="t"))
    assert a.replay_state == ReplayEnvelope(response={"id": "r"}, blocks=("e0", {"e": 2}))
    message = a.message()
    assert message.content == a.blocks()


@pytest.mark.parametrize("finish", [FinishStop(), FinishToolCalls()])
def test_other_finishes_keep_tool_calls_and_the_envelope(
    finish: FinishStop | FinishToolCalls,
) -> None:
    envelope = ReplayEnvelope(response=1, blocks=("e0", "e1"))
    a = assemble(
        [
            TextDelta(index=0, text="t"),
            ToolCallDelta(index=1, id="c", name="n", arguments_delta="{}"),
            Finish(reason=finish, replay_state=envelope),
        ]
    )
    assert a.blocks() == (TextBlock(text="t"), ToolCallBlock(id="c", name="n", arguments="{}"))
    assert a.replay_state == envelope
    assert a.finish == finish


@pytest.mark.parametrize("entries", [(), ("only-one",), ("e0", "e2"), ("a", "b", "c", "d", "e")])
def test_mismatched_envelope_length_is_discarded(entries: tuple[str, ...]) -> None:
    # Four blocks are emitted, two survive the truncation: entries are counted
    # against the emitted blocks, so two entries do not match either.
    a = assemble(_truncated_stream(ReplayEnvelope(response="x", blocks=entries)))
    assert len(a.blocks()) == 2
    assert a.replay_state is None


@pytest.mark.parametrize("entries", [(), ("one",), ("a", "b", "c")])
def test_mismatched_envelope_length_is_discarded_on_stop(entries: tuple[str, ...]) -> None:
    a = assemble(
        [
            TextDelta(index=0, text="t"),
            ReasoningDelta(index=1, text="r"),
            Finish(reason=FinishStop(), replay_state=ReplayEnvelope(blocks=entries)),
        ]
    )
    assert a.replay_state is None


def test_envelope_without_blocks_passes_through() -> None:
    envelope = ReplayEnvelope(response={"signature": "abc"})
    a = assemble(_truncated_stream(envelope))
    assert a.replay_state == envelope
    assert len(a.blocks()) == 2


def test_no_finish_means_stop() -> None:
    a = assemble(
        [
            TextDelta(index=0, text="t"),
            UsageChunk(usage=TokenUsage(input_tokens=1, output_tokens=1)),
        ]
    )
    assert a.finish == FinishStop()
    assert a.replay_state is None


def test_error_finish_is_reported() -> None:
    failure = LlmFailure(message="boom", code=ErrorCode.SERVER_ERROR)
    a = assemble([TextDelta(index=0, text="partial"), Finish(reason=FinishError(failure=failure))])
    assert a.finish == FinishError(failure=failure)
    assert a.blocks() == (TextBlock(text="partial"),)


def test_usage_is_none_until_a_usage_chunk_then_the_last_one() -> None:
    a = BlockAssembler()
    a.push(TextDelta(index=0, text="t"))
    assert a.usage is None
    first = TokenUsage(input_tokens=1, output_tokens=2)
    a.push(UsageChunk(usage=first))
    assert a.usage == first
    last = TokenUsage(input_tokens=3, output_tokens=4, cache_read_tokens=5)
    a.push(UsageChunk(usage=last))
    assert a.usage == last


def test_unknown_block_type_never_closed_raises_protocol() -> None:
    a = assemble(
        [
            TextDelta(index=0, text="t"),
            decode_chunk(b'{"type":"block-start","index":1,"blockType":"audio"}'),
        ]
    )
    with pytest.raises(LlmError) as info:
        a.blocks()
    assert info.value.code == ErrorCode.PROTOCOL
    assert "audio" in str(info.value)
    with pytest.raises(LlmError):
        a.message()


def test_unknown_block_type_closed_by_block_end_works() -> None:
    audio = ImageBlock(media_type="audio/wav", data="UklGRg==")
    a = assemble(
        [
            BlockStart(index=0, block_type="audio"),
            TextDelta(index=0, text="ignored"),
            BlockEnd(index=0, block=audio),
            TextDelta(index=1, text="after"),
        ]
    )
    assert a.blocks() == (audio, TextBlock(text="after"))


def test_chunks_after_finish_are_ignored() -> None:
    envelope = ReplayEnvelope(blocks=("e0",))
    a = assemble(
        [
            TextDelta(index=0, text="done"),
            Finish(reason=FinishStop(), replay_state=envelope),
            TextDelta(index=0, text=" more"),
            TextDelta(index=1, text="new block"),
            BlockEnd(index=0, block=TextBlock(text="late")),
            UsageChunk(usage=TokenUsage(input_tokens=1, output_tokens=1)),
            Finish(reason=FinishMaxTokens()),
        ]
    )
    assert a.blocks() == (TextBlock(text="done"),)
    assert a.usage is None
    assert a.finish == FinishStop()
    assert a.replay_state == envelope


def test_message_is_an_assistant_message_with_a_fresh_id() -> None:
    chunks: list[StreamChunk] = [
        ReasoningDelta(index=0, text="r"),
        TextDelta(index=1, text="answer"),
        ToolCallDelta(index=2, id="c", name="n", arguments_delta="{}"),
    ]
    a = assemble(chunks)
    source = ModelSource(provider="deepseek", model="deepseek-reasoner")
    message = a.message(source=source)
    assert message.role == "assistant"
    assert message.source == source
    assert message.content == a.blocks()
    assert message.content == (
        ReasoningBlock(text="r"),
        TextBlock(text="answer"),
        ToolCallBlock(id="c", name="n", arguments="{}"),
    )
    assert type(message.content) is tuple
    assert message.id.startswith("msg_")
    assert a.message(source=source).id != message.id
    default = a.message()
    assert default.role == "assistant"
    assert default.content == message.content


def test_blocks_can_be_read_mid_stream() -> None:
    a = BlockAssembler()
    a.push(TextDelta(index=0, text="a"))
    assert a.blocks() == (TextBlock(text="a"),)
    a.push(TextDelta(index=0, text="b"))
    assert a.blocks() == (TextBlock(text="ab"),)
