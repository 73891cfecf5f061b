"""Which TCP connections the gateway holds, from accept to close. No I/O.

A connection takes a slot of its peer address the moment it is accepted and
keeps it until it closes, through all its phases: waiting for its request
head, the websocket handshake, the open websocket, a plain HTTP answer. So
``max_connections_per_peer`` bounds what one address holds in the gateway,
silent sockets included: an address past its cap is refused at accept, before
a byte of its head is read (`Admission.admit` returns None).

Until its head is complete a connection is also *pending*: it costs a socket
and the bytes of its head read so far, and has done nothing yet. Pending
connections are bounded over all peers, in number
(``max_pre_head_connections``) and in the bytes their heads hold
(``max_pre_head_bytes``). Past either bound the gateway sheds the *oldest*
pending connections, not the newest: a client that speaks sends its head at
once and stops being pending within a round trip, while a socket that has
waited longest is the one least likely to ever send one. Refusing the newest
instead would let anyone who opens connections faster than the handshake
timeout lock every client out. The same shedding frees a descriptor when
``accept`` fails for want of them (`Admission.oldest`).

Shedding here only picks the victims and stops counting them as pending;
the caller cancels their reads and answers them (`Ticket.scope`).
"""

from __future__ import annotations

import attrs
import trio

from ._protocol import Limits

__all__ = ["Admission", "Ticket"]


@attrs.define(eq=False)
class Ticket:
    """One admitted connection: its peer and, while its head is incomplete, what it holds."""

    peer: str
    #: Bytes of the request head read so far (0 once the head is complete).
    head_bytes: int = 0
    #: Whether the head is still incomplete (the connection counts as pending).
    pending: bool = True
    #: Why it was shed (the text of its 503 answer); None while it is not.
    shed: str | None = None
    #: Whether it was closed for it (a head completed in the read that shed it is served).
    closed_shed: bool = False
    #: The scope of the head read; the caller cancels it when the ticket is shed.
    scope: trio.CancelScope | None = None
    #: Whether the connection still holds its peer's slot.
    held: bool = True

    def cancel(self) -> None:
        """Stop the head read of a shed connection (it then answers `shed` and closes)."""
        if self.scope is not None:
            self.scope.cancel()


@attrs.define(eq=False)
class Admission:
    """The gateway's connection slots: per peer address, and the pending heads of all peers."""

    limits: Limits
    #: Admitted connections per peer address (pending or not).
    per_peer: dict[str, int] = attrs.field(factory=dict)
    #: Pending connections, oldest first (a dict keeps insertion order).
    _pending: dict[Ticket, None] = attrs.field(factory=dict, init=False)
    #: Bytes the pending connections' heads hold together.
    pending_bytes: int = attrs.field(default=0, init=False)

    @property
    def pending(self) -> int:
        """Connections whose request head is not complete yet."""
        return len(self._pending)

    @property
    def held(self) -> int:
        """Admitted connections over all peers."""
        return sum(self.per_peer.values())

    def admit(self, peer: str) -> tuple[Ticket | None, list[Ticket]]:
        """Admit a connection just accepted from ``peer``.

        Returns its ticket (None: the address holds ``max_connections_per_peer``
        already, refuse it) and the pending connections to shed to make room.
        """
        held = self.per_peer.get(peer, 0)
        if held >= self.limits.max_connections_per_peer:
            return None, []
        self.per_peer[peer] = held + 1
        shed: list[Ticket] = []
        limit = self.limits.max_pre_head_connections
        while len(self._pending) >= limit:
            shed.append(self._shed_oldest("maxPreHeadConnections", limit))
        ticket = Ticket(peer)
        self._pending[ticket] = None
        return ticket, shed

    def received(self, ticket: Ticket, size: int) -> list[Ticket]:
        """``ticket``'s connection read ``size`` more bytes of its head; returns those to shed.

        The oldest pending connections are shed until the heads fit
        ``max_pre_head_bytes`` again; ``ticket`` itself may be among them.
        """
        if not ticket.pending:
            return []
        ticket.head_bytes += size
        self.pending_bytes += size
        shed: list[Ticket] = []
        limit = self.limits.max_pre_head_bytes
        while self.pending_bytes > limit and self._pending:
            shed.append(self._shed_oldest("maxPreHeadBytes", limit))
        return shed

    def headed(self, ticket: Ticket) -> None:
        """``ticket``'s head is complete: it is pending no more (it keeps its peer's slot)."""
        self._unpend(ticket)

    def oldest(self, count: int) -> list[Ticket]:
        """Shed up to ``count`` of the oldest pending connections (accept is out of descriptors).

        Several at once: behind a failed accept may wait a backlog of sockets
        that will never speak, and one descriptor per failure would take a
        legitimate client queued behind them a pause per socket to reach.
        """
        return [
            self._shed_oldest("the process is out of file descriptors", None)
            for _ in range(min(count, len(self._pending)))
        ]

    def leave(self, ticket: Ticket) -> None:
        """``ticket``'s connection is closed: free its slot. Idempotent."""
        self._unpend(ticket)
        if not ticket.held:
            return
        ticket.held = False
        left = self.per_peer.pop(ticket.peer) - 1
        if left:
            self.per_peer[ticket.peer] = left

    def _unpend(self, ticket: Ticket) -> None:
        if ticket.pending:
            ticket.pending = False
            del self._pending[ticket]
            self.pending_bytes -= ticket.head_bytes
            ticket.head_bytes = 0

    def _shed_oldest(self, bound: str, limit: int | None) -> Ticket:
        victim = next(iter(self._pending))
        self._unpend(victim)
        if limit is None:
            victim.shed = f"the gateway is out of resources ({bound}); retry"
        else:
            victim.shed = (
                "the gateway holds too many connections that have not sent their "
                f"request head ({bound} is {limit}); retry"
            )
        return victim
