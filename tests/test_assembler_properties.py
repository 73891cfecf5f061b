"""`BlockAssembler` properties: any interleaving of well-formed block streams reassembles.

Each intended block is cut into deltas at random boundaries, optionally
bracketed by ``block-start`` / ``block-end``; the per-block sequences are then
interleaved at random (each keeps its own order). Whatever the interleaving,
the assembler must give back exactly the intended blocks in first-seen order.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from llmrt import (
    BlockAssembler,
    BlockEnd,
    BlockStart,
    ContentBlock,
    Finish,
    FinishMaxTokens,
    FinishReason,
    FinishStop,
    FinishToolCalls,
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
)

#: Derandomized (and no example database) so every run checks the same examples.
SETTINGS = settings(max_examples=examples(200), deadline=None, derandomize=True, database=None)

intended_blocks = st.one_of(
    st.builds(TextBlock, text=st.text()),
    st.builds(ReasoningBlock, text=st.text()),
    st.builds(ToolCallBlock, id=st.text(), name=st.text(), arguments=st.text()),
)


@dataclass(frozen=True)
class Stream:
    """A generated stream and what it should assemble to."""

    #: The intended blocks, in the order their first chunk appears in `chunks`.
    blocks: tuple[ContentBlock, ...]
    chunks: tuple[StreamChunk, ...]


@st.composite
def fragments(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` cut at random boundaries (empty fragments allowed); at least one fragment."""
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def block_chunks(draw: st.DrawFn, block: ContentBlock, index: int) -> list[StreamChunk]:
    """The chunk sequence of one block: optional start, deltas, optional end."""
    chunks: list[StreamChunk] = []
    if isinstance(block, TextBlock):
        tag = "text"
        chunks += [TextDelta(index=index, text=f) for f in draw(fragments(block.text))]
    elif isinstance(block, ReasoningBlock):
        tag = "reasoning"
        chunks += [ReasoningDelta(index=index, text=f) for f in draw(fragments(block.text))]
    else:
        assert isinstance(block, ToolCallBlock)
        tag = "tool-call"
        parts = draw(fragments(block.arguments))
        # id and name arrive on some delta (not necessarily the first); the
        # deltas before it carry none.
        id_at = draw(st.integers(0, len(parts) - 1))
        name_at = draw(st.integers(0, len(parts) - 1))
        chunks += [
            ToolCallDelta(
                index=index,
                id=block.id if i == id_at else None,
                name=block.name if i == name_at else None,
                arguments_delta=part,
            )
            for i, part in enumerate(parts)
        ]
    if draw(st.booleans()):
        chunks.insert(0, BlockStart(index=index, block_type=tag))
    if draw(st.booleans()):
        chunks.append(BlockEnd(index=index, block=block))
    return chunks


@st.composite
def interleaved(draw: st.DrawFn, *, min_size: int = 0) -> Stream:
    """Intended blocks, each as its own chunk sequence, randomly interleaved."""
    blocks = draw(st.lists(intended_blocks, min_size=min_size, max_size=6))
    # Indices are arbitrary distinct numbers, so index order is not stream order.
    indices = draw(
        st.lists(st.integers(0, 10_000), min_size=len(blocks), max_size=len(blocks), unique=True)
    )
    queues = [draw(block_chunks(b, i)) for b, i in zip(blocks, indices, strict=True)]
    labels = [n for n, queue in enumerate(queues) for _ in queue]
    order = draw(st.permutations(labels))
    positions = [0] * len(queues)
    chunks: list[StreamChunk] = []
    first_seen: list[int] = []
    for n in order:
        if positions[n] == 0:
            first_seen.append(n)
        chunks.append(queues[n][positions[n]])
        positions[n] += 1
    return Stream(blocks=tuple(blocks[n] for n in first_seen), chunks=tuple(chunks))


usages = st.builds(
    TokenUsage,
    input_tokens=st.integers(0, 10**6),
    output_tokens=st.integers(0, 10**6),
    cache_read_tokens=st.none() | st.integers(0, 10**6),
)


@SETTINGS
@given(
    stream=interleaved(),
    usage=st.none() | usages,
    finish=st.none() | st.sampled_from([FinishStop(), FinishToolCalls()]),
)
def test_any_interleaving_reassembles_the_intended_blocks(
    stream: Stream, usage: TokenUsage | None, finish: FinishReason | None
) -> None:
    assembler = BlockAssembler()
    for chunk in stream.chunks:
        assembler.push(chunk)
    if usage is not None:
        assembler.push(UsageChunk(usage=usage))
    if finish is not None:
        assembler.push(Finish(reason=finish))

    assert assembler.blocks() == stream.blocks
    assert assembler.message().content == stream.blocks
    assert assembler.usage == usage
    assert assembler.finish == (finish or FinishStop())
    assert assembler.replay_state is None


@SETTINGS
@given(stream=interleaved(min_size=1), response=st.none() | st.text())
def test_max_tokens_prunes_blocks_and_envelope_together(
    stream: Stream, response: str | None
) -> None:
    entries = tuple({"entry": n} for n in range(len(stream.blocks)))
    assembler = BlockAssembler()
    for chunk in stream.chunks:
        assembler.push(chunk)
    assembler.push(
        Finish(
            reason=FinishMaxTokens(), replay_state=ReplayEnvelope(response=response, blocks=entries)
        )
    )

    kept = [n for n, block in enumerate(stream.blocks) if not isinstance(block, ToolCallBlock)]
    blocks = assembler.blocks()
    envelope = assembler.replay_state
    assert blocks == tuple(stream.blocks[n] for n in kept)
    assert envelope is not None
    assert envelope.response == response
    assert envelope.blocks == tuple(entries[n] for n in kept)
    assert len(blocks) == len(envelope.blocks)
    assert not any(isinstance(block, ToolCallBlock) for block in blocks)
