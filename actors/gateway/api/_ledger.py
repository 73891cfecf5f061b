"""`Ledger`: llmrt's chunk stream made regular, for an encoder of a provider API's events.

llmrt's chunks allow what the providers' event streams do not: deltas without
a ``block-start``, a tool call whose id and name come after its first
arguments, a ``block-end`` whose authoritative block holds more than the
deltas did (or the whole content, with no deltas at all), blocks left open at
the ``finish``. The ledger folds that into one regular sequence of hook calls,
which each API's encoder turns into its events:

* `_open` once per block, before any of its text; a tool call only once its
  id and name are known (its arguments so far are then its first delta);
* `_delta` for each non-empty piece of text, reasoning or arguments;
* `_close` once per block: at its ``block-end``, after a last `_delta` with
  whatever the authoritative block holds beyond the deltas (when the deltas
  are a prefix of it; a block that contradicts its deltas cannot be undone
  in a stream, so the deltas stand), or at the ``finish`` for a block still open;
* `_finish` once, with the finish chunk, after every block was closed.

Deltas for a closed block, or of the wrong kind, are ignored, as
`llmrt.BlockAssembler` ignores them. Blocks of any other type (images,
registered kinds) take their place in the first-seen order, so replay
entries line up, but reach no hook: these APIs' answers have no place for
them. Pure computation.
"""

from __future__ import annotations

from typing import Final

from llmrt import (
    BlockEnd,
    BlockStart,
    Finish,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)

__all__ = ["Ledger", "Slot", "TEXT", "REASONING", "TOOL", "OTHER"]

TEXT: Final = "text"
REASONING: Final = "reasoning"
TOOL: Final = "tool-call"
OTHER: Final = "other"

_KINDS: Final = {"text": TEXT, "reasoning": REASONING, "tool-call": TOOL}


class Slot:
    """One llmrt block on its way out: its kind, its text so far, its place in the API's answer."""

    __slots__ = (
        "call_id",
        "closed",
        "kind",
        "name",
        "opened",
        "order",
        "parts",
        "pending",
        "position",
    )

    def __init__(self, kind: str, order: int) -> None:
        self.kind = kind
        #: The block's place in llmrt's first-seen order (its replay entry's index).
        self.order = order
        #: Its place in the API's answer, set by the encoder at `_open`.
        self.position = -1
        self.parts: list[str] = []
        #: Arguments that came before the call's id and name.
        self.pending: list[str] = []
        self.call_id: str | None = None
        self.name: str | None = None
        self.opened = False
        self.closed = False

    def text(self) -> str:
        """Everything `_delta` gave so far, joined."""
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""


class Ledger:
    """The base of the stream encoders: feed chunks to `push`, implement the hooks."""

    __slots__ = ("_finished", "_slots", "_usage", "blocks")

    @property
    def finished(self) -> bool:
        """True once the finish chunk was fed (and while its open blocks are being closed)."""
        return self._finished

    def __init__(self) -> None:
        self._slots: dict[int, Slot] = {}
        #: Every block, in llmrt's first-seen order.
        self.blocks: list[Slot] = []
        self._usage: TokenUsage | None = None
        self._finished = False

    # ---- the hooks ----

    def _open(self, slot: Slot) -> None:
        raise NotImplementedError

    def _delta(self, slot: Slot, text: str) -> None:
        raise NotImplementedError

    def _close(self, slot: Slot) -> None:
        raise NotImplementedError

    def _finish(self, finish: Finish, usage: TokenUsage | None) -> None:
        raise NotImplementedError

    # ---- the fold ----

    def _slot(self, index: int, kind: str) -> Slot:
        slot = self._slots.get(index)
        if slot is None:
            slot = self._slots[index] = Slot(kind, len(self.blocks))
            self.blocks.append(slot)
        return slot

    def _start(self, slot: Slot) -> None:
        slot.opened = True
        self._open(slot)
        if slot.pending:
            text = "".join(slot.pending)
            slot.pending.clear()
            slot.parts.append(text)
            self._delta(slot, text)

    def _text(self, slot: Slot, text: str) -> None:
        if not slot.opened:
            self._start(slot)
        slot.parts.append(text)
        self._delta(slot, text)

    def feed(self, chunk: StreamChunk) -> None:
        """Fold one chunk, in stream order, into hook calls."""
        if self._finished:
            return
        cls = type(chunk)
        if cls is TextDelta or cls is ReasoningDelta:
            kind = TEXT if cls is TextDelta else REASONING
            slot = self._slot(chunk.index, kind)  # type: ignore[union-attr]
            if slot.kind == kind and not slot.closed and chunk.text:  # type: ignore[union-attr]
                self._text(slot, chunk.text)  # type: ignore[union-attr]
        elif cls is ToolCallDelta:
            assert isinstance(chunk, ToolCallDelta)
            slot = self._slot(chunk.index, TOOL)
            if slot.kind != TOOL or slot.closed:
                return
            if chunk.id and slot.call_id is None:
                slot.call_id = chunk.id
            if chunk.name and slot.name is None:
                slot.name = chunk.name
            if slot.opened:
                if chunk.arguments_delta:
                    self._text(slot, chunk.arguments_delta)
            else:
                if chunk.arguments_delta:
                    slot.pending.append(chunk.arguments_delta)
                if slot.call_id is not None and slot.name is not None:
                    self._start(slot)
        elif cls is BlockStart:
            assert isinstance(chunk, BlockStart)
            slot = self._slot(chunk.index, _KINDS.get(chunk.block_type, OTHER))
            if slot.kind in (TEXT, REASONING) and not slot.opened and not slot.closed:
                self._start(slot)
        elif cls is BlockEnd:
            assert isinstance(chunk, BlockEnd)
            self._end(chunk)
        elif cls is UsageChunk:
            assert isinstance(chunk, UsageChunk)
            self._usage = chunk.usage
        elif cls is Finish:
            assert isinstance(chunk, Finish)
            # Set first: `_close` can tell a block cut short by the finish.
            self._finished = True
            for slot in self.blocks:
                if not slot.closed and slot.kind != OTHER:
                    self._close_slot(slot)
            self._finish(chunk, self._usage)

    def _end(self, chunk: BlockEnd) -> None:
        block = chunk.block
        cls = type(block)
        kind = TEXT if cls is TextBlock else REASONING if cls is ReasoningBlock else OTHER
        if cls is ToolCallBlock:
            kind = TOOL
        slot = self._slot(chunk.index, kind)
        if slot.closed or slot.kind == OTHER:
            slot.closed = True
            return
        if slot.kind != kind:
            self._close_slot(slot)  # the block contradicts its start: the deltas stand
            return
        if kind == TOOL:
            assert isinstance(block, ToolCallBlock)
            if slot.call_id is None:
                slot.call_id = block.id
            if slot.name is None:
                slot.name = block.name
            full = block.arguments
        else:
            assert isinstance(block, TextBlock | ReasoningBlock)
            full = block.text
        if not slot.opened:
            self._start(slot)
        sent = slot.text()
        if len(full) > len(sent) and full.startswith(sent):
            self._text(slot, full[len(sent) :])
        self._close_slot(slot)

    def _close_slot(self, slot: Slot) -> None:
        if not slot.opened:
            if slot.kind == TOOL:
                slot.call_id = slot.call_id or f"call_{slot.order}"
                slot.name = slot.name or ""
            self._start(slot)
        slot.closed = True
        self._close(slot)
