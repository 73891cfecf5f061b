"""The HTTP API's client watchers start after their calls' first steps (`_Starter`)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from llmrt.actors.gateway import _http_handler
from llmrt.actors.gateway._http_handler import _Starter, _watched


async def test_a_watcher_starts_after_the_call_task_started_beside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order: list[str] = []

    async def watcher(*args: Any) -> None:
        order.append(f"watch-{args[0]}")

    monkeypatch.setattr(_http_handler, "_watched", watcher)

    async def call_step(n: int) -> None:
        order.append(f"call-{n}")

    async with trio.open_nursery() as nursery:
        starter = _Starter(nursery)
        nursery.start_soon(starter.run)
        await trio.testing.wait_all_tasks_blocked()
        # As a request's task does: the watcher handed over, then the call task
        # started, in one step. trio orders a batch at random: 20 rounds would
        # show a watcher that could run first.
        for n in range(20):
            starter.start((n,))  # type: ignore[arg-type]
            nursery.start_soon(call_step, n)
            await trio.testing.wait_all_tasks_blocked()
            assert order[-2:] == [f"call-{n}", f"watch-{n}"]
        # Several handed over in one step start together, each once.
        order.clear()
        for n in range(3):
            starter.start((n,))  # type: ignore[arg-type]
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(order) == ["watch-0", "watch-1", "watch-2"]
        nursery.cancel_scope.cancel()


class _Untouchable:
    def __init__(self, touched: list[str]) -> None:
        self.touched = touched

    def __getattr__(self, name: str) -> Any:
        self.touched.append(name)
        raise AssertionError(f"the watcher of an ended call touched its {name}")


async def test_a_watcher_whose_call_ended_before_it_started_touches_nothing() -> None:
    scope = trio.CancelScope()
    scope.cancel()
    touched: list[str] = []
    parts = [_Untouchable(touched) for _ in range(3)]
    with trio.fail_after(5):
        await _watched(scope, *parts)  # type: ignore[arg-type]
    assert touched == []
