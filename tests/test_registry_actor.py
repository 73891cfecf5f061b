"""The registry is an actor: its task applies typed commands in order; readers never wait on it."""

from __future__ import annotations

import contextlib
from typing import Any

import attrs
import outcome
import pytest
import trio
from conftest import collect, finish_reason, make_options
from trio.testing import wait_all_tasks_blocked

import llmrt
from llmrt import ErrorCode, FinishStop, LlmError
from llmrt.actors._registry import Register, Registry, Reply
from llmrt.adapter import ConfigurableProvider, ProviderInfo
from llmrt.adapters.scripted import ScriptedAdapter, text_script


@attrs.define(eq=False)
class TaskNoting(ScriptedAdapter):
    """Notes the task that validates its routes (`provider_info` runs while a change applies)."""

    tasks: list[trio.lowlevel.Task] = attrs.field(factory=list, init=False)

    def provider_info(self, provider: str) -> ProviderInfo:
        self.tasks.append(trio.lowlevel.current_task())
        return super().provider_info(provider)


def noting() -> TaskNoting:
    return TaskNoting(text_script(["ok"]))


async def test_changes_are_applied_in_the_registry_task_not_the_callers() -> None:
    async with llmrt.open_runtime() as rt:
        first, second = noting(), noting()
        handle = await rt.register_adapter(["a"], first)
        await rt.register_adapter(["b"], second)
        await handle.replace(["a", "a2"])
        me = trio.lowlevel.current_task()
        applied = {*first.tasks, *second.tasks}
        assert len(applied) == 1  # one task applied all three changes
        (actor,) = applied
        assert actor is not me
        assert actor.name == "llmrt.registry"


async def test_concurrent_changes_commit_one_at_a_time_in_arrival_order() -> None:
    results: dict[int, Any] = {}
    async with llmrt.open_runtime() as rt:
        registry = rt._core.registry
        start = registry.topology.version

        async def claim(n: int) -> None:
            try:
                results[n] = await rt.register_adapter(["contested", f"own{n}"], noting())
            except LlmError as exc:
                results[n] = exc.code

        async with trio.open_nursery() as nursery:
            for n in range(8):
                nursery.start_soon(claim, n)
        # The first command to arrive won the contested route; every other one
        # was refused whole (its own route too), without a commit.
        winners = [n for n, r in results.items() if not isinstance(r, str)]
        assert len(winners) == 1
        assert (
            sorted(r for r in results.values() if isinstance(r, str))
            == [ErrorCode.DUPLICATE_ADAPTER] * 7
        )
        assert registry.topology.version == start + 1
        assert list(registry.topology.routes) == ["contested", f"own{winners[0]}"]


async def test_a_call_reads_the_published_topology_while_the_actor_is_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Route lookups never wait on the mailbox: calls run while a command is mid-apply."""
    release = trio.Event()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["hi"])))
        registry = rt._core.registry
        apply = Registry._apply

        async def held(self: Registry, command: Any, nursery: trio.Nursery) -> object:
            await release.wait()
            return await apply(self, command, nursery)

        monkeypatch.setattr(Registry, "_apply", held)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.register_adapter, ["q"], ScriptedAdapter(text_script(["x"])))
                await wait_all_tasks_blocked()
                assert "q" not in registry.topology.routes  # the command waits in the actor
                for _ in range(3):
                    chunks = await collect(rt.stream(make_options("p")))
                    assert isinstance(finish_reason(chunks), FinishStop)
                assert [p.id for p in rt.list_providers()] == ["p"]
                release.set()
            assert "q" in registry.topology.routes


async def test_a_disposal_drains_in_its_registration_while_the_actor_applies_more() -> None:
    release = trio.Event()
    entered = trio.Event()

    @attrs.define(eq=False)
    class SlowClose(ScriptedAdapter):
        async def aclose(self) -> None:
            entered.set()
            await release.wait()
            await super().aclose()

    async with llmrt.open_runtime() as rt:
        with trio.fail_after(10):
            slow = await rt.register_adapter(["slow"], SlowClose(text_script(["x"])))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(slow.dispose)
                await entered.wait()  # the registration is closing its adapter
                entry = ConfigurableProvider(
                    provider="later", display_name="L", settings_ns="later"
                )
                directory = await rt.register_configurable_providers([entry])
                await directory.dispose()
                assert rt.list_configurable_providers() == ()
                release.set()


async def test_a_command_reply_is_set_once_and_raises_what_the_actor_raised() -> None:
    reply = Reply()
    reply.set(outcome.Error(LlmError(ErrorCode.INVALID_PROVIDER, "no")))
    reply.set(outcome.Value(1))  # ignored: the first result stands
    with pytest.raises(LlmError) as info:
        await reply.wait()
    assert info.value.code == ErrorCode.INVALID_PROVIDER


async def test_commands_waiting_when_the_actor_ends_are_refused() -> None:
    registry = Registry()
    async with trio.open_nursery() as nursery:
        await nursery.start(registry.run)
        # Queue a command behind the close, without the actor running in between.
        command = Register(["p"], noting(), 1.0)
        registry._mailbox.send_nowait(command)
        registry.close()
        with pytest.raises(trio.ClosedResourceError):
            await registry.register(["q"], noting(), 1.0)
    # The queued command was applied or refused, never left unanswered.
    with trio.fail_after(1):
        with contextlib.suppress(trio.ClosedResourceError):
            await command.reply.wait()
    assert registry.topology.routes == {}
    await wait_all_tasks_blocked()
