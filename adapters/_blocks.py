"""The skeleton under every wire decoder: open blocks, the terminal finish, the empty rule.

Sans-I/O: no sockets, no clocks, no checkpoints. A wire decoder reads its
provider's events and calls one `BlockTracker`; each of the decoder's own
``push``/``end`` methods returns `BlockTracker.take`. The decoder owns what is
provider-specific (which event opens which kind of block, finish reasons,
usage arithmetic, replay facts); the tracker owns what every stream shares:

* llmrt block indices, assigned in first-seen order by `BlockTracker.open`,
  which emits ``block-start``; blocks are found again by the decoder's own
  key (`BlockTracker.get`): a provider index, ``"text"``, ``("tool", 3)``;
* deltas: `BlockTracker.text`, `BlockTracker.reasoning` (empty text is never
  emitted) and `BlockTracker.tool_call` (the call id on every fragment, the
  name once);
* ``block-end`` with the assembled block, once per block
  (`BlockTracker.close`; later deltas for a closed block are ignored);
* the terminal finish, exactly once: `BlockTracker.finish` closes every
  block still open, emits usage, then the ``finish``; `BlockTracker.fail` /
  `BlockTracker.fail_with` end the stream with an error finish at once (an
  in-band error, malformed input); `BlockTracker.end` is the body ending
  before the provider's end-of-stream marker (``NETWORK``). After the
  finish every call is a no-op and `BlockTracker.done` is true.
* the empty-response rule, in one place: a ``stop`` finish after a stream
  that opened no block is an ``EMPTY_RESPONSE`` error finish (the retry
  policy retries it by default).

Every failure the tracker builds carries the tracker's ``request_id``.
The other half of the skeleton, model tables and ``list_models``, is
`llmrt.adapters._models` (`ModelSpec`, `fetch_models`).

A decoder sketch::

    class MyDecoder:
        def __init__(self, request_id=None):
            self._t = BlockTracker(request_id=request_id)

        @property
        def finished(self) -> bool:
            return self._t.done

        def push(self, data: bytes) -> list[StreamChunk]:
            if self._t.done:
                return []
            ...  # decode; self._t.text(self._t.get("text") or self._t.open("text", "text"), s)
            return self._t.take()

        def end(self) -> list[StreamChunk]:
            self._t.end("[DONE]")
            return self._t.take()
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Literal

import msgspec

from llmrt import (
    BlockEnd,
    BlockStart,
    ContentBlock,
    ErrorCode,
    Finish,
    FinishError,
    FinishReason,
    FinishStop,
    LlmFailure,
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

__all__ = ["Block", "BlockKind", "BlockTracker", "EMPTY_MESSAGE"]

BlockKind = Literal["text", "reasoning", "tool-call"]

#: The message of the empty-response failure.
EMPTY_MESSAGE = "the model returned no content"


#: How many fragments of a block are kept as separate strings before they are joined.
JOIN_EVERY = 32


class Block:
    """One emitted block: its llmrt index, kind, fragments, and the decoder's facts.

    ``replay`` is the decoder's per-block replay entry (see
    `BlockTracker.replay_blocks`); ``call_id``/``name`` are a tool call's.
    Decoders read these fields and may set ``replay``; the tracker writes the rest.
    """

    __slots__ = ("_joined", "call_id", "closed", "index", "kind", "name", "parts", "replay")

    def __init__(self, index: int, kind: BlockKind) -> None:
        self.index = index
        self.kind: BlockKind = kind
        #: The fragments; runs of `JOIN_EVERY` are joined into one string as they fill.
        self.parts: list[str] = []
        self._joined = 0
        self.call_id: str | None = None
        self.name: str | None = None
        self.closed = False
        self.replay: Any = None

    def add(self, fragment: str) -> None:
        """Keep ``fragment``. Every `JOIN_EVERY` fragments become one string.

        A token-sized fragment costs a string object (about 50 bytes besides
        its text) for as long as the block is open, which is most of what a
        long stream holds; joined in runs, the held text costs about its own
        size. Each fragment is copied once more, never again (earlier runs
        stay as they are).
        """
        parts = self.parts
        parts.append(fragment)
        if len(parts) - self._joined >= JOIN_EVERY:
            joined = self._joined
            parts[joined:] = ["".join(parts[joined:])]
            self._joined = joined + 1

    @property
    def text(self) -> str:
        """The fragments so far, joined (text, reasoning, or raw tool arguments)."""
        return "".join(self.parts)

    def content(self, empty_arguments: str) -> ContentBlock:
        text = self.text
        match self.kind:
            case "text":
                return TextBlock(text=text)
            case "reasoning":
                return ReasoningBlock(text=text)
            case "tool-call":
                return ToolCallBlock(
                    id=self.call_id or "", name=self.name or "", arguments=text or empty_arguments
                )


class BlockTracker:
    """The blocks of one streamed response, and its one terminal finish (module docstring).

    ``empty_arguments`` is the ``arguments`` of a tool call that received no
    fragment (``"{}"`` where the provider's calls always take an object).
    ``id_on_every_fragment``: whether every ``tool-call-delta`` repeats the
    call id (the default: the stream contract's form) or only the first one does.
    """

    __slots__ = (
        "_blocks",
        "_by_key",
        "_done",
        "_empty_arguments",
        "_every_id",
        "_out",
        "request_id",
    )

    def __init__(
        self,
        *,
        request_id: str | None = None,
        empty_arguments: str = "",
        id_on_every_fragment: bool = True,
    ) -> None:
        self.request_id = request_id
        self._empty_arguments = empty_arguments
        self._every_id = id_on_every_fragment
        self._blocks: list[Block] = []
        self._by_key: dict[Hashable, Block] = {}
        self._out: list[StreamChunk] = []
        self._done = False

    # --- state ---

    @property
    def done(self) -> bool:
        """True once the finish was emitted (by `finish`, `fail`, `fail_with` or `end`)."""
        return self._done

    @property
    def blocks(self) -> Sequence[Block]:
        """Every block opened so far, in llmrt index order (read only)."""
        return self._blocks

    def get(self, key: Hashable) -> Block | None:
        """The block the decoder opened under ``key``, if any."""
        return self._by_key.get(key)

    def take(self) -> list[StreamChunk]:
        """The chunks emitted since the last call, in order; the buffer is emptied."""
        out, self._out = self._out, []
        return out

    # --- blocks ---

    def open(self, kind: BlockKind, key: Hashable = None) -> Block:
        """Open a block of ``kind`` (emits ``block-start``), findable by ``key`` if given.

        A key that is already in use is rebound to the new block; decoders
        that must refuse a reused key check `get` first.
        """
        block = Block(len(self._blocks), kind)
        if self._done:
            return block  # never emitted, never kept
        self._blocks.append(block)
        if key is not None:
            self._by_key[key] = block
        self._out.append(BlockStart(index=block.index, block_type=kind))
        return block

    def text(self, block: Block, text: str | None) -> None:
        """Append text to an open text block (emits ``text-delta``; empty text emits nothing)."""
        if text and not (self._done or block.closed):
            block.add(text)
            self._out.append(TextDelta(index=block.index, text=text))

    def reasoning(self, block: Block, text: str | None) -> None:
        """Append reasoning to an open reasoning block (emits ``reasoning-delta``)."""
        if text and not (self._done or block.closed):
            block.add(text)
            self._out.append(ReasoningDelta(index=block.index, text=text))

    def tool_call(
        self,
        block: Block,
        arguments: str | None = None,
        *,
        call_id: str | None = None,
        name: str | None = None,
    ) -> None:
        """Record a tool call's id and name (first value wins) and append raw argument text.

        Emits one ``tool-call-delta`` when anything is new: its ``name`` only
        the first time a name is known; its ``id`` always once known (or only
        the first time, without ``id_on_every_fragment``).
        """
        if not self._live(block):
            return
        new_id = new_name = None
        if block.call_id is None and call_id is not None:
            block.call_id = new_id = call_id
        if block.name is None and name:
            block.name = new_name = name
        if new_id is None and new_name is None and not arguments:
            return
        if arguments:
            block.add(arguments)
        self._out.append(
            ToolCallDelta(
                index=block.index,
                id=block.call_id if self._every_id else new_id,
                name=new_name,
                arguments_delta=arguments or "",
            )
        )

    def close(self, block: Block) -> None:
        """Close ``block`` (emits ``block-end`` with the assembled block); idempotent."""
        if self._live(block):
            block.closed = True
            self._out.append(
                BlockEnd(index=block.index, block=block.content(self._empty_arguments))
            )

    # --- the terminal finish ---

    def replay_blocks(self) -> tuple[Any, ...]:
        """Every block's ``replay`` entry, in index order (a `ReplayEnvelope`'s ``blocks``)."""
        return tuple(block.replay for block in self._blocks)

    def failure(self, code: ErrorCode, message: str) -> FinishError:
        """An error finish reason with this stream's request id (for `finish`)."""
        return FinishError(
            failure=LlmFailure(message=message, code=code, request_id=self.request_id)
        )

    def finish(
        self,
        reason: FinishReason,
        *,
        usage: TokenUsage | None = None,
        replay_state: ReplayEnvelope | None = None,
    ) -> None:
        """End the stream: close open blocks, emit ``usage``, then the finish.

        A `FinishStop` after no block at all becomes an ``EMPTY_RESPONSE``
        error. ``replay_state`` goes with a successful finish only.
        """
        if self._done:
            return
        self._done = True
        for block in self._blocks:
            if not block.closed:
                block.closed = True
                self._out.append(
                    BlockEnd(index=block.index, block=block.content(self._empty_arguments))
                )
        if usage is not None:
            self._out.append(UsageChunk(usage=usage))
        if type(reason) is FinishStop and not self._blocks:
            reason = self.failure(ErrorCode.EMPTY_RESPONSE, EMPTY_MESSAGE)
        if type(reason) is FinishError:
            self._out.append(Finish(reason=reason))
        else:
            self._out.append(Finish(reason=reason, replay_state=replay_state))

    def fail(self, code: ErrorCode, message: str) -> None:
        """End the stream at once with an error finish (open blocks are not closed)."""
        if not self._done:
            self._done = True
            self._out.append(Finish(reason=self.failure(code, message)))

    def fail_with(self, failure: LlmFailure) -> None:
        """`fail` with a classified failure; it gets this stream's request id if it has none."""
        if self._done:
            return
        if failure.request_id is None and self.request_id is not None:
            failure = msgspec.structs.replace(failure, request_id=self.request_id)
        self._done = True
        self._out.append(Finish(reason=FinishError(failure=failure)))

    def end(self, marker: str) -> None:
        """The body ended: a ``NETWORK`` error unless the stream already finished."""
        self.fail(ErrorCode.NETWORK, f"response ended before {marker}")

    def _live(self, block: Block) -> bool:
        return not (self._done or block.closed)
