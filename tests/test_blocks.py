"""The decoders' shared skeleton: open-block tracking, the terminal finish, the empty rule."""

from __future__ import annotations

from llmrt import (
    BlockEnd,
    BlockStart,
    ErrorCode,
    Finish,
    FinishError,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    LlmFailure,
    ReasoningBlock,
    ReasoningDelta,
    ReplayEnvelope,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)
from llmrt.adapters._blocks import EMPTY_MESSAGE, BlockTracker


def test_blocks_open_in_first_seen_order_and_close_before_the_finish() -> None:
    t = BlockTracker(request_id="req-1")
    thought = t.open("reasoning", "r")
    t.reasoning(thought, "think")
    t.reasoning(thought, "")  # empty text is never emitted
    answer = t.open("text", "t")
    t.text(answer, "Hi")
    assert t.get("t") is answer and t.get("nope") is None
    t.close(thought)
    t.close(thought)  # idempotent
    t.reasoning(thought, "late")  # a closed block takes no more deltas
    usage = TokenUsage(input_tokens=1, output_tokens=2)
    envelope = ReplayEnvelope(response={"id": "x"}, blocks=t.replay_blocks())
    t.finish(FinishStop(), usage=usage, replay_state=envelope)
    assert t.take() == [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="think"),
        BlockStart(index=1, block_type="text"),
        TextDelta(index=1, text="Hi"),
        BlockEnd(index=0, block=ReasoningBlock(text="think")),
        BlockEnd(index=1, block=TextBlock(text="Hi")),
        UsageChunk(usage=usage),
        Finish(reason=FinishStop(), replay_state=envelope),
    ]
    assert t.done and t.take() == []
    t.text(answer, "after the finish")
    t.finish(FinishStop())
    t.fail(ErrorCode.NETWORK, "too late")
    assert t.take() == []


def test_a_stop_without_blocks_is_an_empty_response() -> None:
    t = BlockTracker(request_id="req-2")
    t.finish(FinishStop(), replay_state=ReplayEnvelope(response={}))
    (finish,) = t.take()
    assert finish == Finish(
        reason=FinishError(
            failure=LlmFailure(
                message=EMPTY_MESSAGE, code=ErrorCode.EMPTY_RESPONSE, request_id="req-2"
            )
        )
    )


def test_other_finishes_without_blocks_stay_as_they_are() -> None:
    for reason in (FinishToolCalls(), FinishMaxTokens()):
        t = BlockTracker()
        t.finish(reason)
        assert t.take() == [Finish(reason=reason)]


def test_tool_call_fragments_carry_the_id_always_and_the_name_once() -> None:
    t = BlockTracker(empty_arguments="{}")
    call = t.open("tool-call", ("tool", 0))
    t.tool_call(call, call_id="c1", name="now")
    t.tool_call(call, '{"a"')
    t.tool_call(call, "")  # nothing new: nothing emitted
    t.tool_call(call, ": 1}", call_id="other", name="other")  # first values win
    empty = t.open("tool-call")
    t.tool_call(empty, call_id="c2", name="ping")
    t.finish(FinishToolCalls())
    chunks = t.take()
    deltas = [c for c in chunks if type(c) is ToolCallDelta]
    assert [(d.id, d.name, d.arguments_delta) for d in deltas] == [
        ("c1", "now", ""),
        ("c1", None, '{"a"'),
        ("c1", None, ": 1}"),
        ("c2", "ping", ""),
    ]
    ends = [c.block for c in chunks if type(c) is BlockEnd]
    assert ends == [
        ToolCallBlock(id="c1", name="now", arguments='{"a": 1}'),
        ToolCallBlock(id="c2", name="ping", arguments="{}"),
    ]


def test_the_call_id_on_the_first_fragment_only_when_asked() -> None:
    t = BlockTracker(id_on_every_fragment=False)
    call = t.open("tool-call")
    t.tool_call(call, "{", call_id="c1", name="f")
    t.tool_call(call, "}")
    deltas = [c for c in t.take() if type(c) is ToolCallDelta]
    assert [(d.id, d.name) for d in deltas] == [("c1", "f"), (None, None)]


def test_failures_end_at_once_and_keep_a_request_id() -> None:
    t = BlockTracker(request_id="req-3")
    t.text(t.open("text"), "partial")
    t.fail_with(LlmFailure(message="boom", code=ErrorCode.OVERLOADED))
    chunks = t.take()
    assert type(chunks[-1]) is Finish
    assert not any(type(c) is BlockEnd for c in chunks), "an error ends without block-ends"
    reason = chunks[-1].reason
    assert type(reason) is FinishError and reason.failure.request_id == "req-3"
    ended = BlockTracker()
    ended.end("[DONE]")
    (finish,) = ended.take()
    assert type(finish) is Finish and type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.NETWORK
    assert "[DONE]" in finish.reason.failure.message


def test_a_long_block_keeps_its_fragments_joined_in_runs_and_its_text_whole() -> None:
    from llmrt.adapters._blocks import JOIN_EVERY, Block

    block = Block(0, "text")
    fragments = [f"t{i} " for i in range(JOIN_EVERY * 5 + 7)]
    for fragment in fragments:
        block.add(fragment)
    assert block.text == "".join(fragments)
    # Five joined runs and the seven fragments since the last one.
    assert len(block.parts) == 5 + 7
    assert block.parts[0] == "".join(fragments[:JOIN_EVERY])
