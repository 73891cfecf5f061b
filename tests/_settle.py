"""Waiting for state another task changes, without polling on a clock.

A test often has to wait for the gateway's side to catch up with what the
test did (a connection counted out, an adapter stream closed) where the code
under test offers no event to wait on. Polling with short real sleeps makes
such tests slow and their timing part of what they check. Instead,
`wait_until` asks trio itself: state in this process only changes while some
task runs, so the predicate is re-checked after every task step (a trio
instrument) and the waiter wakes on the step that made it true. No clock is
read, so it behaves the same on a real clock and on a mock one.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import trio
import trio.testing

#: A bound on each wait, in the seconds of the test's clock (real or mock).
WAIT_BOUND = 5.0


@attrs.define(eq=False)
class _Watch(trio.abc.Instrument):
    """Sets ``met`` after the first task step at whose end ``pred()`` holds."""

    pred: Callable[[], bool]
    met: trio.Event = attrs.field(factory=trio.Event)

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if not self.met.is_set() and self.pred():
            self.met.set()


async def wait_until(
    pred: Callable[[], bool], bound: float = WAIT_BOUND, *, settle: bool = True
) -> None:
    """Return once ``pred()`` holds (with ``settle``, and every task has settled after it).

    Settling matters where ``pred`` turns true in the middle of what the code
    under test does (the adapter's stream closed, the request not yet counted
    out) and the test asserts on where that ends. Without it, the wait ends on
    the very step that made ``pred`` true, for tests whose other tasks never
    settle (calls still streaming beside it). Fails with `trio.TooSlowError`
    after ``bound`` seconds.
    """
    with trio.fail_after(bound):
        if not pred():
            watch = _Watch(pred)
            trio.lowlevel.add_instrument(watch)
            try:
                await watch.met.wait()
            finally:
                trio.lowlevel.remove_instrument(watch)
        if settle:
            await trio.testing.wait_all_tasks_blocked()
