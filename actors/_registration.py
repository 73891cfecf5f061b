"""Registration actors: one per `register_adapter`, owning the adapter's lifetime.

A registration leases itself to the calls it serves. Leasing is a plain
link into a list threaded through the holders (trio is single-threaded, and
a call must not pay a mailbox round trip, nor a set's 50-100 B a call);
everything about the registration's *lifetime* (drain, abort of the
stragglers, closing the adapter) happens in its actor task, driven by one
message on its mailbox.
"""

from __future__ import annotations

import logging
from typing import Protocol

import attrs
import trio

from llmrt._adapter import Adapter
from llmrt._deadlines import RuntimeServices
from llmrt._errors import ErrorCode
from llmrt._request import ResolvedModelInfo

__all__ = ["Registration", "Leaseholder"]

log = logging.getLogger("llmrt.actors")

#: How long an adapter's ``aclose()`` may take before it is abandoned.
ADAPTER_CLOSE_TIMEOUT = 10.0


class Leaseholder(Protocol):
    #: Its neighbours among its registration's lease holders (the registration links them).
    _lease_older: Leaseholder | None
    _lease_newer: Leaseholder | None

    def _abort_with(self, code: str, message: str) -> None: ...


@attrs.define(eq=False)
class Registration:
    """The state of one adapter registration. Its routes live in the registry."""

    adapter: Adapter
    id: int
    #: Seconds a call may wait for the adapter's next chunk (per route of this registration).
    idle_timeout: float
    #: The newest lease holder; each holder links to the next older one.
    _newest_holder: Leaseholder | None = attrs.field(default=None, init=False)
    _leases: int = attrs.field(default=0, init=False)
    _draining: bool = attrs.field(default=False, init=False)
    _idle: trio.Event = attrs.field(factory=trio.Event, init=False)
    closed: trio.Event = attrs.field(factory=trio.Event, init=False)
    #: What the adapter is lent while registered (None: the actor starts its own).
    services: RuntimeServices | None = attrs.field(default=None, kw_only=True)
    #: The adapter's `resolve_model` answers validated so far (`validated_model_info`'s memo).
    model_infos: dict[ResolvedModelInfo, ResolvedModelInfo] = attrs.field(factory=dict, init=False)
    _mailbox: trio.MemorySendChannel[float] = attrs.field(init=False)
    _inbox: trio.MemoryReceiveChannel[float] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._mailbox, self._inbox = trio.open_memory_channel[float](1)

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def in_flight(self) -> int:
        return self._leases

    def acquire(self, holder: Leaseholder) -> bool:
        """Lease this registration to a call; False once it is draining."""
        if self._draining:
            return False
        newest = self._newest_holder
        holder._lease_older = newest
        if newest is not None:
            newest._lease_newer = holder
        self._newest_holder = holder
        self._leases += 1
        return True

    def release(self, holder: Leaseholder) -> None:
        """End ``holder``'s lease (nothing if it holds none)."""
        older, newer = holder._lease_older, holder._lease_newer
        if newer is not None:
            newer._lease_older = older
        elif self._newest_holder is holder:
            self._newest_holder = older
        else:
            return  # not a holder
        if older is not None:
            older._lease_newer = newer
        holder._lease_older = holder._lease_newer = None
        self._leases -= 1
        if self._draining and not self._leases:
            self._idle.set()

    def _holders(self) -> list[Leaseholder]:
        """The lease holders now, newest first."""
        holders = []
        holder = self._newest_holder
        while holder is not None:
            holders.append(holder)
            holder = holder._lease_older
        return holders

    def drain(self, timeout: float) -> None:
        """Ask the actor to drain (running calls get ``timeout`` seconds) and close the adapter.

        Synchronous and idempotent; wait on `closed` for the end.
        """
        if self._draining:
            return
        self._draining = True
        if not self._leases:
            self._idle.set()
        self._mailbox.send_nowait(timeout)
        self._mailbox.close()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The actor: lend the adapter its services, wait for the drain order, drain, close it.

        The services' nursery (the adapter's background tasks: its
        transport's read deadlines) is this task's, and ends before the
        adapter is closed. ``services`` given: those, and nothing started.
        """
        try:
            async with trio.open_nursery() as nursery:
                services = self.services or await RuntimeServices.start(nursery)
                try:
                    self.adapter.attach_runtime(services)
                except Exception:
                    log.exception("adapter %r failed to attach", type(self.adapter).__name__)
                try:
                    await self._drained(task_status)
                finally:
                    try:
                        self.adapter.detach_runtime()
                    except Exception:
                        log.exception("adapter %r failed to detach", type(self.adapter).__name__)
                    nursery.cancel_scope.cancel()
        finally:
            self._draining = True
            for holder in self._holders():
                holder._abort_with(ErrorCode.ABORTED, "the runtime is shutting down")
            with trio.move_on_after(ADAPTER_CLOSE_TIMEOUT, shield=True) as scope:
                try:
                    await self.adapter.aclose()
                except Exception:
                    log.exception("adapter %r failed to close", type(self.adapter).__name__)
            if scope.cancelled_caught:
                log.warning(
                    "adapter %r did not close within %s s",
                    type(self.adapter).__name__,
                    ADAPTER_CLOSE_TIMEOUT,
                )
            self.closed.set()

    async def _drained(self, task_status: trio.TaskStatus[None]) -> None:
        """Started; return once drained (the drain order, then the calls' end or their abort)."""
        task_status.started()
        async with self._inbox:
            try:
                timeout = await self._inbox.receive()
            except trio.EndOfChannel:  # pragma: no cover - drain() always sends first
                timeout = 0.0
        with trio.move_on_after(timeout):
            await self._idle.wait()
        for holder in self._holders():
            holder._abort_with(ErrorCode.ABORTED, "the adapter registration was disposed")
        await self._idle.wait()
