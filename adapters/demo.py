"""`DemoAdapter`: a deterministic synthetic model. No key, no network.

It answers every request the same way for the same input: reasoning first
(longer for a higher reasoning effort), then a text answer that quotes the
last user message, then — when the request offers tools — one call of the
first tool (the named tool for a named tool choice, none for ``none``), its
arguments shaped from the tool's schema (`_schema_sample`).
When the last message is a tool result, it answers that result in text and
calls no tool: an agent loop (call, run the tool, send the result back) ends
after one round. ``tokens_per_second`` paces the stream like a real model
(None: as fast as the runtime takes it). ``max_tokens`` truncates the answer
with a ``max-tokens`` finish. Usage counts words as tokens.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence

import attrs
import outcome
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
    ModelInfo,
    NamedToolChoice,
    ReasoningBlock,
    ReasoningDelta,
    ResolvedModelInfo,
    ResolvedRetryPolicy,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    ToolResultBlock,
    ToolSchema,
    UsageChunk,
)
from llmrt.adapter import ModelContext, ModelReasoningInfo, ProviderInfo, ReasoningEffortInfo
from llmrt.vocabulary import TOOL_CHOICE

from ._schema_sample import sample_arguments
from .plugin import AdapterConfig, AdapterPlugin, ModelSpec, Problem

__all__ = [
    "BUILTIN_DEMO_TOKENS_PER_SECOND",
    "DEMO_MODELS",
    "DEMO_PACE_ENV",
    "PLUGIN",
    "DemoAdapter",
    "DemoConfig",
]

#: Model ids the demo provider advertises; any other id is answered the same way.
DEMO_MODELS = ("demo-1", "demo-mini")
_EFFORTS = (
    ReasoningEffortInfo(id="low", name="Low"),
    ReasoningEffortInfo(id="medium", name="Medium"),
    ReasoningEffortInfo(id="high", name="High"),
)
_THOUGHTS = (
    "The user wrote {words}.",
    "A short, friendly answer that quotes them fits best.",
    "No facts need checking: this is llmrt's built-in demo model.",
)
_RESULT_THOUGHTS = (
    "The tool {tool} {verb} {words}.",
    "Quoting what it said answers the user.",
    "No more tools are needed: this is llmrt's built-in demo model.",
)
#: The most of a tool result the answer quotes.
_QUOTED = 200


def _words(text: str) -> str:
    n = len(text.split())
    return f"{n} word" if n == 1 else f"{n} words"


def _texts(blocks: Sequence[object]) -> list[str]:
    return [b.text for b in blocks if isinstance(b, TextBlock)]


def _tool_result(options: GenerateOptions) -> tuple[str, str, bool] | None:
    """(tool name, result text, is_error) when the last message is a tool result."""
    if not options.messages:
        return None
    results = [b for b in options.messages[-1].content if isinstance(b, ToolResultBlock)]
    if not results:
        return None
    result = results[-1]
    name = "the tool"
    for message in options.messages:
        for block in message.content:
            if isinstance(block, ToolCallBlock) and block.id == result.tool_call_id:
                name = block.name
    return name, " ".join(_texts(result.content)), result.is_error


def _prompt(options: GenerateOptions) -> str:
    for message in reversed(options.messages):
        if message.role == "user":
            texts = [b.text for b in message.content if isinstance(b, TextBlock)]
            if texts:
                return " ".join(texts)
    return ""


def _chosen_tool(options: GenerateOptions) -> ToolSchema | None:
    """The tool the demo calls: the named one, none for ``none``, else the first."""
    choice = options.tool_choice
    if not options.tools or choice == "none":
        return None
    if isinstance(choice, NamedToolChoice):
        return next((t for t in options.tools if t.name == choice.name), None)
    return options.tools[0]


class _Wait:
    """One paced stream waiting for its turn; also its own abort function."""

    __slots__ = ("task",)

    def __init__(self, task: trio.lowlevel.Task) -> None:
        #: None once the stream was woken, cancelled, or took the lead.
        self.task: trio.lowlevel.Task | None = task

    def __call__(self, _: object) -> trio.lowlevel.Abort:
        self.task = None  # cancelled: its heap entry is skipped when it comes due
        return trio.lowlevel.Abort.SUCCEEDED


class _Pacer:
    """Paces all the streams of one `DemoAdapter` with one sleeping cancel scope.

    ``trio.sleep`` per token would give every waiting stream its own cancel
    scope, cancel status and sleep frames (about 1.4 KiB, and a dozen objects
    for the collector per token). Here a waiting stream is a heap entry, and
    one of the waiting streams, the leader, sleeps until the earliest due
    time, wakes whatever is due, and when its own turn comes (or it is
    cancelled) hands the lead to the next waiting stream. No extra task.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Wait]] = []
        self._seq = 0
        #: The leading stream's entry (it may not have started sleeping yet).
        self._leader: _Wait | None = None
        #: The leader's sleep, whose deadline follows the earliest due time.
        self._sleep: trio.CancelScope | None = None

    async def sleep(self, seconds: float) -> None:
        """Like ``trio.sleep(seconds)``: a checkpoint, cancellable while it waits."""
        due = trio.current_time() + seconds
        wait = _Wait(trio.lowlevel.current_task())
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, wait))
        if self._leader is None:
            self._leader = wait
        else:
            if self._sleep is not None and due < self._sleep.deadline:
                self._sleep.deadline = due
            if not await trio.lowlevel.wait_task_rescheduled(wait):
                return  # woken by the leader: this stream's time has come
        await self._lead(wait)

    async def _lead(self, me: _Wait) -> None:
        me.task = None  # nobody else wakes the leader: it sleeps on its own
        heap = self._heap
        try:
            while True:
                with trio.CancelScope(deadline=heap[0][0]) as self._sleep:
                    await trio.sleep_forever()
                self._sleep = None
                now = trio.current_time()
                mine = False
                while heap and heap[0][0] <= now:
                    wait = heapq.heappop(heap)[2]
                    if wait is me:
                        mine = True
                    elif wait.task is not None:
                        trio.lowlevel.reschedule(wait.task, outcome.Value(False))
                        wait.task = None
                if mine:
                    return
        finally:
            self._sleep = None
            self._leader = None
            while heap:  # hand the lead to the next stream still waiting
                wait = heap[0][2]
                if wait.task is None:
                    heapq.heappop(heap)
                    continue
                self._leader = wait
                trio.lowlevel.reschedule(wait.task, outcome.Value(True))
                wait.task = None
                break


@attrs.define(eq=False)
class DemoAdapter(Adapter):
    """llmrt's embedded demo provider (see the module docstring)."""

    tokens_per_second: float | None = None
    models: Sequence[str] = DEMO_MODELS
    context_window: int = 32_768
    default_max_tokens: int = 1_024
    _pacer: _Pacer = attrs.field(factory=_Pacer, init=False, repr=False)

    def request_features(self, provider: str, model: str) -> frozenset[str]:
        """A tool choice (honoured as the module docstring says); no structured output."""
        return frozenset({TOOL_CHOICE})

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
        result = _tool_result(options)
        if result is None:
            thought = " ".join(_THOUGHTS[:depth]).format(words=_words(prompt))
            answer = f'You said: "{prompt}". ' if prompt else "Hello! "
            answer += "This answer comes from llmrt's demo model, streamed token by token."
        else:
            name, said, failed = result
            verb = "failed with" if failed else "answered with"
            thought = " ".join(_RESULT_THOUGHTS[:depth])
            thought = thought.format(tool=name, verb=verb, words=_words(said))
            quoted = said if len(said) <= _QUOTED else said[:_QUOTED] + "..."
            answer = f'The tool {name} {"failed" if failed else "answered"}: "{quoted}". '
            answer += "That is the demo model's final answer: no more tool calls."
        budget = options.max_tokens if options.max_tokens is not None else self.default_max_tokens
        delay = 1.0 / self.tokens_per_second if self.tokens_per_second else 0.0
        pacer = self._pacer if delay else None
        spent = 0
        truncated = False

        reasoning_tokens = 0
        for index in (0, 1):  # the reasoning block, then the text block
            text = thought if index == 0 else answer
            yield BlockStart(index=index, block_type="reasoning" if index == 0 else "text")
            # One token per word; each word but the first keeps its leading space,
            # so the block sent so far is always ``text[:start]``.
            start = 0
            while start < len(text):
                if spent >= budget:
                    truncated = True
                    break
                if pacer is not None:
                    await pacer.sleep(delay)
                end = text.find(" ", start + 1)
                if end < 0:
                    end = len(text)
                spent += 1
                if index == 0:
                    yield ReasoningDelta(index=index, text=text[start:end])
                else:
                    yield TextDelta(index=index, text=text[start:end])
                start = end
            done = text[:start]
            yield BlockEnd(
                index=index,
                block=ReasoningBlock(text=done) if index == 0 else TextBlock(text=done),
            )
            if index == 0:
                reasoning_tokens = spent
            if truncated:
                break

        called = False
        # After a tool result the loop is over: answering it is the last turn.
        tool = _chosen_tool(options) if result is None else None
        if not truncated and tool is not None:
            call_id = f"call_demo_{len(options.messages)}"
            arguments = json.dumps(sample_arguments(tool.parameters, prompt))
            fragments = [arguments[i : i + 8] for i in range(0, len(arguments), 8)]
            index = 2
            yield BlockStart(index=index, block_type="tool-call")
            for n, fragment in enumerate(fragments):
                if pacer is not None:
                    await pacer.sleep(delay)
                spent += 1
                yield ToolCallDelta(
                    index=index,
                    # The id on every fragment, as the HTTP adapters send it.
                    id=call_id,
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
                texts = _texts(block.content) if isinstance(block, ToolResultBlock) else []
                if isinstance(block, TextBlock):
                    texts = [block.text]
                input_tokens += sum(len(text.split()) for text in texts)
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


# ---- plugin ---------------------------------------------------------------------------------

#: The pace of the built-in demo route (a ``demo`` route in the file sets its own).
BUILTIN_DEMO_TOKENS_PER_SECOND = 60.0
#: Sets the built-in route's pace instead; ``0``: as fast as the reader takes it.
DEMO_PACE_ENV = "LLMRT_DEMO_TOKENS_PER_SECOND"


class DemoConfig(AdapterConfig, tag="demo", frozen=True):
    """A ``[[provider]]`` entry with ``adapter = "demo"``."""

    #: The stream's pace (None: as fast as the consumer reads).
    tokens_per_second: float | None = None

    def check(self) -> Problem | None:
        rate = self.tokens_per_second
        if rate is not None and not 0 < rate < math.inf:
            return ("tokens_per_second",), "tokens_per_second must be positive"
        return None

    def known_models(self) -> tuple[ModelSpec, ...]:
        return tuple(ModelSpec(id=model, image_input=True) for model in DEMO_MODELS)

    def default_model(self) -> str | None:
        return DEMO_MODELS[0]

    def build(
        self,
        *,
        key_env: str | None,
        retry: ResolvedRetryPolicy | None,
        environ: Mapping[str, str] | None,
    ) -> Adapter:
        return DemoAdapter(tokens_per_second=self.tokens_per_second)


def _builtin_pace(config: AdapterConfig, value: str) -> AdapterConfig:
    """The built-in route at the pace ``$LLMRT_DEMO_TOKENS_PER_SECOND`` gives (0: unpaced)."""
    try:
        rate = float(value)
    except ValueError:
        rate = math.nan
    if not 0 <= rate < math.inf:
        raise ValueError(
            f"must be a number of tokens per second, or 0 for no pacing (got {value!r})"
        )
    return DemoConfig(tokens_per_second=rate or None)


PLUGIN = AdapterPlugin(
    config=DemoConfig,
    summary="llmrt's offline demo model",
    # Always served, paced like a real model so a terminal shows it streaming.
    builtin=(("demo", DemoConfig(tokens_per_second=BUILTIN_DEMO_TOKENS_PER_SECOND)),),
    # A script or a test suite that reads the demo's answers, not watches them.
    builtin_env=(DEMO_PACE_ENV, _builtin_pace),
)
