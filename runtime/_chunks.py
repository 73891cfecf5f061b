"""The raw stream protocol: chunks, finish reasons and token usage.

`StreamChunk` is a closed union: a ``match`` over it ends in
``typing.assert_never``. Adapters emit ``usage`` before the terminal
``finish`` and nothing after it; tool arguments stay raw JSON strings.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ._content import ContentBlock, ReplayEnvelope
from ._errors import LlmFailure
from ._wire import Wire

__all__ = [
    "TokenUsage",
    "FinishStop",
    "FinishToolCalls",
    "FinishMaxTokens",
    "FinishAborted",
    "FinishError",
    "FinishReason",
    "BlockStart",
    "TextDelta",
    "ReasoningDelta",
    "ToolCallDelta",
    "BlockEnd",
    "UsageChunk",
    "Finish",
    "StreamChunk",
]

_Count = Annotated[int, msgspec.Meta(ge=0)]


class TokenUsage(Wire, frozen=True):
    """Token accounting of one call. Counts are disjoint.

    ``input_tokens`` is uncached input only; cached input is
    ``cache_read_tokens`` / ``cache_write_tokens`` (billed input is the sum of
    the three). ``reasoning_tokens`` is informational and already inside
    ``output_tokens``.
    """

    input_tokens: _Count
    output_tokens: _Count
    cache_read_tokens: _Count | None = None
    cache_write_tokens: _Count | None = None
    reasoning_tokens: _Count | None = None


class FinishStop(Wire, frozen=True, tag_field="kind", tag="stop"):
    """The model finished its answer."""


class FinishToolCalls(Wire, frozen=True, tag_field="kind", tag="tool-calls"):
    """The model stopped to have tools run."""


class FinishMaxTokens(Wire, frozen=True, tag_field="kind", tag="max-tokens"):
    """The output cap cut the answer short."""


class FinishAborted(Wire, frozen=True, tag_field="kind", tag="aborted"):
    """The caller (or the runtime's shutdown) aborted the call."""

    failure: LlmFailure


class FinishError(Wire, frozen=True, tag_field="kind", tag="error"):
    """The call failed."""

    failure: LlmFailure


FinishReason = FinishStop | FinishToolCalls | FinishMaxTokens | FinishAborted | FinishError


class BlockStart(Wire, frozen=True, tag_field="type", tag="block-start"):
    index: int
    block_type: str


class TextDelta(Wire, frozen=True, tag_field="type", tag="text-delta"):
    index: int
    text: str


class ReasoningDelta(Wire, frozen=True, tag_field="type", tag="reasoning-delta"):
    index: int
    text: str


class ToolCallDelta(Wire, frozen=True, tag_field="type", tag="tool-call-delta"):
    """A fragment of a tool call. ``id`` and ``name`` may come on the first fragment only."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments_delta: str = ""


class BlockEnd(Wire, frozen=True, tag_field="type", tag="block-end"):
    """Closes a block; ``block`` is the assembled block and is authoritative."""

    index: int
    block: ContentBlock


class UsageChunk(Wire, frozen=True, tag_field="type", tag="usage"):
    usage: TokenUsage


class Finish(Wire, frozen=True, tag_field="type", tag="finish"):
    """The terminal chunk of every call."""

    reason: FinishReason
    replay_state: ReplayEnvelope | None = None


StreamChunk = (
    BlockStart | TextDelta | ReasoningDelta | ToolCallDelta | BlockEnd | UsageChunk | Finish
)
