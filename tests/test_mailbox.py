"""A call's mailbox is bounded by the delta text it buffers, not only by item count."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
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


# ---- the trio channel interface ------------------------------------------------------------


def test_the_mailbox_is_a_trio_send_and_receive_channel() -> None:
    box = Mailbox(4)
    assert isinstance(box, trio.abc.SendChannel)
    assert isinstance(box, trio.abc.ReceiveChannel)
    assert isinstance(box, trio.abc.Channel)
    assert not hasattr(box, "__dict__")  # the ABCs keep it a slotted object


async def test_send_and_receive_behave_as_a_memory_channels() -> None:
    box = Mailbox(2)
    got: list[int] = []

    async def consume() -> None:
        async for item in box:  # ReceiveChannel's iteration: ends at EndOfChannel
            got.append(item)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            for n in range(10):
                await box.send(n)  # waits while the box holds two
            box.close()
    assert got == list(range(10))
    with pytest.raises(trio.EndOfChannel):
        box.receive_nowait()
    with pytest.raises(trio.ClosedResourceError):
        box.send_nowait(11)


async def test_nowait_calls_raise_would_block_and_a_gone_consumer_breaks_sends() -> None:
    box = Mailbox(1)
    with pytest.raises(trio.WouldBlock):
        box.receive_nowait()
    box.send_nowait("a")
    with pytest.raises(trio.WouldBlock):
        box.send_nowait("b")
    assert box.receive_nowait() == "a"
    box.leave()
    with pytest.raises(trio.BrokenResourceError):
        box.send_nowait("c")
    with pytest.raises(trio.BrokenResourceError):
        await box.send("c")
    with pytest.raises(trio.ClosedResourceError):
        await box.receive()


async def test_a_parked_receive_is_cancellable_and_woken_by_close() -> None:
    box = Mailbox(1)
    with trio.move_on_after(0.01) as scope:
        await box.receive()
    assert scope.cancelled_caught
    ended: list[bool] = []

    async def wait_end() -> None:
        try:
            await box.receive()
        except trio.EndOfChannel:
            ended.append(True)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_end)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await box.receive()
            await box.aclose()
    assert ended == [True]
