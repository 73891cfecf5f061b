"""``await rt.complete(request)``: the assembled answer of one call (issue 22, item 9).

The same call path as ``rt.stream`` (middleware, watchdog, abort, retry),
folded by the `BlockAssembler`; an ``error`` or ``aborted`` finish is raised
as `LlmError` with the failure. Also through the gateway client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio
from _settle import wait_until
from conftest import collect, make_options

import llmrt
from llmrt import (
    AbortController,
    BlockAssembler,
    BlockEnd,
    BlockStart,
    Completion,
    ErrorCode,
    Finish,
    FinishError,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    LlmCallConfig,
    LlmError,
    LlmFailure,
    ModelSource,
    NormalRetryPolicy,
    ReasoningBlock,
    ReasoningDelta,
    ReplayEnvelope,
    StreamChunk,
    TextBlock,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)
from llmrt.actors.gateway import Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.scripted import Delay, ScriptedAdapter, Stall, text_script

USAGE = TokenUsage(input_tokens=3, output_tokens=5, reasoning_tokens=2)
TOOL = ToolCallBlock(id="call_1", name="get_weather", arguments='{"city": "Paris"}')


def answer(finish: llmrt.FinishReason, replay: ReplayEnvelope | None = None) -> list[StreamChunk]:
    """Reasoning, text, one tool call (assembled from deltas), usage, then ``finish``."""
    return [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="thinking"),
        BlockEnd(index=0, block=ReasoningBlock(text="thinking")),
        BlockStart(index=1, block_type="text"),
        llmrt.TextDelta(index=1, text="Hel"),
        llmrt.TextDelta(index=1, text="lo"),
        BlockStart(index=2, block_type="tool-call"),
        ToolCallDelta(index=2, id="call_1", name="get_weather", arguments_delta='{"city": '),
        ToolCallDelta(index=2, arguments_delta='"Paris"}'),
        UsageChunk(usage=USAGE),
        Finish(reason=finish, replay_state=replay),
    ]


async def test_complete_returns_the_assembled_message_usage_and_finish(
    runtime: llmrt.LlmRuntime,
) -> None:
    replay = ReplayEnvelope(response={"id": "r1"}, blocks=("r", "t", "c"))
    adapter = ScriptedAdapter(answer(FinishToolCalls(), replay))
    await runtime.register_adapter(["p"], adapter)
    done = await runtime.complete(make_options())
    assert isinstance(done, Completion)
    assert done.finish == FinishToolCalls() and done.usage == USAGE and done.attempts == 1
    message = done.message
    assert message.role == "assistant"
    assert message.content == (ReasoningBlock(text="thinking"), TextBlock(text="Hello"), TOOL)
    assert message.source == ModelSource(provider="p", model="m", replay_state=replay)
    assert done.text == "Hello" and done.tool_calls == (TOOL,)
    # Exactly what streaming the same call and assembling it gives.
    assembler = BlockAssembler()
    for chunk in await collect(runtime.stream(make_options())):
        assembler.push(chunk)
    assert message.content == assembler.blocks() and done.finish == assembler.finish
    # The message goes straight back into the next request.
    follow = make_options(messages=(llmrt.user_message("hi"), message))
    assert (await runtime.complete(follow)).text == "Hello"
    assert adapter.requests[-1].messages[1] == message
    assert adapter.open_streams == 0


async def test_max_tokens_drops_the_tool_calls_and_their_replay_entries(
    runtime: llmrt.LlmRuntime,
) -> None:
    replay = ReplayEnvelope(response=None, blocks=("r", "t", "c"))
    await runtime.register_adapter(["p"], ScriptedAdapter(answer(FinishMaxTokens(), replay)))
    done = await runtime.complete(make_options())
    assert done.finish == FinishMaxTokens() and done.tool_calls == ()
    assert isinstance(done.message.source, ModelSource)
    assert done.message.source.replay_state == ReplayEnvelope(response=None, blocks=("r", "t"))


async def test_an_error_finish_is_raised_with_its_failure(runtime: llmrt.LlmRuntime) -> None:
    failure = LlmFailure(message="slow down", code=ErrorCode.RATE_LIMIT, status=429)
    script = [*text_script("partial")[:2], Finish(reason=FinishError(failure=failure))]
    await runtime.register_adapter(["p"], ScriptedAdapter(script))
    with pytest.raises(LlmError) as info:
        await runtime.complete(make_options())
    assert info.value.failure == failure
    with pytest.raises(LlmError) as missing:
        await runtime.complete(make_options("nowhere"))
    assert missing.value.code == ErrorCode.NO_ADAPTER
    with pytest.raises(LlmError) as invalid:
        await runtime.complete(make_options(max_tokens=0))
    assert invalid.value.code == ErrorCode.INVALID_REQUEST


async def test_abort_through_signal_raises_aborted_after_the_upstream_closed(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    adapter = ScriptedAdapter([BlockStart(index=0, block_type="text"), Stall()])
    await runtime.register_adapter(["p"], adapter)
    controller = AbortController()
    #: The error complete() raised, and the adapter's open streams at that moment.
    outcome: list[tuple[LlmError, int]] = []

    async def complete() -> None:
        try:
            await runtime.complete(make_options(), signal=controller.signal)
        except LlmError as exc:
            outcome.append((exc, adapter.open_streams))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(complete)
        await wait_until(lambda: adapter.open_streams == 1)
        controller.abort("enough")
    [(error, open_when_raised)] = outcome
    assert error.code == ErrorCode.ABORTED and error.failure.message == "enough"
    assert open_when_raised == 0  # the upstream was closed before complete() raised


async def test_cancelling_the_caller_stops_the_call_and_closes_the_upstream(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    adapter = ScriptedAdapter([BlockStart(index=0, block_type="text"), Stall()])
    await runtime.register_adapter(["p"], adapter)
    with trio.move_on_after(5) as scope:
        await runtime.complete(make_options())
    assert scope.cancelled_caught and adapter.open_streams == 0
    assert len(adapter.closed_at) == 1


async def test_the_idle_watchdog_ends_a_stalled_complete_with_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with llmrt.open_runtime(stream_idle_timeout=2.0) as rt:
        await rt.register_adapter(["p"], ScriptedAdapter([Stall()]))
        with pytest.raises(LlmError) as info:
            await rt.complete(make_options())
    assert info.value.code == ErrorCode.TIMEOUT


async def test_complete_with_retry_answers_with_the_last_attempt_only(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    overloaded = LlmFailure(message="busy", code=ErrorCode.OVERLOADED)
    attempts = iter(
        [
            [*text_script("first, then lost")[:3], Finish(reason=FinishError(failure=overloaded))],
            [Delay(0.1), *text_script(["sec", "ond"])],
        ]
    )
    adapter = ScriptedAdapter(lambda _: next(attempts))
    await runtime.register_adapter(["p"], adapter)
    done = await runtime.complete_with_retry(make_options(), policy=NormalRetryPolicy())
    assert done.text == "second" and done.attempts == 2 and done.finish == FinishStop()
    assert len(adapter.requests) == 2
    # Out of retries: the final failure is raised.
    always_busy = ScriptedAdapter([Finish(reason=FinishError(failure=overloaded))])
    await runtime.register_adapter(["q"], always_busy)
    with pytest.raises(LlmError) as info:
        await runtime.complete_with_retry(
            make_options("q"), policy=NormalRetryPolicy(max_retries=2)
        )
    assert info.value.failure == overloaded and len(always_busy.requests) == 3


async def test_middleware_runs_and_its_exception_propagates(runtime: llmrt.LlmRuntime) -> None:
    await runtime.register_adapter(["p"], ScriptedAdapter(text_script("ok")))
    seen: list[str] = []

    async def middleware(
        request: llmrt.GenerateOptions, nxt: llmrt.actors.Next
    ) -> AsyncIterator[StreamChunk]:
        seen.append(request.provider)
        if request.model == "boom":
            raise KeyError("middleware bug")
        async for chunk in nxt(request):
            yield chunk

    runtime.use(middleware)
    assert (await runtime.complete(make_options())).text == "ok"
    with pytest.raises(KeyError):
        await runtime.complete(make_options(model="boom"))
    assert seen == ["p", "p"]


async def test_a_prepared_call_completes_once(runtime: llmrt.LlmRuntime) -> None:
    await runtime.register_adapter(["p"], ScriptedAdapter(text_script("ok")))
    prepared = await runtime.prepare_call(LlmCallConfig(provider="p", model="m"))
    assert (await prepared.complete(make_options())).text == "ok"
    with pytest.raises(LlmError) as info:
        await prepared.complete(make_options())
    assert info.value.code == ErrorCode.INVALID_PREPARED_CALL


async def test_the_gateway_client_completes_the_same_way(runtime: llmrt.LlmRuntime) -> None:
    failure = LlmFailure(message="no", code=ErrorCode.AUTH, status=401)
    await runtime.register_adapter(["p"], ScriptedAdapter(answer(FinishToolCalls())))
    await runtime.register_adapter(
        ["bad"], ScriptedAdapter([Finish(reason=FinishError(failure=failure))])
    )
    local = await runtime.complete(make_options())
    limits = Limits(shutdown_grace=0.2, close_timeout=2.0)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(partial(serve_gateway, runtime, limits=limits))
            async with open_gateway_client(server.url) as client:
                remote = await client.complete(make_options())
                retried = await client.complete_with_retry(make_options())
                with pytest.raises(LlmError) as info:
                    await client.complete(make_options("bad"))
                with pytest.raises(LlmError) as invalid:
                    await client.complete(make_options(temperature=-1.0))
            nursery.cancel_scope.cancel()
    assert remote.message.content == local.message.content
    assert (remote.finish, remote.usage, remote.text) == (local.finish, local.usage, "Hello")
    assert retried.message.content == local.message.content and retried.attempts == 1
    assert info.value.failure.code == ErrorCode.AUTH and info.value.failure.message == "no"
    assert invalid.value.code == ErrorCode.INVALID_REQUEST
