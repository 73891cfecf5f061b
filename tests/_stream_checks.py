"""Checks shared by the Gemini and Responses decoder tests: stream invariants and read splits."""

from __future__ import annotations

import random
from collections.abc import Callable

from llmrt import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishError,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)
from llmrt.adapters._http import EventFeed


def check_invariants(chunks: list[StreamChunk]) -> None:
    """The ordering rules every adapter stream obeys; fails the test on the first breach."""
    finishes = [i for i, c in enumerate(chunks) if type(c) is Finish]
    assert finishes == [len(chunks) - 1], "exactly one finish, and it is last"
    usages = [i for i, c in enumerate(chunks) if type(c) is UsageChunk]
    assert len(usages) <= 1 and all(i < finishes[0] for i in usages), "usage precedes finish"
    kinds: dict[int, str] = {}
    ended: set[int] = set()
    parts: dict[int, list[str]] = {}
    for c in chunks:
        if type(c) is BlockStart:
            assert c.index == len(kinds), "indices are assigned in first-seen order"
            kinds[c.index], parts[c.index] = c.block_type, []
        elif type(c) in (TextDelta, ReasoningDelta, ToolCallDelta):
            index: int = c.index  # type: ignore[union-attr]
            assert index in kinds and index not in ended, "a delta belongs to an open block"
            if type(c) is ToolCallDelta:
                assert kinds[index] == "tool-call"
                parts[index].append(c.arguments_delta)
            else:
                assert kinds[index] == ("text" if type(c) is TextDelta else "reasoning")
                assert c.text, "empty deltas are not emitted"  # type: ignore[union-attr]
                parts[index].append(c.text)  # type: ignore[union-attr]
        elif type(c) is BlockEnd:
            assert c.index in kinds and c.index not in ended, "one block-end per open block"
            ended.add(c.index)
            joined = "".join(parts[c.index])
            block = c.block
            if type(block) is TextBlock:
                assert kinds[c.index] == "text" and block.text == joined
            elif type(block) is ReasoningBlock:
                assert kinds[c.index] == "reasoning" and block.text == joined
            else:
                assert type(block) is ToolCallBlock and kinds[c.index] == "tool-call"
                assert block.arguments in (joined, "{}")
    last = chunks[-1]
    if type(last) is Finish and type(last.reason) is not FinishError:
        assert ended == set(kinds), "a successful finish comes after every block-end"


def feed_whole(make: Callable[[], EventFeed], body: bytes) -> list[StreamChunk]:
    """The chunks of ``body`` delivered in one read, then the body's end."""
    feed = make()
    chunks = feed.feed(body)
    return chunks if feed.finished else chunks + feed.end()


def feed_split(make: Callable[[], EventFeed], body: bytes, seed: int) -> list[StreamChunk]:
    """The chunks of ``body`` delivered in random reads of 1 to 7 bytes, then the body's end."""
    rng = random.Random(seed)
    feed = make()
    chunks: list[StreamChunk] = []
    at = 0
    while at < len(body) and not feed.finished:
        n = rng.randint(1, 7)
        chunks += feed.feed(body[at : at + n])
        at += n
    return chunks if feed.finished else chunks + feed.end()
