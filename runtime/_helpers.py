"""Small helpers the packages share, each written once.

* `sole_exception` / `raise_sole`: a trio nursery wraps what its body raised
  in an ExceptionGroup; an API that opens a nursery for its caller gives the
  caller that one exception back, not the group.
* `revalidated`: a msgspec Struct built by a constructor skips its field
  constraints (``Meta`` bounds, patterns); an encode -> decode round trip
  checks them, and detaches the value from anything its producer still holds.
* `stdlib_socket`: the standard-library socket under a trio socket stream,
  which the HTTP transport and the gateway's front door write to directly;
  `recv_when_readable` reads one, waiting first.
"""

from __future__ import annotations

import socket
from typing import Any, NoReturn, TypeVar

import msgspec
import trio

__all__ = ["recv_when_readable", "sole_exception", "raise_sole", "revalidated", "stdlib_socket"]

T = TypeVar("T")


def sole_exception(group: BaseExceptionGroup[Any]) -> BaseException | None:
    """The one exception ``group`` holds, or None when it holds several."""
    return group.exceptions[0] if len(group.exceptions) == 1 else None


def raise_sole(group: BaseExceptionGroup[Any]) -> NoReturn:
    """Raise the one exception ``group`` holds (with its own cause), else the group itself."""
    inner = sole_exception(group)
    if inner is None:
        raise group
    raise inner from inner.__cause__


def revalidated(decoder: msgspec.json.Decoder[T], value: object) -> T:
    """``value`` encoded and decoded again through ``decoder``: validated and detached.

    Raises `msgspec.ValidationError` for a value the decoder refuses, and for
    one that cannot be encoded at all (its message is the encoder's).
    """
    try:
        return decoder.decode(msgspec.json.encode(value))
    except msgspec.ValidationError:
        raise
    except (msgspec.DecodeError, TypeError) as exc:
        raise msgspec.ValidationError(str(exc)) from None


def stdlib_socket(stream: trio.SocketStream) -> socket.socket | None:
    """The standard-library socket under ``stream`` (trio keeps it non-blocking), if reachable."""
    sock = getattr(stream.socket, "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


async def recv_when_readable(sock: socket.socket, size: int) -> bytes:
    """One ``recv`` of up to ``size`` bytes from non-blocking ``sock``, once it is readable.

    For a reader that knows nothing is waiting yet: it skips the first
    non-blocking attempt (and its failure) that trio's ``receive_some`` makes.
    A checkpoint (it waits); errors of ``recv`` other than a spurious wake-up
    propagate.
    """
    while True:
        await trio.lowlevel.wait_readable(sock)
        try:
            return sock.recv(size)
        except BlockingIOError:
            continue  # a spurious wake-up
