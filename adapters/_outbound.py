"""Checks on an endpoint another party named, before llmrt connects to it (see `llmrt._egress`).

`check_destination` resolves the host of a client-named base URL and
refuses it when any address it resolves to is one the request's
`llmrt._egress.OutboundPolicy` forbids (loopback, private, link-local, ...):
a clear ``INVALID_REQUEST`` before any connection. The connection itself is
checked again by `TrioTransport` against the address it reached, so a name
that resolves differently the second time (DNS rebinding) is refused there.
`relayable` is what such a request's asker may learn of a failure: an
error status and its code, never the endpoint's body.
"""

from __future__ import annotations

import socket
import urllib.parse

import msgspec
import trio

from llmrt import ErrorCode, LlmError
from llmrt._egress import OUTBOUND, is_public_address

__all__ = ["check_destination", "relayable"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
#: Why a client-named endpoint is refused (no address is named: the asker learns none).
REFUSED = (
    "the baseURL's host resolves to a loopback, private or link-local address, which a "
    "client-named URL may not reach here (the gateway's [gateway] discover_allow_private)"
)


async def check_destination(base_url: str) -> None:
    """Refuse ``base_url`` when the current `OUTBOUND` policy forbids any address of its host.

    No policy, or one that allows private addresses: nothing is checked.
    Raises `LlmError` ``INVALID_REQUEST`` (a forbidden address) or
    ``NETWORK`` (the host does not resolve). A checkpoint when it resolves.
    """
    policy = OUTBOUND.get()
    if policy is None or policy.allow_private:
        return
    parts = urllib.parse.urlsplit(base_url)
    host = parts.hostname or ""
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 80)
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise LlmError(
            ErrorCode.NETWORK, f"cannot resolve the endpoint's host ({exc.strerror or exc})"
        ) from None
    # Every address: a connection may go to any of them (happy eyeballs tries several).
    if not infos or not all(is_public_address(str(info[4][0])) for info in infos):
        raise LlmError(ErrorCode.INVALID_REQUEST, REFUSED)


def relayable(exc: LlmError) -> LlmError:
    """``exc`` as the asker of a client-named endpoint may see it: no text from the endpoint.

    An error status keeps its status and code, with a summary instead of
    the classified body; an unreadable answer (``PROTOCOL``) loses its
    decoder's detail. Other failures are llmrt's own text and stay.
    """
    failure = exc.failure
    if failure.status is not None:
        message = (
            f"the endpoint answered HTTP {failure.status} ({failure.code}); "
            "the body of a client-named endpoint is not relayed"
        )
    elif failure.code == ErrorCode.PROTOCOL:
        message = "the endpoint's answer is not a readable model list (its body is not relayed)"
    else:
        return exc
    return LlmError.from_failure(msgspec.structs.replace(failure, message=message))
