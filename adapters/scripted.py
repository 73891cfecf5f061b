"""`ScriptedAdapter`: replays scripted chunks with delays, stalls and failures.

The workhorse of tests and benchmarks. A script is a sequence of steps:
chunks to yield, `Delay` and `Stall` to wait, `Raise` to fail. The adapter
records every request it was given and when each of its streams was closed,
so a test can prove that a call released its "upstream".

    adapter = ScriptedAdapter(text_script(["Hel", "lo"]))
    adapter = ScriptedAdapter(lambda request: [Delay(1.0), *text_script(["late"])])
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence

import attrs
import trio

from llmrt import (
    Adapter,
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    FinishStop,
    GenerateOptions,
    ModelInfo,
    ResolvedModelInfo,
    ResolvedRetryPolicy,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    UsageChunk,
)
from llmrt.adapter import ProviderInfo
from llmrt.vocabulary import REQUEST_FEATURES

__all__ = ["Delay", "Stall", "Raise", "Step", "ScriptedAdapter", "text_script"]


@attrs.frozen
class Delay:
    """Wait ``seconds`` (trio time, so a mock clock skips it) before the next step."""

    seconds: float


@attrs.frozen
class Stall:
    """Never produce anything again (until cancelled)."""


@attrs.frozen
class Raise:
    """Raise ``exc`` from the stream.

    A script replayed by many calls raises the same instance each time; its
    traceback is reset on every raise, so it holds the frames of the last
    call only (re-raising an instance otherwise chains every earlier call's
    traceback onto it, and with it every earlier call).
    """

    exc: BaseException


Step = StreamChunk | Delay | Stall | Raise
Script = Sequence[Step] | Callable[[GenerateOptions], Sequence[Step]]


def text_script(
    parts: Sequence[str],
    *,
    usage: TokenUsage | None = None,
    finish: FinishReason | None = None,
    index: int = 0,
) -> list[Step]:
    """The chunks of a one-text-block answer: start, deltas, end, usage, finish."""
    text = "".join(parts)
    steps: list[Step] = [BlockStart(index=index, block_type="text")]
    steps += [TextDelta(index=index, text=part) for part in parts]
    steps.append(BlockEnd(index=index, block=TextBlock(text=text)))
    steps.append(UsageChunk(usage=usage or TokenUsage(input_tokens=1, output_tokens=len(parts))))
    steps.append(Finish(reason=finish or FinishStop()))
    return steps


@attrs.define(eq=False)
class ScriptedAdapter(Adapter):
    """Plays ``script`` (a step list, or a function of the request giving one) per call."""

    script: Script
    #: Advertised by `list_models` (same list for every route).
    models: Sequence[str] = ()
    #: Answers of `resolve_model`, by model id; unknown models get identity only.
    model_info: Mapping[str, ResolvedModelInfo] | Callable[[str, str], ResolvedModelInfo] = (
        attrs.field(factory=dict)
    )
    retry_policy: ResolvedRetryPolicy | None = None
    #: Display names by route; defaults to the route name.
    names: Mapping[str, str] = attrs.field(factory=dict)
    #: The genai-prices provider id of each route priced like a real one (default: none).
    price_providers: Mapping[str, str] = attrs.field(factory=dict)
    #: The optional request features it accepts (a script plays whatever the
    #: test asks for, so by default all of them; a test of refusals narrows it).
    features: frozenset[str] = REQUEST_FEATURES
    requests: list[GenerateOptions] = attrs.field(factory=list, init=False)
    #: trio time at which each stream of this adapter was closed, in order.
    closed_at: list[float] = attrs.field(factory=list, init=False)
    open_streams: int = attrs.field(default=0, init=False)
    aclosed: bool = attrs.field(default=False, init=False)

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        self.requests.append(options)
        steps = self.script(options) if callable(self.script) else self.script
        self.open_streams += 1
        try:
            for step in steps:
                if isinstance(step, Delay):
                    await trio.sleep(step.seconds)
                elif isinstance(step, Stall):
                    await trio.sleep_forever()
                elif isinstance(step, Raise):
                    raise step.exc.with_traceback(None)
                else:
                    yield step
        finally:
            self.open_streams -= 1
            self.closed_at.append(trio.current_time())

    def request_features(self, provider: str, model: str) -> frozenset[str]:
        return self.features

    def provider_info(self, provider: str) -> ProviderInfo:
        return ProviderInfo(
            id=provider,
            name=self.names.get(provider, provider),
            price_provider=self.price_providers.get(provider),
        )

    def provider_retry_policy(self, provider: str) -> ResolvedRetryPolicy | None:
        return self.retry_policy

    async def list_models(self, provider: str) -> Sequence[ModelInfo]:
        return tuple(ModelInfo(provider=provider, id=m, name=m) for m in self.models)

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        if callable(self.model_info):
            return self.model_info(provider, model)
        info = self.model_info.get(model)
        return info or ResolvedModelInfo(provider=provider, id=model, name=model)

    async def aclose(self) -> None:
        self.aclosed = True
