"""`Completion`: one call's answer assembled, for callers that do not stream.

``await rt.complete(request)`` is ``rt.stream(request)`` folded through a
`BlockAssembler`: the same call path, abort and retry, and the same
assembly rules (block order, tool calls dropped on ``max-tokens``, replay
state pruned with them). An ``error`` or ``aborted`` finish is raised as
`LlmError` carrying the failure, so the happy path needs no ``match``.

The folding functions here take any async iterable of chunks (an in-process
call, a gateway client's call), so both sides share them.
"""

from __future__ import annotations

from collections.abc import AsyncIterable

from ._assembler import BlockAssembler
from ._chunks import FinishAborted, FinishError, FinishReason, StreamChunk, TokenUsage
from ._content import Message, ModelSource, TextBlock, ToolCallBlock
from ._errors import LlmError
from ._retry import AttemptChunk, RetryEvent
from ._wire import Wire

__all__ = ["Completion", "completion_of", "complete_chunks", "complete_events"]


class Completion(Wire, frozen=True):
    """The assembled answer of one call: what ``await rt.complete(request)`` returns.

    ``message`` is the assistant message (source: the provider route and
    model, with the replay state to send back on the next turn); ``finish``
    is ``stop``, ``tool-calls`` or ``max-tokens`` (or a plugin's finish
    reason), never ``error`` or ``aborted``: those are raised. ``attempts``
    counts the provider attempts a retried call took (1 without retry).
    """

    message: Message
    finish: FinishReason
    usage: TokenUsage | None = None
    attempts: int = 1
    #: The call's price in US dollars (None: no price is known; docs/operations.md, "Prices").
    cost: float | None = None

    @property
    def text(self) -> str:
        """The answer's visible text: its text blocks, joined."""
        return "".join(block.text for block in self.message.content if type(block) is TextBlock)

    @property
    def tool_calls(self) -> tuple[ToolCallBlock, ...]:
        """The tool calls the model asked for, in order (none after ``max-tokens``)."""
        return tuple(block for block in self.message.content if type(block) is ToolCallBlock)


def completion_of(
    assembler: BlockAssembler, provider: str, model: str, attempts: int = 1
) -> Completion:
    """The `Completion` of a call whose chunks ``assembler`` folded.

    Raises `LlmError` with the failure of an ``error`` or ``aborted`` finish,
    and ``PROTOCOL`` for a block the assembler cannot build.
    """
    reason = assembler.finish
    if type(reason) is FinishError or type(reason) is FinishAborted:
        raise LlmError.from_failure(reason.failure)
    source = ModelSource(provider=provider, model=model, replay_state=assembler.replay_state)
    return Completion(
        message=assembler.message(source),
        finish=reason,
        usage=assembler.usage,
        attempts=attempts,
        cost=assembler.cost,
    )


async def complete_chunks(
    chunks: AsyncIterable[StreamChunk], provider: str, model: str
) -> Completion:
    """Fold one call's chunks into its `Completion` (see `completion_of` for what raises)."""
    assembler = BlockAssembler()
    push = assembler.push
    async for chunk in chunks:
        push(chunk)
    return completion_of(assembler, provider, model)


async def complete_events(
    events: AsyncIterable[RetryEvent], provider: str, model: str
) -> Completion:
    """Fold a retried call's events: only the last attempt's chunks make the answer.

    A `RetryScheduled` voids what its attempt streamed, so the assembler starts over.
    """
    assembler = BlockAssembler()
    attempt = 1
    async for event in events:
        if type(event) is AttemptChunk:
            attempt = event.attempt
            assembler.push(event.chunk)
        else:
            assembler = BlockAssembler()
    return completion_of(assembler, provider, model, attempt)
