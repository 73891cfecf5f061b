"""`DemoAdapter`: a deterministic synthetic model. No key, no network.

It answers every request the same way for the same input: reasoning first
(longer for a higher reasoning effort), then a text answer that quotes the
last user message, then — when the request offers tools — one call of the
first tool. ``tokens_per_second`` paces the stream like a real model (None:
as fast as the runtime takes it). ``max_tokens`` truncates the answer with a
``max-tokens`` finish. Usage counts words as tokens.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence

import attrs
import trio

from llmrt import (
    Adapter,
    BlockEnd,
    BlockStart,
    Finish,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    GenerateOptions,
    ModelContext,
    ModelInfo,
    ModelReasoningInfo,
    ProviderInfo,
    ReasoningBlock,
    ReasoningDelta,
    ReasoningEffortInfo,
    ResolvedModelInfo,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)

__all__ = ["DemoAdapter", "DEMO_MODELS"]

#: Model ids the demo provider advertises; any other id is answered the same way.
DEMO_MODELS = ("demo-1", "demo-mini")
_EFFORTS = (
    ReasoningEffortInfo(id="low", name="Low"),
    ReasoningEffortInfo(id="medium", name="Medium"),
    ReasoningEffortInfo(id="high", name="High"),
)
_THOUGHTS = (
    "The user wrote {words} words.",
    "A short, friendly answer that quotes them fits best.",
    "No facts need checking: this is llmrt's built-in demo model.",
)


def _prompt(options: GenerateOptions) -> str:
    for message in reversed(options.messages):
        if message.role == "user":
            texts = [b.text for b in message.content if isinstance(b, TextBlock)]
            if texts:
                return " ".join(texts)
    return ""


def _words(text: str) -> Iterator[str]:
    """Word tokens that join back to ``text`` (each but the first keeps its leading space).

    Lazy, so an in-flight call holds its text, not a list of its tokens.
    """
    start = 0
    while True:
        end = text.find(" ", start + 1)
        if end < 0:
            yield text[start:]
            return
        yield text[start:end]
        start = end


@attrs.define(eq=False)
class DemoAdapter(Adapter):
    """llmrt's embedded demo provider (see the module docstring)."""

    tokens_per_second: float | None = None
    models: Sequence[str] = DEMO_MODELS
    context_window: int = 32_768
    default_max_tokens: int = 1_024

    def provider_info(self, provider: str) -> ProviderInfo:
        return ProviderInfo(id=provider, name="llmrt demo model (offline)")

    async def list_models(self, provider: str) -> Sequence[ModelInfo]:
        return tuple(
            ModelInfo(provider=provider, id=m, name=m, input_modalities=("text", "image"))
            for m in self.models
        )

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        return ResolvedModelInfo(
            provider=provider,
            id=model,
            name=model,
            input_modalities=("text", "image"),
            context=ModelContext(context_window=self.context_window),
            default_max_tokens=self.default_max_tokens,
            reasoning=ModelReasoningInfo(efforts=_EFFORTS, default_effort="medium"),
        )

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        prompt = _prompt(options)
        effort = options.reasoning_effort or "medium"
        depth = {"low": 1, "medium": 2, "high": 3}.get(effort, 2)
        thought = " ".join(_THOUGHTS[:depth]).format(words=len(prompt.split()))
        answer = f'You said: "{prompt}". ' if prompt else "Hello! "
        answer += "This answer comes from llmrt's demo model, streamed token by token."
        budget = options.max_tokens if options.max_tokens is not None else self.default_max_tokens
        delay = 1.0 / self.tokens_per_second if self.tokens_per_second else 0.0
        spent = 0
        index = 0
        truncated = False

        reasoning_tokens = 0
        for kind, text in (("reasoning", thought), ("text", answer)):
            yield BlockStart(index=index, block_type=kind)
            sent: list[str] = []
            for word in _words(text):
                if spent >= budget:
                    truncated = True
                    break
                if delay:
                    await trio.sleep(delay)
                spent += 1
                sent.append(word)
                if kind == "reasoning":
                    yield ReasoningDelta(index=index, text=word)
                else:
                    yield TextDelta(index=index, text=word)
            done = "".join(sent)
            yield BlockEnd(
                index=index,
                block=ReasoningBlock(text=done) if kind == "reasoning" else TextBlock(text=done),
            )
            if kind == "reasoning":
                reasoning_tokens = spent
            index += 1
            if truncated:
                break

        called = False
        if not truncated and options.tools:
            tool = options.tools[0]
            call_id = f"call_demo_{len(options.messages)}"
            arguments = json.dumps({"input": prompt[:200]})
            fragments = [arguments[i : i + 8] for i in range(0, len(arguments), 8)]
            yield BlockStart(index=index, block_type="tool-call")
            for n, fragment in enumerate(fragments):
                if delay:
                    await trio.sleep(delay)
                spent += 1
                yield ToolCallDelta(
                    index=index,
                    id=call_id if n == 0 else None,
                    name=tool.name if n == 0 else None,
                    arguments_delta=fragment,
                )
            yield BlockEnd(
                index=index, block=ToolCallBlock(id=call_id, name=tool.name, arguments=arguments)
            )
            called = True

        input_tokens = len((options.system or "").split())
        for message in options.messages:
            for block in message.content:
                if isinstance(block, TextBlock):
                    input_tokens += len(block.text.split())
        yield UsageChunk(
            usage=TokenUsage(
                input_tokens=input_tokens, output_tokens=spent, reasoning_tokens=reasoning_tokens
            )
        )
        if truncated:
            yield Finish(reason=FinishMaxTokens())
        elif called:
            yield Finish(reason=FinishToolCalls())
        else:
            yield Finish(reason=FinishStop())
