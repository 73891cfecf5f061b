"""Connecting to a gateway: TCP, the websocket upgrade and the ``hello`` frame, bounded
as one, and every refusal on the way as an `LlmError` that names the endpoint,
never the token (`llmrt.actors.gateway.client.open_gateway_client` uses it).
"""

from __future__ import annotations

import urllib.parse

import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    connect_websocket_url,
)

from llmrt import DecodeError, ErrorCode, LlmError

from ._protocol import PROTOCOL, Codec, HelloFrame

__all__ = ["dial", "endpoint_of", "translate_handshake"]


def endpoint_of(url: str) -> str:
    """``host:port`` of a ``ws://`` / ``wss://`` URL, for messages (never credentials)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or (443 if parts.scheme == "wss" else 80)
    except ValueError:
        return "an invalid URL"
    host = parts.hostname or "?"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def translate_handshake(exc: BaseException, endpoint: str, *, token_sent: bool) -> LlmError:
    """A failed connect or handshake as an `LlmError` naming the endpoint, never the token."""
    if isinstance(exc, ConnectionRejected):
        status = exc.status_code
        if status == 401:
            if token_sent:
                message = f"the gateway at {endpoint} refused the token"
            else:
                message = f"the gateway at {endpoint} requires a bearer token and none was sent"
            return LlmError(ErrorCode.AUTH, message, status=status)
        if status == 503:
            return LlmError(
                ErrorCode.OVERLOADED,
                f"the gateway at {endpoint} refused the connection",
                status=status,
            )
        return LlmError(
            ErrorCode.NETWORK,
            f"the gateway at {endpoint} refused the handshake ({status})",
            status=status,
        )
    cause = exc.__cause__ if isinstance(exc, HandshakeError) and exc.__cause__ else exc
    return LlmError(
        ErrorCode.NETWORK, f"cannot connect to the gateway at {endpoint}: {_why(cause)}"
    )


def _why(exc: BaseException) -> str:
    """The OS's reason(s) for a failed connect: trio tries every address and groups their errors."""
    causes: list[BaseException] = [exc]
    if isinstance(exc.__cause__, BaseExceptionGroup):
        causes = list(exc.__cause__.exceptions)
    elif exc.__cause__ is not None:
        causes = [exc.__cause__]
    reasons = {
        (c.strerror if isinstance(c, OSError) and c.strerror else str(c) or type(c).__name__)
        for c in causes
    }
    return ", ".join(sorted(r.lower() for r in reasons))


async def dial(
    nursery: trio.Nursery,
    url: str,
    endpoint: str,
    *,
    codec: Codec,
    headers: list[tuple[bytes, bytes]],
    max_frame_bytes: int,
    connect_timeout: float,
    token_sent: bool,
) -> tuple[WebSocketConnection, HelloFrame]:
    """Open the websocket (its reader task goes in ``nursery``) and read ``hello``.

    The whole of it, TCP connect, upgrade and ``hello``, is bounded by
    ``connect_timeout``: trio-websocket's own ``open_websocket`` bounds the
    upgrade but then waits for a reader task that nothing cancels, so a peer
    that accepts TCP and stays silent held it forever. Here the reader lives
    in the caller's nursery, which the caller cancels when this raises.
    """
    try:
        with trio.fail_after(connect_timeout):
            ws = await connect_websocket_url(
                nursery,
                url,
                subprotocols=[codec.subprotocol],
                extra_headers=headers,
                max_message_size=max_frame_bytes,
            )
            try:
                first = await ws.get_message()
            except ConnectionClosed as exc:
                raise LlmError(
                    ErrorCode.PROTOCOL, f"no hello frame from the gateway at {endpoint}: {exc}"
                ) from None
    except trio.TooSlowError:
        raise LlmError(
            ErrorCode.NETWORK,
            f"the gateway at {endpoint} did not answer within {connect_timeout:g} s "
            "(connect timeout)",
        ) from None
    except (HandshakeError, OSError) as exc:
        raise translate_handshake(exc, endpoint, token_sent=token_sent) from None
    try:
        hello = codec.decode_server(first)
    except DecodeError as exc:
        raise LlmError(
            ErrorCode.PROTOCOL, f"no hello frame from the gateway at {endpoint}: {exc}"
        ) from None
    if not isinstance(hello, HelloFrame) or hello.protocol != PROTOCOL:
        raise LlmError(ErrorCode.PROTOCOL, f"the server at {endpoint} does not speak {PROTOCOL}")
    return ws, hello
