"""What the gateway counts about its own traffic, and the causes of refused requests.

Plain integer fields bumped where the event happens (an attribute increment,
no lock, no label lookup); the metrics collector reads them at scrape time.
"""

from __future__ import annotations

import enum
from collections import Counter

import attrs

__all__ = ["GatewayCounters", "RefusalCause", "payload_bytes"]


class RefusalCause(enum.StrEnum):
    """Why the front door refused a request or a websocket handshake (a bounded label)."""

    #: A browser ``Origin`` the gateway does not serve (403).
    ORIGIN = "origin"
    #: A ``Host`` a loopback gateway does not answer to: DNS rebinding (403).
    HOST = "host"
    #: One address holds its most connections (503).
    PER_PEER = "per_peer"
    #: A missing or wrong bearer token (401).
    AUTH = "auth"
    #: ``maxConnections`` websockets are open (503).
    LIMITS = "limits"
    #: The gateway is shutting down (503).
    SHUTDOWN = "shutdown"
    #: Subprotocols were offered and none is supported (400).
    SUBPROTOCOL = "subprotocol"
    #: A request head that is not HTTP/1.1, or larger than the head bound (400, 431).
    MALFORMED = "malformed"
    #: No complete request head within the handshake timeout.
    TIMEOUT = "timeout"
    #: Closed before its request head was complete, to make room: too many
    #: connections (or bytes) waiting for their heads, or no descriptor left (503).
    PRE_HEAD = "pre_head"


def payload_bytes(data: str | bytes) -> int:
    """The size of a frame payload in bytes (a text frame's UTF-8 length)."""
    # str.isascii() reads a flag CPython keeps: no scan for the usual JSON frame.
    if isinstance(data, bytes) or data.isascii():
        return len(data)
    return len(data.encode(errors="surrogatepass"))


@attrs.define(eq=False)
class GatewayCounters:
    """Monotonic counters of one gateway; only trio tasks of one run touch them."""

    #: Websocket handshakes accepted.
    accepted: int = 0
    #: Plain HTTP requests answered, by route (``/``, ``/healthz``, ``/readyz``,
    #: ``/metrics``, ``other``).
    http_requests: Counter[str] = attrs.field(factory=Counter)
    #: Protocol frames received and sent over all websockets.
    frames_received: int = 0
    frames_sent: int = 0
    #: Bytes of protocol frame payloads received and sent (UTF-8 for text frames;
    #: websocket framing and handshakes not included).
    bytes_received: int = 0
    bytes_sent: int = 0
    refusals: Counter[str] = attrs.field(factory=Counter)
    #: ``accept`` failures for want of descriptors or kernel memory (EMFILE and co).
    accept_errors: int = 0

    def refused(self, cause: str) -> None:
        """Count one refused request or handshake; ``cause`` is a `RefusalCause` value."""
        self.refusals[str(cause)] += 1
