"""The registry: registrations, routes, disposal, subscriptions, directory, discovery, shutdown.

DESIGN.md §2 items 6, 8 and 11. Every timing runs on trio's autojump clock.
"""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import msgspec
import pytest
import trio
from conftest import collect, finish_reason, make_options
from trio.testing import wait_all_tasks_blocked

import llmrt
from llmrt import (
    AlwaysRetryPolicy,
    BlockStart,
    ErrorCode,
    Finish,
    FinishAborted,
    FinishError,
    FinishStop,
    LlmError,
    NormalRetryPolicy,
    ResolvedRetryPolicy,
    StreamChunk,
    TextDelta,
    default_retry_policy,
)
from llmrt.adapter import ConfigurableProvider, DiscoveredModel, ModelDiscoveryRequest, ProviderInfo
from llmrt.adapters.scripted import Delay, ScriptedAdapter, Stall, Step, text_script

_routes = itertools.count()


def scripted(steps: list[Step] | None = None, **kw: Any) -> ScriptedAdapter:
    return ScriptedAdapter(text_script(["ok"]) if steps is None else steps, **kw)


def delayed(seconds: float, text: str = "late") -> list[Step]:
    """A text answer whose first chunk arrives after ``seconds``."""
    return [Delay(seconds), *text_script([text])]


def stalling() -> list[Step]:
    """One block-start, then nothing ever again."""
    return [BlockStart(index=0, block_type="text"), TextDelta(index=0, text="part"), Stall()]


@attrs.define(eq=False)
class RecordingAdapter(ScriptedAdapter):
    """Records when `aclose` ran and how many of its streams were still open then."""

    aclose_at: float | None = attrs.field(default=None, init=False)
    open_at_close: int | None = attrs.field(default=None, init=False)

    async def aclose(self) -> None:
        self.aclose_at = trio.current_time()
        self.open_at_close = self.open_streams
        await super().aclose()


@attrs.define(eq=False)
class BadInfoAdapter(ScriptedAdapter):
    """`provider_info` misbehaves for route ``bad`` only, in the way ``mode`` says."""

    mode: str = "wrong-id"

    def provider_info(self, provider: str) -> ProviderInfo:
        if provider != "bad":
            return super().provider_info(provider)
        if self.mode == "raise":
            raise RuntimeError("provider_info exploded")
        if self.mode == "wrong-id":
            return ProviderInfo(id="other", name="Other")
        return {"id": provider, "name": provider}  # type: ignore[return-value]


@attrs.define(eq=False)
class RaisingPolicyAdapter(ScriptedAdapter):
    def provider_retry_policy(self, provider: str) -> ResolvedRetryPolicy | None:
        raise KeyError(provider)


async def llm_code(awaitable: Any) -> str:
    """Await ``awaitable``, which must raise `LlmError`; its code."""
    with pytest.raises(LlmError) as info:
        await awaitable
    return info.value.code


def provider_ids(rt: llmrt.LlmRuntime) -> list[str]:
    return [info.id for info in rt.list_providers()]


async def assert_serving(rt: llmrt.LlmRuntime) -> None:
    """The runtime still registers adapters and streams calls through them."""
    route = f"serving-{next(_routes)}"
    adapter = scripted(text_script(["still", " here"]))
    await rt.register_adapter([route], adapter)
    chunks = await collect(rt.stream(make_options(route)))
    assert isinstance(finish_reason(chunks), FinishStop)
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["still", " here"]


def error_code(chunks: list[StreamChunk]) -> str:
    reason = finish_reason(chunks)
    assert isinstance(reason, FinishError), reason
    return reason.failure.code


# ---- register_adapter ------------------------------------------------------------------


async def test_duplicate_route_refuses_the_whole_registration(
    runtime: llmrt.LlmRuntime,
) -> None:
    first = scripted()
    await runtime.register_adapter(["a", "b"], first)
    second = scripted()
    code = await llm_code(runtime.register_adapter(["c", "b"], second))
    assert code == ErrorCode.DUPLICATE_ADAPTER
    assert provider_ids(runtime) == ["a", "b"]
    assert runtime.statistics().registrations == 1
    # "c" was not added even for a moment: it still has no adapter.
    assert error_code(await collect(runtime.stream(make_options("c")))) == ErrorCode.NO_ADAPTER
    assert second.requests == []
    # The refused instance is not held as registered: it can register elsewhere.
    await runtime.register_adapter(["c"], second)
    assert provider_ids(runtime) == ["a", "b", "c"]
    await assert_serving(runtime)


@pytest.mark.parametrize(
    "providers",
    [
        [],
        [""],
        ["has space"],
        ["ok", 42],
        ["x" * 129],
        ["-leading-dash"],
        ["a", "b", "a"],
        "abc",
        None,
    ],
    ids=[
        "empty",
        "empty-name",
        "space",
        "non-str",
        "too-long",
        "bad-start",
        "twice",
        "str",
        "none",
    ],
)
async def test_invalid_provider_lists_are_refused(
    runtime: llmrt.LlmRuntime, providers: Any
) -> None:
    adapter = scripted()
    assert (
        await llm_code(runtime.register_adapter(providers, adapter)) == ErrorCode.INVALID_PROVIDER
    )
    assert runtime.list_providers() == ()
    assert runtime.statistics().registrations == 0
    # Nothing of the refused registration lingers: the same instance registers fine.
    await runtime.register_adapter(["fine"], adapter)
    assert provider_ids(runtime) == ["fine"]
    await assert_serving(runtime)


async def test_provider_names_at_the_limits_are_accepted(runtime: llmrt.LlmRuntime) -> None:
    longest = "x" * 128
    await runtime.register_adapter((longest, "a.b_c:d-e", "9"), scripted())
    assert provider_ids(runtime) == [longest, "a.b_c:d-e", "9"]


@pytest.mark.parametrize("mode", ["wrong-id", "raise", "not-provider-info"])
async def test_misbehaving_provider_info_refuses_the_registration(
    runtime: llmrt.LlmRuntime, mode: str
) -> None:
    adapter = BadInfoAdapter(text_script(["x"]), mode=mode)
    code = await llm_code(runtime.register_adapter(["good", "bad"], adapter))
    assert code == ErrorCode.INVALID_PROVIDER
    assert runtime.list_providers() == ()
    await assert_serving(runtime)


def bypassing(cls: type[ResolvedRetryPolicy], **fields: Any) -> ResolvedRetryPolicy:
    """A policy with ``fields`` set after construction, past the constructor's checks."""
    policy = cls()
    for name, value in fields.items():
        msgspec.structs.force_setattr(policy, name, value)
    return policy


INVALID_POLICIES = [
    (NormalRetryPolicy, {"initial_delay_ms": -1.0}),
    (NormalRetryPolicy, {"jitter_ratio": 1.5}),
    (NormalRetryPolicy, {"max_retries": -1}),
    (NormalRetryPolicy, {"initial_delay_ms": 500.0, "max_delay_ms": 100.0}),
    (NormalRetryPolicy, {"max_delay_ms": float("inf")}),
    (AlwaysRetryPolicy, {"jitter_ratio": -0.1}),
    (AlwaysRetryPolicy, {"initial_delay_ms": -5.0}),
]


@pytest.mark.parametrize(("cls", "fields"), INVALID_POLICIES)
async def test_invalid_retry_policies_are_refused_by_constructor_and_registry(
    runtime: llmrt.LlmRuntime, cls: type[ResolvedRetryPolicy], fields: dict[str, Any]
) -> None:
    with pytest.raises(ValueError):
        cls(**fields)
    adapter = scripted(retry_policy=bypassing(cls, **fields))
    code = await llm_code(runtime.register_adapter(["p"], adapter))
    assert code == ErrorCode.INVALID_PROVIDER
    assert runtime.list_providers() == ()
    await assert_serving(runtime)


@pytest.mark.parametrize("policy", [{"mode": "normal"}, "normal", 3])
async def test_a_retry_policy_that_is_not_a_policy_is_refused(
    runtime: llmrt.LlmRuntime, policy: Any
) -> None:
    adapter = scripted(retry_policy=policy)
    assert await llm_code(runtime.register_adapter(["p"], adapter)) == ErrorCode.INVALID_PROVIDER
    assert runtime.list_providers() == ()


async def test_a_raising_retry_policy_hook_is_refused(runtime: llmrt.LlmRuntime) -> None:
    adapter = RaisingPolicyAdapter(text_script(["x"]))
    assert await llm_code(runtime.register_adapter(["p"], adapter)) == ErrorCode.INVALID_PROVIDER
    await assert_serving(runtime)


async def test_the_same_adapter_instance_cannot_register_twice(runtime: llmrt.LlmRuntime) -> None:
    adapter = scripted()
    await runtime.register_adapter(["a"], adapter)
    assert await llm_code(runtime.register_adapter(["b"], adapter)) == ErrorCode.DUPLICATE_ADAPTER
    assert provider_ids(runtime) == ["a"]
    assert runtime.statistics().registrations == 1
    await assert_serving(runtime)


async def test_register_refuses_non_adapters_and_bad_idle_timeouts(
    runtime: llmrt.LlmRuntime,
) -> None:
    with pytest.raises(TypeError):
        await runtime.register_adapter(["p"], object())  # type: ignore[arg-type]
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            await runtime.register_adapter(["p"], scripted(), stream_idle_timeout=bad)
    assert runtime.list_providers() == ()
    await assert_serving(runtime)


# ---- list_providers and replace --------------------------------------------------------


async def test_list_providers_in_registration_order_with_display_names(
    runtime: llmrt.LlmRuntime,
) -> None:
    await runtime.register_adapter(["z", "a"], scripted(names={"z": "Zed"}))
    await runtime.register_adapter(["m"], scripted(names={"m": "Em"}))
    assert runtime.list_providers() == (
        ProviderInfo(id="z", name="Zed"),
        ProviderInfo(id="a", name="a"),
        ProviderInfo(id="m", name="Em"),
    )


async def test_a_conflicting_replace_leaves_the_old_routes_serving(
    runtime: llmrt.LlmRuntime,
) -> None:
    first = scripted(text_script(["from first"]))
    handle = await runtime.register_adapter(["a1", "a2"], first)
    await runtime.register_adapter(["b"], scripted())
    assert await llm_code(handle.replace(["a3", "b"])) == ErrorCode.DUPLICATE_ADAPTER
    assert await llm_code(handle.replace(["a3", "no good"])) == ErrorCode.INVALID_PROVIDER
    assert await llm_code(handle.replace(["a3", "a3"])) == ErrorCode.INVALID_PROVIDER
    assert provider_ids(runtime) == ["a1", "a2", "b"]
    chunks = await collect(runtime.stream(make_options("a2")))
    assert isinstance(finish_reason(chunks), FinishStop)
    assert [r.provider for r in first.requests] == ["a2"]
    assert error_code(await collect(runtime.stream(make_options("a3")))) == ErrorCode.NO_ADAPTER


async def test_replace_keeps_surviving_routes_in_place(runtime: llmrt.LlmRuntime) -> None:
    handle = await runtime.register_adapter(["a1", "a2"], scripted())
    await runtime.register_adapter(["b"], scripted())
    await handle.replace(["a3", "a2"])
    assert provider_ids(runtime) == ["a2", "b", "a3"]
    assert error_code(await collect(runtime.stream(make_options("a1")))) == ErrorCode.NO_ADAPTER


async def test_replace_with_no_routes_keeps_the_registration_alive(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = scripted()
    handle = await runtime.register_adapter(["p"], adapter)
    await handle.replace([])
    assert runtime.list_providers() == ()
    assert error_code(await collect(runtime.stream(make_options("p")))) == ErrorCode.NO_ADAPTER
    assert runtime.statistics().registrations == 1
    assert not adapter.aclosed
    await handle.replace(["p2"])
    assert isinstance(finish_reason(await collect(runtime.stream(make_options("p2")))), FinishStop)
    assert len(adapter.requests) == 1


async def test_a_disposed_handle_refuses_replace_and_dispose_is_idempotent(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = scripted()
    handle = await runtime.register_adapter(["p"], adapter)
    await handle.dispose()
    assert adapter.aclosed
    assert runtime.statistics().registrations == 0
    assert await llm_code(handle.replace(["p"])) == ErrorCode.REGISTRATION_DISPOSED
    assert runtime.list_providers() == ()
    await handle.dispose()  # a second dispose is a no-op
    # The route is free again for another adapter.
    await runtime.register_adapter(["p"], scripted())
    assert provider_ids(runtime) == ["p"]


# ---- dispose: routes vanish, running calls drain, then the adapter closes ---------------


async def test_dispose_lets_a_running_call_finish_before_closing_the_adapter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with llmrt.open_runtime(drain_timeout=30.0) as rt:
        adapter = RecordingAdapter(delayed(10.0))
        handle = await rt.register_adapter(["p"], adapter)
        seen: dict[str, Any] = {}

        async def consume() -> None:
            seen["chunks"] = await collect(rt.stream(make_options("p")))
            seen["finished_at"] = trio.current_time()

        async def dispose() -> None:
            await handle.dispose()
            seen["disposed_at"] = trio.current_time()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await wait_all_tasks_blocked()
            assert len(adapter.requests) == 1  # the call is inside the adapter
            start = trio.current_time()
            nursery.start_soon(dispose)
            await wait_all_tasks_blocked()
            # The routes vanished at once, while the call is still running.
            assert rt.list_providers() == ()
            assert trio.current_time() == start
            late = await collect(rt.stream(make_options("p")))
            assert error_code(late) == ErrorCode.NO_ADAPTER
            assert len(adapter.requests) == 1
            assert not adapter.aclosed

        assert isinstance(finish_reason(seen["chunks"]), FinishStop)
        assert [c.text for c in seen["chunks"] if isinstance(c, TextDelta)] == ["late"]
        assert seen["finished_at"] == start + 10.0
        # The adapter closed once the call ended, and not before.
        assert adapter.closed_at == [start + 10.0]
        assert adapter.aclose_at == start + 10.0
        assert adapter.open_at_close == 0
        assert seen["disposed_at"] == start + 10.0


async def test_dispose_aborts_calls_still_running_at_the_drain_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with llmrt.open_runtime() as rt:
        adapter = RecordingAdapter(stalling())
        handle = await rt.register_adapter(["p"], adapter)
        received: list[tuple[StreamChunk, float]] = []
        disposed_at: list[float] = []

        async with trio.open_nursery() as nursery:

            async def consume() -> None:
                async with rt.stream(make_options("p")) as call:
                    async for chunk in call:
                        received.append((chunk, trio.current_time()))

            async def dispose() -> None:
                await handle.dispose(drain_timeout=5.0)
                disposed_at.append(trio.current_time())

            nursery.start_soon(consume)
            await wait_all_tasks_blocked()
            assert len(received) == 2  # block-start, text-delta; then the adapter stalls
            start = trio.current_time()
            nursery.start_soon(dispose)

        last, finished_at = received[-1]
        assert isinstance(last, Finish)
        assert isinstance(last.reason, FinishAborted)
        assert last.reason.failure.code == ErrorCode.ABORTED
        assert finished_at == start + 5.0
        assert adapter.closed_at == [start + 5.0]
        assert adapter.aclose_at == start + 5.0
        assert adapter.open_at_close == 0
        assert disposed_at == [start + 5.0]


async def test_dispose_uses_the_runtime_drain_timeout_by_default(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with llmrt.open_runtime(drain_timeout=7.0) as rt:
        adapter = RecordingAdapter(stalling())
        handle = await rt.register_adapter(["p"], adapter)
        async with rt.stream(make_options("p")) as call:
            await call.__anext__()
            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(handle.dispose)
                chunks = [chunk async for chunk in call]
            assert trio.current_time() == start + 7.0
        reason = finish_reason(chunks)
        assert isinstance(reason, FinishAborted)
        assert reason.failure.code == ErrorCode.ABORTED
        assert adapter.aclose_at == start + 7.0


async def test_a_negative_drain_timeout_is_refused_without_harm(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = scripted()
    handle = await runtime.register_adapter(["p"], adapter)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError):
            await handle.dispose(drain_timeout=bad)
    assert provider_ids(runtime) == ["p"]
    assert not adapter.aclosed
    assert isinstance(finish_reason(await collect(runtime.stream(make_options("p")))), FinishStop)
    await assert_serving(runtime)


# ---- adapters_updated ------------------------------------------------------------------


def take_one_wake(updates: trio.MemoryReceiveChannel[None]) -> None:
    """Exactly one wake-up is pending (payload-free and coalesced)."""
    updates.receive_nowait()
    with pytest.raises(trio.WouldBlock):
        updates.receive_nowait()


async def test_a_subscriber_wakes_after_every_commit(runtime: llmrt.LlmRuntime) -> None:
    entry = ConfigurableProvider(provider="cfg", display_name="Cfg", settings_ns="ns")
    async with runtime.adapters_updated() as updates:
        with pytest.raises(trio.WouldBlock):
            updates.receive_nowait()
        handle = await runtime.register_adapter(["p"], scripted())
        take_one_wake(updates)
        await handle.replace(["p", "q"])
        take_one_wake(updates)
        directory = await runtime.register_configurable_providers([entry])
        take_one_wake(updates)
        await directory.dispose()
        take_one_wake(updates)
        await handle.dispose()
        take_one_wake(updates)
        # A refused registration commits nothing and wakes nobody.
        await llm_code(runtime.register_adapter([""], scripted()))
        with pytest.raises(trio.WouldBlock):
            updates.receive_nowait()


async def test_a_subscriber_that_never_reads_never_blocks_commits(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    async with runtime.adapters_updated() as updates:
        handle = await runtime.register_adapter(["p"], scripted())
        with trio.fail_after(1.0):
            for i in range(100):
                await handle.replace(["p"] if i % 2 else ["q"])
        assert provider_ids(runtime) == ["p"]
        take_one_wake(updates)


async def test_a_subscriber_that_left_is_dropped(runtime: llmrt.LlmRuntime) -> None:
    registry = runtime._core.registry
    async with runtime.adapters_updated():
        assert registry.subscriber_count == 1
    assert registry.subscriber_count == 0
    # One that closed its end but stayed inside the block is dropped at the next commit.
    async with runtime.adapters_updated() as updates:
        await updates.aclose()
        await runtime.register_adapter(["p"], scripted())
        assert registry.subscriber_count == 0
    assert provider_ids(runtime) == ["p"]


async def test_a_failing_observer_does_not_affect_the_registry(
    runtime: llmrt.LlmRuntime,
) -> None:
    woken: list[int] = []

    async def observer(*, task_status: trio.TaskStatus[None]) -> None:
        async with runtime.adapters_updated() as updates:
            task_status.started()
            async for _ in updates:
                woken.append(len(runtime.list_providers()))
                raise RuntimeError("observer bug")

    with pytest.RaisesGroup(RuntimeError):
        async with trio.open_nursery() as nursery:
            await nursery.start(observer)
            await runtime.register_adapter(["p"], scripted())
    assert woken == [1]  # it woke and saw the committed state
    assert provider_ids(runtime) == ["p"]
    assert runtime._core.registry.subscriber_count == 0
    assert isinstance(finish_reason(await collect(runtime.stream(make_options("p")))), FinishStop)
    await assert_serving(runtime)


async def test_subscriptions_end_when_the_runtime_closes() -> None:
    ended = trio.Event()
    async with trio.open_nursery() as nursery:
        async with llmrt.open_runtime() as rt:

            async def observer(*, task_status: trio.TaskStatus[None]) -> None:
                async with rt.adapters_updated() as updates:
                    task_status.started()
                    async for _ in updates:
                        pass
                ended.set()

            await nursery.start(observer)
            await rt.register_adapter(["p"], scripted())
        with trio.fail_after(5):
            await ended.wait()


# ---- retry policy per route (item 8) ---------------------------------------------------


async def test_provider_retry_policy_defaults_and_adapter_policies(
    runtime: llmrt.LlmRuntime,
) -> None:
    own = AlwaysRetryPolicy(initial_delay_ms=10.0, max_delay_ms=20.0, jitter_ratio=0.0)
    await runtime.register_adapter(["plain"], scripted())
    await runtime.register_adapter(["custom"], scripted(retry_policy=own))
    assert runtime.provider_retry_policy("plain") == default_retry_policy()
    assert runtime.provider_retry_policy("custom") == own
    with pytest.raises(LlmError) as info:
        runtime.provider_retry_policy("nope")
    assert info.value.code == ErrorCode.NO_ADAPTER


async def test_retry_policy_of_a_call_survives_route_replacement(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    first_policy = NormalRetryPolicy(max_retries=1)
    second_policy = AlwaysRetryPolicy(jitter_ratio=0.5)
    steps = text_script(["slow"])
    steps.insert(1, Delay(5.0))
    first = scripted(steps, retry_policy=first_policy)
    second = scripted(retry_policy=second_policy)
    first_handle = await runtime.register_adapter(["p"], first)
    second_handle = await runtime.register_adapter(["q"], second)
    async with runtime.stream(make_options("p")) as call:
        assert isinstance(await call.__anext__(), BlockStart)
        assert llmrt.actors.retry_policy_of(call) == first_policy
        await first_handle.replace(["elsewhere"])
        await second_handle.replace(["q", "p"])
        assert runtime.provider_retry_policy("p") == second_policy
        rest = [chunk async for chunk in call]
        assert isinstance(finish_reason(rest), FinishStop)
        assert llmrt.actors.retry_policy_of(call) == first_policy
    async with runtime.stream(make_options("p")) as later:
        assert isinstance(finish_reason([chunk async for chunk in later]), FinishStop)
        assert llmrt.actors.retry_policy_of(later) == second_policy
    assert len(second.requests) == 1


# ---- configurable-provider directory ---------------------------------------------------


def cfg(provider: str, ns: str = "ns") -> ConfigurableProvider:
    return ConfigurableProvider(provider=provider, display_name=provider.upper(), settings_ns=ns)


def cfg_ids(rt: llmrt.LlmRuntime) -> list[str]:
    return [entry.provider for entry in rt.list_configurable_providers()]


async def test_directory_lists_in_declaration_order_and_replaces_atomically(
    runtime: llmrt.LlmRuntime,
) -> None:
    first = await runtime.register_configurable_providers([cfg("x"), cfg("y")])
    second = await runtime.register_configurable_providers((cfg("w", "other"),))
    assert runtime.list_configurable_providers() == (cfg("x"), cfg("y"), cfg("w", "other"))
    await first.replace([cfg("z"), cfg("x")])
    assert cfg_ids(runtime) == ["z", "x", "w"]
    # A conflicting replace changes nothing.
    assert await llm_code(first.replace([cfg("q"), cfg("w")])) == ErrorCode.DUPLICATE_ADAPTER
    assert await llm_code(first.replace([])) == ErrorCode.INVALID_PROVIDER
    assert cfg_ids(runtime) == ["z", "x", "w"]
    await first.dispose()
    assert cfg_ids(runtime) == ["w"]
    await first.dispose()  # idempotent
    assert await llm_code(first.replace([cfg("x")])) == ErrorCode.REGISTRATION_DISPOSED
    await second.dispose()
    assert runtime.list_configurable_providers() == ()


@pytest.mark.parametrize(
    ("entries", "code"),
    [
        ([], ErrorCode.INVALID_PROVIDER),
        ("x", ErrorCode.INVALID_PROVIDER),
        ([cfg("new"), cfg("bad name")], ErrorCode.INVALID_PROVIDER),
        ([cfg("new"), {"provider": "y"}], ErrorCode.INVALID_PROVIDER),
        (
            [cfg("new"), ConfigurableProvider(provider="y", display_name="Y", settings_ns="")],
            ErrorCode.INVALID_PROVIDER,
        ),
        ([cfg("new"), cfg("new", "ns2")], ErrorCode.INVALID_PROVIDER),
        ([cfg("new"), cfg("taken")], ErrorCode.DUPLICATE_ADAPTER),
    ],
    ids=["empty", "str", "bad-name", "not-an-entry", "no-ns", "twice", "declared-elsewhere"],
)
async def test_directory_registration_is_all_or_nothing(
    runtime: llmrt.LlmRuntime, entries: Any, code: str
) -> None:
    await runtime.register_configurable_providers([cfg("taken")])
    assert await llm_code(runtime.register_configurable_providers(entries)) == code
    assert cfg_ids(runtime) == ["taken"]
    fresh = await runtime.register_configurable_providers([cfg("new")])
    assert cfg_ids(runtime) == ["taken", "new"]
    await fresh.dispose()


# ---- model discovery -------------------------------------------------------------------

SECRET = "sk-test-0123456789abcdef"


async def test_discover_models_dedupes_by_id_in_endpoint_order(runtime: llmrt.LlmRuntime) -> None:
    asked: list[ModelDiscoveryRequest] = []

    async def discover(request: ModelDiscoveryRequest) -> list[DiscoveredModel]:
        asked.append(request)
        return [
            DiscoveredModel(id="b", name="B first"),
            DiscoveredModel(id="a", context_window=8192),
            DiscoveredModel(id="b", name="B again"),
            DiscoveredModel(id="c", max_tokens=100),
        ]

    handle = await runtime.register_model_discovery("openai-compatible", discover)
    request = ModelDiscoveryRequest(base_url="http://127.0.0.1:1/v1", api_key=SECRET)
    found = await runtime.discover_models("openai-compatible", request)
    assert found == (
        DiscoveredModel(id="b", name="B first"),
        DiscoveredModel(id="a", context_window=8192),
        DiscoveredModel(id="c", max_tokens=100),
    )
    assert asked == [request]
    await handle.dispose()
    code = await llm_code(runtime.discover_models("openai-compatible", request))
    assert code == ErrorCode.NO_ADAPTER
    await handle.dispose()  # idempotent


async def test_discovery_offers_are_unique_per_namespace(runtime: llmrt.LlmRuntime) -> None:
    async def discover_one(request: ModelDiscoveryRequest) -> list[DiscoveredModel]:
        return [DiscoveredModel(id="one")]

    async def discover_two(request: ModelDiscoveryRequest) -> list[DiscoveredModel]:
        return [DiscoveredModel(id="two")]

    first = await runtime.register_model_discovery("ns", discover_one)
    assert await llm_code(runtime.register_model_discovery("ns", discover_two)) == (
        ErrorCode.DUPLICATE_ADAPTER
    )
    assert await llm_code(runtime.register_model_discovery("", discover_two)) == (
        ErrorCode.INVALID_PROVIDER
    )
    request = ModelDiscoveryRequest()
    assert [m.id for m in await runtime.discover_models("ns", request)] == ["one"]
    await first.dispose()
    second = await runtime.register_model_discovery("ns", discover_two)
    # The old handle no longer owns the namespace: disposing it again changes nothing.
    await first.dispose()
    assert [m.id for m in await runtime.discover_models("ns", request)] == ["two"]
    await second.dispose()


@pytest.mark.parametrize(
    "answer",
    [
        [DiscoveredModel(id="")],
        [DiscoveredModel(id="ok", context_window=0)],
        [DiscoveredModel(id="ok", max_tokens=-5)],
        [SECRET],
        [{"id": SECRET, "contextWindow": SECRET}],
        None,
        42,
        [object()],
    ],
    ids=[
        "empty-id",
        "zero-window",
        "negative-max",
        "str-item",
        "bad-field",
        "none",
        "int",
        "object",
    ],
)
async def test_malformed_discovery_answers_are_refused_without_leaking_the_key(
    runtime: llmrt.LlmRuntime, answer: Any
) -> None:
    async def discover(request: ModelDiscoveryRequest) -> Any:
        return answer

    await runtime.register_model_discovery("ns", discover)
    request = ModelDiscoveryRequest(base_url="http://127.0.0.1:1", api_key=SECRET)
    with pytest.raises(LlmError) as info:
        await runtime.discover_models("ns", request)
    assert info.value.code == ErrorCode.INVALID_MODEL_INFO
    assert SECRET not in str(info.value)
    assert SECRET not in info.value.failure.message
    assert SECRET not in repr(info.value)


async def test_unknown_discovery_namespace_does_not_leak_the_key(
    runtime: llmrt.LlmRuntime,
) -> None:
    request = ModelDiscoveryRequest(provider="p", api_key=SECRET)
    with pytest.raises(LlmError) as info:
        await runtime.discover_models("nowhere", request)
    assert info.value.code == ErrorCode.NO_ADAPTER
    assert SECRET not in str(info.value)
    assert SECRET not in repr(request)


# ---- runtime shutdown (item 11) --------------------------------------------------------


async def test_leaving_the_runtime_aborts_outside_consumers_and_closes_adapters(
    autojump_clock: trio.testing.MockClock,
) -> None:
    received: list[StreamChunk] = []
    busy = RecordingAdapter(stalling())
    idle = RecordingAdapter(text_script(["x"]))
    async with trio.open_nursery() as outer:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["busy"], busy)
            await rt.register_adapter(["idle"], idle)

            async def consume() -> None:
                async with rt.stream(make_options("busy")) as call:
                    async for chunk in call:
                        received.append(chunk)

            outer.start_soon(consume)
            await wait_all_tasks_blocked()
            assert len(received) == 2
            assert busy.open_streams == 1
            closing_at = trio.current_time()
        assert busy.aclosed
        assert idle.aclosed
        assert busy.open_at_close == 0
        assert busy.closed_at == [closing_at]
        # Nothing waited for a grace period or a timeout to run out.
        assert trio.current_time() == closing_at
    reason = finish_reason(received)
    assert isinstance(reason, FinishAborted)
    assert reason.failure.code == ErrorCode.ABORTED


async def test_a_body_exception_leaves_open_runtime_unwrapped() -> None:
    adapter = scripted()
    with pytest.raises(KeyError) as info:
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter)
            raise KeyError("body failure")
    assert type(info.value) is KeyError
    assert info.value.args == ("body failure",)
    assert adapter.aclosed


async def test_a_closed_runtime_refuses_registrations() -> None:
    async with llmrt.open_runtime() as rt:
        pass
    with pytest.raises(trio.ClosedResourceError):
        await rt.register_adapter(["p"], scripted())


# ---- statistics ------------------------------------------------------------------------


async def test_statistics_is_an_immutable_snapshot(runtime: llmrt.LlmRuntime) -> None:
    before = runtime.statistics()
    assert before.registrations == 0
    first = await runtime.register_adapter(["a"], scripted())
    second = await runtime.register_adapter(["b"], scripted())
    assert runtime.statistics().registrations == 2
    await second.replace([])
    assert runtime.statistics().registrations == 2
    await collect(runtime.stream(make_options("a")))
    await first.dispose()
    after = runtime.statistics()
    assert after.registrations == 1
    assert after.calls_started == 1
    assert after.calls_finished == {"stop": 1}
    # Earlier snapshots do not move, and cannot be changed.
    assert before.registrations == 0
    assert before.calls_started == 0
    with pytest.raises(AttributeError):
        before.registrations = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        after.calls_finished["stop"] = 99  # type: ignore[index]
    assert runtime.statistics().calls_finished == {"stop": 1}
