"""A call's mailbox is bounded by the delta text it buffers, not only by item count."""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio
import trio.testing

import llmrt
from llmrt import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishStop,
    GenerateOptions,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
    user_message,
)
from llmrt.actors._mailbox import MAX_TEXT, Mailbox


def test_large_deltas_fill_the_box_long_before_its_item_count() -> None:
    box = Mailbox(256, max_text=1000)
    big = TextDelta(index=0, text="x" * 400)
    assert box.put_nowait(big)
    assert box.put_nowait(big)
    assert not box.put_nowait(big)  # 1200 characters would be over the bound
    # Chunks without text still fit: the bound is on text only.
    assert box.put_nowait(UsageChunk(usage=llmrt.TokenUsage(input_tokens=1, output_tokens=1)))
    # The count resets when the consumer has taken everything.
    while box.ready:
        box.take()
    assert box.put_nowait(big)


def test_an_item_larger_than_the_bound_still_passes_an_empty_box() -> None:
    box = Mailbox(8, max_text=10)
    huge = ToolCallDelta(index=0, arguments_delta="y" * 100)
    assert box.put_nowait(huge)
    assert not box.put_nowait(TextDelta(index=0, text="z"))
    assert box.take() is huge
    assert box.put_nowait(TextDelta(index=0, text="z"))


def test_small_deltas_are_bounded_by_count_as_before() -> None:
    box = Mailbox(4)
    small = TextDelta(index=0, text="tok")
    assert all(box.put_nowait(small) for _ in range(4))
    assert not box.put_nowait(small)


class Firehose(llmrt.Adapter):
    """Streams 300,000-character deltas for ever, counting what it produced."""

    def __init__(self) -> None:
        self.produced = 0

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        yield BlockStart(index=0, block_type="text")
        while True:
            self.produced += 1
            yield TextDelta(index=0, text="x" * 300_000)
        yield BlockEnd(index=0, block=TextBlock(text=""))  # pragma: no cover
        yield Finish(reason=FinishStop())  # pragma: no cover


async def test_a_slow_consumer_holds_a_bounded_amount_of_text() -> None:
    adapter = Firehose()
    request = GenerateOptions(provider="p", model="m", messages=(user_message("hi"),))
    async with llmrt.open_runtime(channel_size=256) as rt:
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(request) as call:
            first = await call.__anext__()
            assert type(first) is BlockStart
            # The consumer stops reading; the adapter runs until the box is full.
            await trio.testing.wait_all_tasks_blocked()
            produced = adapter.produced
            # At most MAX_TEXT characters (+ the one that found the box over it)
            # wait in the box, not 256 deltas of 300,000 characters (77 M).
            assert produced <= MAX_TEXT // 300_000 + 2
            second = await call.__anext__()
            assert type(second) is TextDelta
            call.abort()
