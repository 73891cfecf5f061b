"""The call contract, through the public API, under trio and under asyncio (`llmrt.aio`).

Each test runs twice (the ``anyio_backend`` fixture): with `llmrt.open_runtime`
in a trio run, and with `llmrt.aio.open_runtime` in an asyncio loop, against
`llmrt.testing` upstreams over real loopback sockets (tests/_aio_support.py).
The body is the same code: what a trio program is promised, an asyncio
program is promised too. Timeouts here are real but short, and each outcome
is decided by the upstream's behaviour (a stalled stream, a Retry-After),
never by a race against the clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from _aio_support import abort_controller, fail_after, open_rt, serve_test_upstream

import llmrt
from llmrt import (
    AttemptChunk,
    Finish,
    FinishAborted,
    FinishError,
    FinishStop,
    GenerateOptions,
    LlmCallConfig,
    LlmError,
    Message,
    ModelSource,
    ReplayEnvelope,
    RetryScheduled,
    StreamChunk,
    TextBlock,
    TextDelta,
    UsageChunk,
    user_message,
)
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import ErrorScript, SSEScript, openai_events

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

KEY = "sk-contract-0123456789"
BOUND = 30.0


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _adapter(base_url: str) -> OpenAIChatAdapter:
    return OpenAIChatAdapter(base_url=base_url + "/v1", api_key_env="K", environ={"K": KEY})


def _options(provider: str = "p", **kw: Any) -> GenerateOptions:
    return GenerateOptions(provider=provider, model="m-1", messages=(user_message("hi"),), **kw)


async def _collect(call: Any) -> list[Any]:
    return [item async for item in call]


def _finishes(items: list[Any]) -> list[Finish]:
    return [item for item in items if type(item) is Finish]


async def test_exactly_one_finish_last_with_usage_before(anyio_backend: str) -> None:
    script = SSEScript(events=openai_events(["Hel", "lo", "!"]))
    with fail_after(BOUND):
        async with serve_test_upstream(anyio_backend, script) as upstream:
            async with open_rt(anyio_backend) as rt:
                await rt.register_adapter(["p"], _adapter(upstream.base_url))
                async with rt.stream(_options()) as call:
                    chunks = await _collect(call)
    assert [type(c.reason) for c in _finishes(chunks)] == [FinishStop]
    assert type(chunks[-1]) is Finish
    assert "".join(c.text for c in chunks if type(c) is TextDelta) == "Hello!"
    usage = [i for i, c in enumerate(chunks) if type(c) is UsageChunk]
    assert usage and usage[-1] < len(chunks) - 1


@pytest.mark.parametrize("how", ["call", "controller"])
async def test_abort_from_another_task_ends_aborted_and_closes_the_upstream(
    anyio_backend: str, how: str
) -> None:
    script = SSEScript(events=openai_events(["a", "b", "c"]), stall_after=2)
    controller = abort_controller(anyio_backend)
    signal = controller.signal if how == "controller" else None
    with fail_after(BOUND):
        async with serve_test_upstream(anyio_backend, script) as upstream:
            async with open_rt(anyio_backend) as rt:
                await rt.register_adapter(["p"], _adapter(upstream.base_url))
                got_text = anyio.Event()
                chunks: list[StreamChunk] = []
                async with rt.stream(_options(), signal=signal) as call:

                    async def consume() -> None:
                        async for chunk in call:
                            chunks.append(chunk)
                            if type(chunk) is TextDelta:
                                got_text.set()

                    async def abort() -> None:
                        await got_text.wait()
                        if how == "call":
                            call.abort("enough")
                        else:
                            controller.abort("enough")

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(consume)
                        tg.start_soon(abort)
                record = await upstream.wait_connection_closed(0)
                stats = rt.statistics()
    (finish,) = _finishes(chunks)
    assert chunks[-1] is finish
    assert type(finish.reason) is FinishAborted
    assert finish.reason.failure.code == "ABORTED"
    assert finish.reason.failure.message == "enough"
    assert record.closed_by == "client"
    assert stats.calls_finished.get("aborted") == 1


async def test_idle_timeout_ends_the_call_with_timeout(anyio_backend: str) -> None:
    script = SSEScript(events=openai_events(["a", "b"]), stall_after=2)
    with fail_after(BOUND):
        async with serve_test_upstream(anyio_backend, script) as upstream:
            async with open_rt(anyio_backend) as rt:
                adapter = _adapter(upstream.base_url)
                await rt.register_adapter(["p"], adapter, stream_idle_timeout=0.3)
                async with rt.stream(_options()) as call:
                    chunks = await _collect(call)
                await upstream.wait_connection_closed(0)
                stats = rt.statistics()
    (finish,) = _finishes(chunks)
    assert type(finish.reason) is FinishError
    assert finish.reason.failure.code == "TIMEOUT"
    assert stats.watchdog_firings == 1


async def test_retry_honours_retry_after_then_succeeds(anyio_backend: str) -> None:
    limited = ErrorScript(
        status=429,
        headers={"retry-after-ms": "40"},
        body={"error": {"message": "slow down", "type": "rate_limit_exceeded"}},
    )
    route = [limited, SSEScript(events=openai_events(["ok"]))]
    with fail_after(BOUND):
        async with serve_test_upstream(anyio_backend, route) as upstream:
            async with open_rt(anyio_backend) as rt:
                await rt.register_adapter(["p"], _adapter(upstream.base_url))
                async with rt.stream_with_retry(_options()) as call:
                    events = await _collect(call)
                stats = rt.statistics()
    (scheduled,) = [e for e in events if type(e) is RetryScheduled]
    assert scheduled.attempt == 1
    assert scheduled.failure.code == "RATE_LIMIT"
    assert scheduled.delay_ms >= 40
    last = events[-1]
    assert type(last) is AttemptChunk and last.attempt == 2
    assert type(last.chunk) is Finish and type(last.chunk.reason) is FinishStop
    assert stats.retries_by_code == {"RATE_LIMIT": 1}


async def test_a_prepared_call_streams_once(anyio_backend: str) -> None:
    script = SSEScript(events=openai_events(["once"]))
    with fail_after(BOUND):
        async with serve_test_upstream(anyio_backend, script) as upstream:
            async with open_rt(anyio_backend) as rt:
                await rt.register_adapter(["p"], _adapter(upstream.base_url))
                prepared = await rt.prepare_call(LlmCallConfig(provider="p", model="m-1"))
                options = msgspec_replace(_options(), prepared.config)
                async with prepared.stream(options) as call:
                    chunks = await _collect(call)
                with pytest.raises(LlmError) as second:
                    prepared.stream(options)
    assert type(_finishes(chunks)[0].reason) is FinishStop
    assert second.value.failure.code == "INVALID_PREPARED_CALL"


def msgspec_replace(options: GenerateOptions, config: LlmCallConfig) -> GenerateOptions:
    """``options`` carrying the prepared config's fields (its materialized defaults)."""
    import msgspec

    fields = {name: getattr(config, name) for name in config.__struct_fields__}
    return msgspec.structs.replace(options, **fields)


class _Recording(llmrt.Adapter):
    """Records the requests it is given; answers each with one text block."""

    def __init__(self) -> None:
        self.seen: list[GenerateOptions] = []

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        self.seen.append(options)
        yield Finish(reason=FinishStop())


async def test_replay_state_reaches_only_the_adapter_that_made_it(anyio_backend: str) -> None:
    replay = ReplayEnvelope(response={"id": "resp_1"})
    earlier = Message(
        id="msg_1",
        role="assistant",
        content=(TextBlock(text="before"),),
        source=ModelSource(provider="p", model="m-1", replay_state=replay),
    )
    messages = (user_message("hi"), earlier, user_message("again"))
    maker, other = _Recording(), _Recording()
    with fail_after(BOUND):
        async with open_rt(anyio_backend) as rt:
            await rt.register_adapter(["p"], maker)
            await rt.register_adapter(["q"], other)
            for provider in ("p", "q"):
                options = GenerateOptions(provider=provider, model="m-1", messages=messages)
                async with rt.stream(options) as call:
                    await _collect(call)
    kept = maker.seen[0].messages[1].source
    stripped = other.seen[0].messages[1].source
    assert type(kept) is ModelSource and kept.replay_state == replay
    assert type(stripped) is ModelSource and stripped.replay_state is None


async def test_statistics_after_each_outcome(anyio_backend: str) -> None:
    route = [
        SSEScript(events=openai_events(["fine"])),
        ErrorScript(status=400, body={"error": {"message": "no", "type": "invalid_request"}}),
        SSEScript(events=openai_events(["a", "b"]), stall_after=2),
    ]
    seen: list[dict[str, int]] = []
    with fail_after(BOUND):
        async with serve_test_upstream(anyio_backend, route) as upstream:
            async with open_rt(anyio_backend) as rt:
                await rt.register_adapter(["p"], _adapter(upstream.base_url))
                for outcome in ("stop", "error", "aborted"):
                    async with rt.stream(_options()) as call:
                        async for chunk in call:
                            if outcome == "aborted" and type(chunk) is TextDelta:
                                call.abort()
                    seen.append(dict(rt.statistics().calls_finished))
                final = rt.statistics()
    assert seen == [
        {"stop": 1},
        {"stop": 1, "error": 1},
        {"stop": 1, "error": 1, "aborted": 1},
    ]
    assert final.calls_started == 3 and final.calls_in_flight == 0
    assert final.failures_by_code == {"INVALID_REQUEST": 1, "ABORTED": 1}


async def test_replace_and_dispose_under_load_give_every_call_one_finish(
    anyio_backend: str,
) -> None:
    script = SSEScript(events=openai_events(["x"] * 40), delay=0.01)
    n = 12
    finishes: list[list[Finish]] = []
    with fail_after(BOUND):
        async with serve_test_upstream(anyio_backend, script) as upstream:
            async with open_rt(anyio_backend) as rt:
                handle = await rt.register_adapter(["p"], _adapter(upstream.base_url))
                started = anyio.Event()
                streaming = 0

                async def one() -> None:
                    nonlocal streaming
                    chunks: list[Any] = []
                    async with rt.stream(_options()) as call:
                        async for chunk in call:
                            chunks.append(chunk)
                            if type(chunk) is TextDelta and len(chunks) == 2:
                                streaming += 1
                                if streaming == n:
                                    started.set()
                    finishes.append(_finishes(chunks))

                async with anyio.create_task_group() as tg:
                    for _ in range(n):
                        tg.start_soon(one)
                    await started.wait()
                    await handle.replace(["p", "p2"])
                    await handle.dispose(drain_timeout=0)
                async with rt.stream(_options()) as call:
                    after = await _collect(call)
                await upstream.wait_all_closed()
                stats = rt.statistics()
    assert len(finishes) == n
    assert all(len(f) == 1 for f in finishes)
    kinds = {type(f[0].reason) for f in finishes}
    assert kinds <= {FinishStop, FinishAborted}
    assert FinishAborted in kinds  # disposal without a drain stopped calls in flight
    (no_adapter,) = _finishes(after)
    assert type(no_adapter.reason) is FinishError
    assert no_adapter.reason.failure.code == "NO_ADAPTER"
    assert stats.registrations == 0 and stats.calls_in_flight == 0


async def test_errors_arrive_as_llm_error_with_their_failure(anyio_backend: str) -> None:
    script = ErrorScript(status=401, body={"error": {"message": "bad key", "type": "auth"}})
    with fail_after(BOUND):
        async with serve_test_upstream(anyio_backend, script) as upstream:
            async with open_rt(anyio_backend) as rt:
                await rt.register_adapter(["p"], _adapter(upstream.base_url))
                with pytest.raises(LlmError) as auth:
                    await rt.complete(_options())
                with pytest.raises(LlmError) as missing:
                    await rt.complete(_options(provider="nowhere"))
                with pytest.raises(LlmError) as invalid:
                    await rt.register_adapter([], _adapter(upstream.base_url))
                with pytest.raises(TypeError):
                    rt.stream("not options")
    assert auth.value.failure.code == "AUTH"
    assert KEY not in auth.value.failure.message
    assert missing.value.failure.code == "NO_ADAPTER"
    assert invalid.value.failure.code == "INVALID_PROVIDER"
