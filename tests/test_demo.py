"""The embedded demo model: what it streams, how it paces, how it stops."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing
from conftest import collect, finish_reason, make_options

import llmrt
from llmrt import (
    AbortController,
    BlockAssembler,
    BlockEnd,
    BlockStart,
    Finish,
    FinishAborted,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolSchema,
    UsageChunk,
)
from llmrt.adapters.demo import DemoAdapter

TOOL = ToolSchema(name="lookup", description="Look it up.", parameters={"type": "object"})


def blocks_of(chunks: list[StreamChunk]) -> tuple[object, ...]:
    assembler = BlockAssembler()
    for chunk in chunks:
        if not isinstance(chunk, UsageChunk | Finish):
            assembler.push(chunk)
    return assembler.blocks()


async def demo_chunks(adapter: DemoAdapter | None = None, **kw: object) -> list[StreamChunk]:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], adapter or DemoAdapter())
        return await collect(rt.stream(make_options("demo", "demo-1", **kw)))


async def test_reasoning_then_text_quoting_the_prompt_then_usage_and_stop() -> None:
    chunks = await demo_chunks(prompt="tell me a story")
    assert isinstance(finish_reason(chunks), FinishStop)
    reasoning, text = blocks_of(chunks)
    assert isinstance(reasoning, ReasoningBlock) and "4 words" in reasoning.text
    assert isinstance(text, TextBlock) and '"tell me a story"' in text.text
    # Every block's deltas join back to the block its BlockEnd carries.
    for index, block in enumerate((reasoning, text)):
        deltas = [
            c.text for c in chunks if isinstance(c, TextDelta | ReasoningDelta) and c.index == index
        ]
        assert len(deltas) > 1 and "".join(deltas) == block.text
    assert isinstance(chunks[-2], UsageChunk)
    usage = chunks[-2].usage
    assert usage.input_tokens == 4
    assert usage.reasoning_tokens == len(reasoning.text.split())
    assert usage.output_tokens == len(reasoning.text.split()) + len(text.text.split())


async def test_same_request_same_chunks() -> None:
    first = await demo_chunks(prompt="same input")
    second = await demo_chunks(prompt="same input")
    other = await demo_chunks(prompt="other input")
    assert first == second
    assert first != other


async def test_offered_tools_get_one_call_of_the_first() -> None:
    chunks = await demo_chunks(prompt="find it", tools=(TOOL,))
    assert isinstance(finish_reason(chunks), FinishToolCalls)
    call = blocks_of(chunks)[-1]
    assert isinstance(call, ToolCallBlock) and call.name == "lookup"
    assert json.loads(call.arguments) == {"input": "find it"}
    starts = [c for c in chunks if isinstance(c, BlockStart)]
    assert [s.block_type for s in starts] == ["reasoning", "text", "tool-call"]


async def test_max_tokens_cuts_the_answer_with_a_max_tokens_finish() -> None:
    chunks = await demo_chunks(prompt="hello", max_tokens=5, tools=(TOOL,))
    assert isinstance(finish_reason(chunks), FinishMaxTokens)
    deltas = [c for c in chunks if isinstance(c, TextDelta | ReasoningDelta)]
    assert len(deltas) == 5
    # The cut block still ends, with exactly what was sent; no tool call follows.
    ends = [c for c in chunks if isinstance(c, BlockEnd)]
    assert len(ends) == 1 and isinstance(ends[0].block, ReasoningBlock)
    assert ends[0].block.text == "".join(d.text for d in deltas)
    usage = chunks[-2]
    assert isinstance(usage, UsageChunk) and usage.usage.output_tokens == 5


async def test_higher_effort_thinks_longer() -> None:
    low = blocks_of(await demo_chunks(reasoning_effort="low"))[0]
    high = blocks_of(await demo_chunks(reasoning_effort="high"))[0]
    assert isinstance(low, ReasoningBlock) and isinstance(high, ReasoningBlock)
    assert len(high.text) > len(low.text)


async def test_tokens_are_paced_at_the_configured_rate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stamps: list[float] = []
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter(tokens_per_second=4))
        async with rt.stream(make_options("demo", "demo-1", prompt="pace me")) as call:
            start = trio.current_time()
            async for chunk in call:
                if isinstance(chunk, TextDelta | ReasoningDelta):
                    stamps.append(trio.current_time() - start)
    assert len(stamps) > 10
    assert stamps == [0.25 * (n + 1) for n in range(len(stamps))]


async def test_paced_streams_of_two_rates_interleave_on_one_timer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ends: dict[str, float] = {}
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["fast"], DemoAdapter(tokens_per_second=10))
        await rt.register_adapter(["slow"], DemoAdapter(tokens_per_second=2))

        async def run(provider: str) -> None:
            chunks = await collect(rt.stream(make_options(provider, "demo-1", max_tokens=6)))
            assert isinstance(finish_reason(chunks), FinishMaxTokens)
            ends[provider] = trio.current_time()

        async with trio.open_nursery() as nursery:
            start = trio.current_time()
            for provider in ("slow", "fast", "slow", "fast"):
                nursery.start_soon(run, provider)
    assert ends["fast"] - start == pytest.approx(6 * 0.1)
    assert ends["slow"] - start == pytest.approx(6 * 0.5)


async def test_abort_while_paced_ends_the_call_and_the_timer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ctl = AbortController()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter(tokens_per_second=1))
        async with rt.stream(make_options("demo", "demo-1"), signal=ctl.signal) as call:
            chunks: list[StreamChunk] = []
            async for chunk in call:
                chunks.append(chunk)
                if len(chunks) == 3:
                    assert "llmrt.demo-pacer" in task_names()
                    ctl.abort("enough")
        assert isinstance(finish_reason(chunks), FinishAborted)
        # The aborted wait left its entry on the timer's heap; once it comes due
        # the timer has nothing left to wait for and ends: no task outlives the calls.
        await trio.sleep(2)
        assert "llmrt.demo-pacer" not in task_names()


def task_names() -> list[str]:
    """The name of every task of this trio run, system tasks included."""
    tasks: list[trio.lowlevel.Task] = []
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        tasks.append(task)
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return [task.name for task in tasks]
