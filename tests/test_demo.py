"""The embedded demo model: what it streams, how it paces, how it stops."""

from __future__ import annotations

import json
import random

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
from llmrt.adapters.demo import DemoAdapter, _Pacer

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


async def test_abort_while_paced_leaves_the_other_streams_paced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Aborting streams (the one whose sleep wakes the others among them) costs
    the rest neither a token nor a moment, and no task is left behind."""
    ends: dict[int, float] = {}
    aborted: list[int] = []
    ctl = AbortController()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter(tokens_per_second=4))
        before = set(task_names())

        async def run(n: int) -> None:
            signal = ctl.signal if n % 2 == 0 else None
            chunks = await collect(
                rt.stream(make_options("demo", "demo-1", max_tokens=8), signal=signal)
            )
            if isinstance(finish_reason(chunks), FinishAborted):
                aborted.append(n)
            else:
                assert isinstance(finish_reason(chunks), FinishMaxTokens)
                deltas = [c for c in chunks if isinstance(c, TextDelta | ReasoningDelta)]
                assert len(deltas) == 8
                ends[n] = trio.current_time()

        async with trio.open_nursery() as nursery:
            start = trio.current_time()
            for n in range(6):
                nursery.start_soon(run, n)
            await trio.sleep(0.6)  # between the second and the third token
            ctl.abort("enough")
        assert sorted(aborted) == [0, 2, 4]
        assert ends == {n: pytest.approx(start + 8 * 0.25) for n in (1, 3, 5)}
        assert set(task_names()) == before


async def test_a_stream_that_starts_later_keeps_its_own_pace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stamps: dict[str, list[float]] = {"early": [], "late": []}
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter(tokens_per_second=2))

        async def run(name: str) -> None:
            async with rt.stream(make_options("demo", "demo-1", max_tokens=4)) as call:
                async for chunk in call:
                    if isinstance(chunk, TextDelta | ReasoningDelta):
                        stamps[name].append(trio.current_time())

        async with trio.open_nursery() as nursery:
            start = trio.current_time()
            nursery.start_soon(run, "early")
            await trio.sleep(0.2)
            nursery.start_soon(run, "late")
    assert stamps["early"] == pytest.approx([start + 0.5 * (n + 1) for n in range(4)])
    assert stamps["late"] == pytest.approx([start + 0.2 + 0.5 * (n + 1) for n in range(4)])


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


# ---- the pacer on its own: one sleeping stream leads, the lead passes on -------------------


async def sleep_on(
    pacer: _Pacer, seconds: float, scope: trio.CancelScope, woke: dict[int, float], key: int
) -> None:
    with scope:
        await pacer.sleep(seconds)
        woke[key] = trio.current_time()


async def test_pacer_hands_the_lead_on_when_the_leader_is_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pacer = _Pacer()
    woke: dict[int, float] = {}
    leader = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        nursery.start_soon(sleep_on, pacer, 1.0, leader, woke, 0)
        await trio.testing.wait_all_tasks_blocked()  # the first sleeper leads
        nursery.start_soon(sleep_on, pacer, 2.0, trio.CancelScope(), woke, 1)
        nursery.start_soon(sleep_on, pacer, 0.5, trio.CancelScope(), woke, 2)
        await trio.testing.wait_all_tasks_blocked()
        leader.cancel()
    assert woke == {1: start + 2.0, 2: start + 0.5}
    assert pacer._leader is None and pacer._sleep is None


async def test_pacer_wakes_every_sleeper_at_its_own_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rng = random.Random(7)
    pacer = _Pacer()
    woke: dict[int, float] = {}
    due: dict[int, float] = {}
    scopes = [trio.CancelScope() for _ in range(60)]
    cancelled: set[int] = set()
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        for key, scope in enumerate(scopes):
            # Sleepers arrive over time, some due before the current leader.
            await trio.sleep(rng.choice([0, 0, 0.05, 0.3]))
            seconds = rng.choice([0.1, 0.25, 0.5, 1.0, 3.0])
            due[key] = trio.current_time() + seconds
            nursery.start_soon(sleep_on, pacer, seconds, scope, woke, key)
            if rng.random() < 0.2 and key > 0:
                victim = rng.randrange(key)
                if victim not in woke:
                    scopes[victim].cancel()
                    cancelled.add(victim)
    assert woke == {k: pytest.approx(t) for k, t in due.items() if k not in cancelled}
    assert len(woke) + len(cancelled) == len(scopes) and start < min(woke.values())
    assert pacer._heap == [] and pacer._leader is None
