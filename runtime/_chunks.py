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
    "RoutedAttempt",
    "Routing",
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
    """The call's token usage, and its price when one is known.

    ``cost`` is the call's price in US dollars (docs/operations.md,
    "Prices"): set by the runtime from the serving route's price table,
    never by an adapter; ``None`` when no price is known for the model (or
    the ``llmrt[prices]`` extra is not installed), never a guessed zero.
    """

    usage: TokenUsage
    cost: Annotated[float, msgspec.Meta(ge=0)] | None = None


class RoutedAttempt(Wire, frozen=True):
    """One deployment a routed call tried: its route and model, and how the attempt ended.

    ``code`` is the failure code that ended the attempt (``RATE_LIMIT``,
    ``TIMEOUT`` for a missed first-chunk deadline, ...); None when it ended
    without one (it served the answer).
    """

    group: str
    route: str
    model: str
    code: str | None = None


class Routing(Wire, frozen=True):
    """Which deployment of a group served a call, and every attempt before it.

    Set on the ``finish`` of a call to a routing group (docs/routing.md):
    ``route`` and ``model`` name the deployment whose finish this is (None
    when no deployment was dispatched, e.g. a ``RATE_LIMIT`` before any);
    ``attempts`` lists the deployments tried, in order, the last one included.
    """

    group: str
    route: str | None = None
    model: str | None = None
    attempts: tuple[RoutedAttempt, ...] = ()


class Finish(Wire, frozen=True, tag_field="type", tag="finish"):
    """The terminal chunk of every call."""

    reason: FinishReason
    replay_state: ReplayEnvelope | None = None
    #: Set only on calls to a routing group: the serving deployment and the attempts.
    routing: Routing | None = None


StreamChunk = (
    BlockStart | TextDelta | ReasoningDelta | ToolCallDelta | BlockEnd | UsageChunk | Finish
)
