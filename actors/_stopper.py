"""Stopping calls in waves: a mass abort without a storm of young objects.

Cancelling a trio cancel scope whose task is parked builds, at once, what
the task will raise when it next runs: a `trio.Cancelled` with its
traceback and frames, and the outcome that carries it (about 20 objects the
cyclic collector tracks). They live until the task runs. An abort signal
shared by 10,000 calls cancels 10,000 scopes in one synchronous loop:
about 200,000 young objects before a single task runs, which is some 250
young collections, two dozen middle ones and two full ones that scan every
live call. On the benchmark's 10,000 streaming demo calls that was 40% of
the whole abort (bench/bench_runtime.py, section 3).

So a runtime stops its calls through one `Stopper`: a call's scope is
cancelled at once while fewer than `WAVE` stopped calls are still running;
past that, stops queue and one task, started in the runtime's own nursery
for the length of the burst, cancels `WAVE` of them per scheduler pass.
Each wave's tasks run, and drop what their cancellation made, in the next
pass, so the young generation never fills: the same abort then runs
without one collection. A stop's cause and the adapter's
``close_on_stop`` callbacks still take effect at once (`Call._stop`): no
chunk the adapter yields after the stop reaches the consumer, and the
upstream sees its close at once; only unwinding the call task's own work
waits for its wave.

A call task that never ends after its stop (an adapter that shields itself
forever) keeps its place in the count; later stops then go through the
queue, one pass later, instead of at once. Nothing waits on such a call.
"""

from __future__ import annotations

from collections import deque

import trio

__all__ = ["WAVE", "Stopper"]

#: Stopped calls still running past which further stops wait for a wave;
#: also how many scopes one wave cancels. 24 cancellations make about 450
#: young objects, under the 700 that start a young collection (Python's
#: default threshold), and the 24 tasks free them again in the next pass.
#: (At 64 a collection ran per wave; the middle and full ones followed.)
WAVE = 24


class Stopper:
    """Cancels stopped calls' scopes: at once while few are unwinding, else in waves."""

    __slots__ = ("_draining", "_nursery", "_queue", "running")

    def __init__(self, nursery: trio.Nursery) -> None:
        #: Where the wave task runs: the runtime's nursery, whose owner waits for it.
        self._nursery = nursery
        self._queue: deque[trio.CancelScope] = deque()
        self._draining = False
        #: Stopped calls whose task has not ended yet (each stop counts one, each end one back).
        self.running = 0

    @property
    def queued(self) -> int:
        """Stops whose scope waits for its wave."""
        return len(self._queue)

    def stop(self, scope: trio.CancelScope) -> None:
        """Cancel ``scope`` now, or in a wave soon; the caller calls `ended` once its task ended."""
        self.running += 1
        if self.running <= WAVE and not self._queue:
            scope.cancel()
            return
        self._queue.append(scope)
        if not self._draining:
            self._draining = True
            try:
                self._nursery.start_soon(self._drain, name="llmrt.calls.stopper")
            except RuntimeError:  # the runtime's nursery is closed: no passes left to spread over
                self._draining = False
                self._cancel(len(self._queue))

    def ended(self) -> None:
        """A stopped call's task ended (or was never started)."""
        self.running -= 1

    async def _drain(self) -> None:
        try:
            while self._queue:
                # Shielded: when the runtime's nursery is cancelled at its end, the
                # queue is still drained, wave by wave.
                await trio.lowlevel.cancel_shielded_checkpoint()
                self._cancel(WAVE)
        finally:
            self._draining = False

    def _cancel(self, count: int) -> None:
        queue = self._queue
        for _ in range(min(count, len(queue))):
            queue.popleft().cancel()
