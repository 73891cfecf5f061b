"""`BlockAssembler`: folds a chunk stream back into blocks, usage, finish and replay state."""

from __future__ import annotations

from typing import assert_never

from ._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishMaxTokens,
    FinishReason,
    FinishStop,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from ._content import (
    ContentBlock,
    Message,
    MessageSource,
    PluginSource,
    ReasoningBlock,
    ReplayEnvelope,
    TextBlock,
    ToolCallBlock,
    new_message_id,
)
from ._errors import ErrorCode, LlmError

__all__ = ["BlockAssembler"]

_DEFAULT_SOURCE = PluginSource(plugin="llmrt/assembler")
_STOP = FinishStop()


class _Block:
    """Assembly state of one index. ``parts`` grows only while the block is open."""

    __slots__ = ("block_type", "call_id", "done", "name", "parts")

    def __init__(self, block_type: str) -> None:
        self.block_type = block_type
        self.parts: list[str] = []
        self.call_id: str | None = None
        self.name: str | None = None
        self.done: ContentBlock | None = None


class BlockAssembler:
    """Incrementally assembles `StreamChunk`s into content blocks and a message.

    Rules:

    * blocks come out in the order their index was first seen;
    * an open block assembles from its deltas (tool-call id and name from the
      first delta that carries them; arguments are concatenated raw, never
      parsed); a ``block-end`` block is authoritative and closes the index;
    * deltas for a closed index, or of a kind that does not match the block,
      are ignored, so a misbehaving adapter cannot grow memory or corrupt a
      finished block;
    * a ``max-tokens`` finish drops every tool call, and drops the replay
      envelope's per-block entry at the same positions;
    * an envelope whose per-block entries do not match the emitted block
      count is discarded;
    * no ``finish`` chunk means ``stop``; chunks after ``finish`` are ignored.

    Pure computation: no I/O, no checkpoints.
    """

    __slots__ = ("_blocks", "_cost", "_envelope", "_finish", "_usage")

    def __init__(self) -> None:
        self._blocks: dict[int, _Block] = {}
        self._usage: TokenUsage | None = None
        self._cost: float | None = None
        self._finish: Finish | None = None

    def push(self, chunk: StreamChunk) -> None:
        """Feed the next chunk, in stream order."""
        if self._finish is not None:
            return
        cls = type(chunk)
        if cls is TextDelta or cls is ReasoningDelta:
            kind = "text" if cls is TextDelta else "reasoning"
            state = self._blocks.get(chunk.index)  # type: ignore[union-attr]
            if state is None:
                state = self._blocks[chunk.index] = _Block(kind)  # type: ignore[union-attr]
            if state.done is None and state.block_type == kind:
                state.parts.append(chunk.text)  # type: ignore[union-attr]
            return
        match chunk:
            case ToolCallDelta(index=index):
                state = self._blocks.get(index)
                if state is None:
                    state = self._blocks[index] = _Block("tool-call")
                if state.done is None and state.block_type == "tool-call":
                    if state.call_id is None and chunk.id:
                        state.call_id = chunk.id
                    if state.name is None and chunk.name:
                        state.name = chunk.name
                    state.parts.append(chunk.arguments_delta)
            case BlockStart(index=index, block_type=block_type):
                if index not in self._blocks:
                    self._blocks[index] = _Block(block_type)
            case BlockEnd(index=index, block=block):
                state = self._blocks.get(index)
                if state is None:
                    state = self._blocks[index] = _Block(block.__struct_config__.tag)  # type: ignore[arg-type]
                if state.done is None:
                    state.done = block
                    state.parts = []
            case UsageChunk(usage=usage, cost=cost):
                self._usage = usage
                self._cost = cost
            case Finish():
                self._finish = chunk
            case TextDelta() | ReasoningDelta():  # pragma: no cover - handled above
                pass
            case _:
                assert_never(chunk)

    def _assembled(self) -> list[ContentBlock]:
        out: list[ContentBlock] = []
        for index, state in self._blocks.items():
            if state.done is not None:
                out.append(state.done)
            elif state.block_type == "text":
                out.append(TextBlock(text="".join(state.parts)))
            elif state.block_type == "reasoning":
                out.append(ReasoningBlock(text="".join(state.parts)))
            elif state.block_type == "tool-call":
                out.append(
                    ToolCallBlock(
                        id=state.call_id or "",
                        name=state.name or "",
                        arguments="".join(state.parts),
                    )
                )
            else:
                raise LlmError(
                    ErrorCode.PROTOCOL,
                    f"block {index} of type {state.block_type!r} was never closed by "
                    "`block-end` and cannot be assembled from deltas",
                )
        return out

    def _truncated(self) -> bool:
        return self._finish is not None and type(self._finish.reason) is FinishMaxTokens

    def blocks(self) -> tuple[ContentBlock, ...]:
        """Every block seen so far, in first-seen order (tool calls dropped on ``max-tokens``).

        Raises `LlmError` (``PROTOCOL``) for an unknown block type never closed by ``block-end``.
        """
        blocks = self._assembled()
        if self._truncated():
            return tuple(b for b in blocks if type(b) is not ToolCallBlock)
        return tuple(blocks)

    @property
    def usage(self) -> TokenUsage | None:
        """Usage from the last ``usage`` chunk; ``None`` until one arrives."""
        return self._usage

    @property
    def cost(self) -> float | None:
        """The price in US dollars from the last ``usage`` chunk; ``None``: none is known."""
        return self._cost

    @property
    def finish(self) -> FinishReason:
        """The finish reason; ``stop`` when the stream ended without a ``finish``."""
        return _STOP if self._finish is None else self._finish.reason

    @property
    def replay_state(self) -> ReplayEnvelope | None:
        """The finish chunk's replay envelope, pruned in step with `blocks`.

        ``None`` when there is none or its per-block entries do not align.
        """
        if self._finish is None or self._finish.replay_state is None:
            return None
        envelope = self._finish.replay_state
        if envelope.blocks is None:
            return envelope
        blocks = self._assembled()
        if len(envelope.blocks) != len(blocks):
            return None
        if not self._truncated():
            return envelope
        kept = tuple(
            entry
            for entry, block in zip(envelope.blocks, blocks, strict=True)
            if type(block) is not ToolCallBlock
        )
        return ReplayEnvelope(response=envelope.response, blocks=kept)

    def message(self, source: MessageSource | None = None) -> Message:
        """The assembled assistant message over `blocks`."""
        return Message(
            id=new_message_id(),
            role="assistant",
            content=self.blocks(),
            source=source or _DEFAULT_SOURCE,
        )
