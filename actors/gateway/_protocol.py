"""The gateway's wire protocol ``llmrt.v1``: frames, codecs, limits and auth checks. No I/O.

Frames are frozen msgspec structs under two tagged unions (tag field
``type``): `ClientFrame` (what a client sends) and `ServerFrame` (what the
gateway sends). The same structs encode as JSON text frames (subprotocol
``llmrt.v1``, the default) or MessagePack binary frames (``llmrt.v1.msgpack``).
``docs/protocol.md`` is the normative description. Blocks, message sources
and finish reasons registered with `llmrt.register_content_block` and its
siblings decode in both directions (a failed decode is retried with them).
"""

from __future__ import annotations

import enum
import hmac
import math
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import attrs
import msgspec

from llmrt import DecodeError, GenerateOptions, LlmFailure, ResolvedRetryPolicy, StreamChunk
from llmrt._vocab import decode_open, extended

__all__ = [
    "PROTOCOL",
    "JSON_SUBPROTOCOL",
    "MSGPACK_SUBPROTOCOL",
    "BEARER_PREFIX",
    "GatewayErrorCode",
    "ends_request",
    "Limits",
    "HelloLimits",
    "CallFrame",
    "AbortFrame",
    "ListProvidersFrame",
    "ListModelsFrame",
    "ResolveModelFrame",
    "PingFrame",
    "StatsFrame",
    "ClientFrame",
    "HelloFrame",
    "ChunkFrame",
    "ChunksFrame",
    "ResultFrame",
    "ErrorFrame",
    "PongFrame",
    "RetryFrame",
    "ServerFrame",
    "CloseRequest",
    "Codec",
    "JSON",
    "MSGPACK",
    "codec_for",
    "TokenBucket",
    "bearer_from_headers",
    "split_subprotocols",
    "token_matches",
]

PROTOCOL = "llmrt.v1"
JSON_SUBPROTOCOL = "llmrt.v1"
MSGPACK_SUBPROTOCOL = "llmrt.v1.msgpack"
#: Browsers cannot set headers: they offer the subprotocol ``llmrt.bearer.<token>``.
BEARER_PREFIX = "llmrt.bearer."


class GatewayErrorCode(enum.StrEnum):
    """Codes of ``error`` frames that only the gateway produces (besides `llmrt.ErrorCode`)."""

    BAD_FRAME = "BAD_FRAME"
    DUPLICATE_ID = "DUPLICATE_ID"
    UNKNOWN_ID = "UNKNOWN_ID"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    RATE_LIMITED = "RATE_LIMITED"
    FRAME_TOO_LARGE = "FRAME_TOO_LARGE"
    SHUTTING_DOWN = "SHUTTING_DOWN"


#: An ``error`` frame carrying an ``id`` ends the request of that id, unless its
#: code is one of these two: they are about the frame just sent, and a live
#: request of that id (if any) goes on.
_KEEPS_REQUEST = frozenset({GatewayErrorCode.DUPLICATE_ID, GatewayErrorCode.UNKNOWN_ID})


def ends_request(code: str) -> bool:
    """Whether an ``error`` frame with an ``id`` and this code ends that request."""
    return code not in _KEEPS_REQUEST


def _positive(name: str, value: float, *, integer: bool = False) -> None:
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if not ok or isinstance(value, bool) or not 0 < value < math.inf:
        kind = "a positive integer" if integer else "a positive, finite number"
        raise ValueError(f"{name} must be {kind}, got {value!r}")


@attrs.frozen
class Limits:
    """The gateway's limits; every one is announced in the ``hello`` frame.

    Raises `ValueError` on construction when a value is not positive (and
    finite). Times are in seconds.
    """

    #: Larger client frames get a ``FRAME_TOO_LARGE`` error; beyond
    #: ``hard_frame_factor`` times this the connection is closed with 1009.
    max_frame_bytes: int = 1 << 20
    hard_frame_factor: int = 4
    #: Live calls and metadata requests of one connection.
    max_calls_per_connection: int = 64
    #: Live calls and metadata requests of all connections together.
    max_calls_per_server: int = 4096
    #: Open websockets; one more is refused with HTTP 503.
    max_connections: int = 256
    #: Token bucket on ``call`` frames of one connection: refill rate and size.
    calls_per_second: float = 50.0
    call_burst: int = 100
    #: A websocket ping every ``heartbeat_interval``; no pong within
    #: ``heartbeat_timeout`` closes the connection (code 1011).
    heartbeat_interval: float = 20.0
    heartbeat_timeout: float = 20.0
    #: Size of a connection's outbound queue (frames, and calls with chunks
    #: ready); producers wait when it is full (backpressure).
    outbound_frames: int = 64
    #: On shutdown, in-flight calls get this long before they are aborted.
    shutdown_grace: float = 5.0
    #: Bound on closing one websocket (and on delivering the last frames).
    close_timeout: float = 5.0
    #: Bound on a client's opening handshake.
    handshake_timeout: float = 10.0

    def __attrs_post_init__(self) -> None:
        for name in (
            "max_frame_bytes",
            "hard_frame_factor",
            "max_calls_per_connection",
            "max_calls_per_server",
            "max_connections",
            "call_burst",
            "outbound_frames",
        ):
            _positive(name, getattr(self, name), integer=True)
        for name in (
            "calls_per_second",
            "heartbeat_interval",
            "heartbeat_timeout",
            "shutdown_grace",
            "close_timeout",
            "handshake_timeout",
        ):
            _positive(name, getattr(self, name))

    @property
    def hard_frame_bytes(self) -> int:
        """The frame size beyond which the websocket layer closes the connection (1009)."""
        return self.max_frame_bytes * self.hard_frame_factor

    def announce(self) -> HelloLimits:
        return HelloLimits(
            max_frame_bytes=self.max_frame_bytes,
            max_calls_per_connection=self.max_calls_per_connection,
            max_calls_per_server=self.max_calls_per_server,
            max_connections=self.max_connections,
            calls_per_second=float(self.calls_per_second),
            call_burst=self.call_burst,
            heartbeat_interval=float(self.heartbeat_interval),
        )


# ---- frames ----------------------------------------------------------------------------------

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
#: The longest abort reason a client may send, in characters.
MAX_ABORT_REASON = 256
_Name = Annotated[str, msgspec.Meta(min_length=1)]


class _Frame(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True, tag_field="type"
):
    pass


class CallFrame(_Frame, frozen=True, tag="call"):
    """Start a call. ``request`` is a `GenerateOptions` (decoded separately, see `Codec`)."""

    id: _Id
    request: msgspec.Raw
    #: Run the call over retried attempts: ``true`` with the serving route's
    #: policy, or an explicit policy object (``{"mode": "normal", ...}``).
    retry: bool | ResolvedRetryPolicy | None = None


class AbortFrame(_Frame, frozen=True, tag="abort"):
    id: _Id
    #: Why the client aborts; quoted in the call's ``aborted`` finish.
    reason: Annotated[str, msgspec.Meta(max_length=MAX_ABORT_REASON)] | None = None


class ListProvidersFrame(_Frame, frozen=True, tag="list-providers"):
    id: _Id


class ListModelsFrame(_Frame, frozen=True, tag="list-models"):
    id: _Id
    provider: _Name


class ResolveModelFrame(_Frame, frozen=True, tag="resolve-model"):
    id: _Id
    provider: _Name
    model: _Name


class PingFrame(_Frame, frozen=True, tag="ping"):
    id: _Id | None = None


class StatsFrame(_Frame, frozen=True, tag="stats"):
    """Ask for the statistics snapshot (answered by a ``result``: a ``StatisticsValue``)."""

    id: _Id


ClientFrame = (
    CallFrame
    | AbortFrame
    | ListProvidersFrame
    | ListModelsFrame
    | ResolveModelFrame
    | PingFrame
    | StatsFrame
)
_CLIENT_TAGS = frozenset(cls.__struct_config__.tag for cls in ClientFrame.__args__)


class HelloLimits(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    max_frame_bytes: int
    max_calls_per_connection: int
    max_calls_per_server: int
    max_connections: int
    calls_per_second: float
    call_burst: int
    heartbeat_interval: float


class HelloFrame(_Frame, frozen=True, tag="hello"):
    protocol: str
    server: str
    limits: HelloLimits


class ChunkFrame(_Frame, frozen=True, tag="chunk"):
    id: str
    chunk: StreamChunk
    #: The attempt this chunk belongs to (retried calls only).
    attempt: int | None = None


class ChunksFrame(_Frame, frozen=True, tag="chunks"):
    """Several consecutive chunks of one call, sent together when the writer is behind."""

    id: str
    chunks: tuple[StreamChunk, ...]
    #: The attempt these chunks belong to (retried calls only).
    attempt: int | None = None


class ResultFrame(_Frame, frozen=True, tag="result"):
    id: str
    value: msgspec.Raw


class ErrorFrame(_Frame, frozen=True, tag="error"):
    code: str
    message: str
    id: str | None = None


class PongFrame(_Frame, frozen=True, tag="pong"):
    id: str | None = None


class RetryFrame(_Frame, frozen=True, tag="retry"):
    """Attempt ``attempt`` of a retried call failed with ``failure``; attempt
    ``attempt + 1`` starts after ``delayMs``. What that attempt streamed is void."""

    id: str
    attempt: int
    failure: LlmFailure
    delay_ms: float


ServerFrame = (
    HelloFrame | ChunkFrame | ChunksFrame | ResultFrame | ErrorFrame | PongFrame | RetryFrame
)


@attrs.frozen
class CloseRequest:
    """Queued behind a connection's last frames: the writer then closes the websocket."""

    code: int
    reason: str


# ---- codecs ----------------------------------------------------------------------------------


class _Peek(msgspec.Struct):
    """The lenient view of a frame that failed to decode: enough to name the problem."""

    type: Any = None
    id: Any = None


def _at_request(message: str) -> str:
    # The request is decoded on its own; point its paths into the frame.
    return message.replace(" - at `$", " - at `$.request")


@attrs.frozen
class Codec:
    """One encoding of the protocol: JSON (text frames) or MessagePack (binary frames)."""

    subprotocol: str
    binary: bool
    _encode: Callable[[Any], bytes]
    _decoder_of: Callable[[Any], Any]
    _client: Any
    _server: Any
    _request: Any
    _peek: Any
    _values: dict[Any, Any] = attrs.field(factory=dict)

    def encode(self, frame: Any) -> str | bytes:
        """Encode a frame as the websocket message to send (``str`` for JSON)."""
        data = self._encode(frame)
        return data if self.binary else data.decode()

    def raw(self, value: Any) -> msgspec.Raw:
        """Pre-encode a result value for `ResultFrame`."""
        return msgspec.Raw(self._encode(value))

    def decode_client(self, data: str | bytes) -> ClientFrame:
        """Decode a client frame. Raises `DecodeError` naming the problem (and its path)."""
        try:
            return self._client.decode(self._bytes(data))  # type: ignore[no-any-return]
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeEncodeError) as exc:
            failure: Exception = exc
            if extended() and isinstance(exc, msgspec.ValidationError):
                try:
                    return self._open(ClientFrame, self._bytes(data), exc)  # type: ignore[no-any-return]
                except msgspec.ValidationError as again:
                    failure = again
            raise DecodeError(self._describe(data, failure)) from None

    def peek_id(self, data: str | bytes) -> str | None:
        """The ``id`` of a frame that failed to decode, when it has a usable one."""
        try:
            found = self._peek.decode(self._bytes(data)).id
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeEncodeError):
            return None
        return found if isinstance(found, str) and 0 < len(found) <= 256 else None

    def decode_request(self, raw: msgspec.Raw) -> GenerateOptions:
        """Decode a call's request. Raises `DecodeError` with a path under ``$.request``."""
        try:
            try:
                return self._request.decode(raw)  # type: ignore[no-any-return]
            except msgspec.ValidationError as exc:
                if not extended():
                    raise
                return self._open(GenerateOptions, raw, exc)  # type: ignore[no-any-return]
        except msgspec.ValidationError as exc:
            text = str(exc)
            if " - at `$" not in text:
                text += " - at `$`"
            raise DecodeError(_at_request(f"invalid request: {text}")) from None
        except (msgspec.DecodeError, UnicodeEncodeError) as exc:
            raise DecodeError(f"invalid request: {exc}") from None

    def decode_server(self, data: str | bytes) -> ServerFrame:
        """Decode a server frame (client side). Raises `DecodeError`."""
        try:
            try:
                return self._server.decode(self._bytes(data))  # type: ignore[no-any-return]
            except msgspec.ValidationError as exc:
                if not extended():
                    raise
                return self._open(ServerFrame, self._bytes(data), exc)  # type: ignore[no-any-return]
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeEncodeError) as exc:
            raise DecodeError(f"bad server frame: {exc}") from None

    def decode_value(self, raw: msgspec.Raw, type: Any) -> Any:
        """Decode a result value as ``type``. Raises `DecodeError`."""
        dec = self._values.get(type)
        if dec is None:
            dec = self._values[type] = self._decoder_of(type)
        try:
            try:
                return dec.decode(raw)
            except msgspec.ValidationError as exc:
                if not extended():
                    raise
                return self._open(type, raw, exc)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise DecodeError(f"bad result value: {exc}") from None

    def _open(self, type: Any, data: Any, failure: msgspec.ValidationError) -> Any:
        """Decode again with the registered blocks, sources and finish reasons (`llmrt._vocab`)."""
        return decode_open(self._decoder_of, type, data, failure)

    def _bytes(self, data: str | bytes) -> bytes | str:
        # msgspec's JSON decoder takes str as is; MessagePack needs bytes.
        if self.binary and isinstance(data, str):
            return data.encode()
        return data

    def _describe(self, data: str | bytes, exc: Exception) -> str:
        try:
            peek = self._peek.decode(self._bytes(data))
        except msgspec.ValidationError:
            peek = _Peek()  # valid, but not an object
        except (msgspec.DecodeError, UnicodeEncodeError):
            kind = "MessagePack" if self.binary else "JSON"
            return f"malformed {kind}: {exc}"
        if peek.type is None:
            return "a frame must be an object with a string field `type` - at `$.type`"
        if peek.type not in _CLIENT_TAGS:
            return f"unknown frame type {str(peek.type)[:64]!r} - at `$.type`"
        text = str(exc)
        if " - at `$" not in text:
            text += " - at `$`"
        return f"invalid {peek.type} frame: {text}"


def _make_codec(subprotocol: str, module: Any) -> Codec:
    return Codec(
        subprotocol=subprotocol,
        binary=module is msgspec.msgpack,
        encode=module.Encoder().encode,
        decoder_of=module.Decoder,
        client=module.Decoder(ClientFrame),
        server=module.Decoder(ServerFrame),
        request=module.Decoder(GenerateOptions),
        peek=module.Decoder(_Peek),
    )


JSON = _make_codec(JSON_SUBPROTOCOL, msgspec.json)
MSGPACK = _make_codec(MSGPACK_SUBPROTOCOL, msgspec.msgpack)
_CODECS = {JSON_SUBPROTOCOL: JSON, MSGPACK_SUBPROTOCOL: MSGPACK}


def codec_for(offered: Sequence[str]) -> Codec | None:
    """The codec of the first supported subprotocol offered, JSON when none is offered.

    Returns None when subprotocols were offered and none is supported.
    """
    if not offered:
        return JSON
    for name in offered:
        codec = _CODECS.get(name)
        if codec is not None:
            return codec
    return None


# ---- rate limit and auth ---------------------------------------------------------------------


@attrs.define
class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up; `take` spends one."""

    rate: float
    burst: int
    _tokens: float = attrs.field(init=False)
    _at: float | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self._tokens = float(self.burst)

    def take(self, now: float) -> bool:
        """Spend a token at time ``now``; False when none is left."""
        if self._at is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


def bearer_from_headers(headers: Sequence[tuple[bytes, bytes]]) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header, if there is one."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                return token.strip()
    return None


def split_subprotocols(offered: Sequence[str]) -> tuple[bytes | None, list[str]]:
    """Split the offered subprotocols into the bearer token (if any) and the others."""
    token: bytes | None = None
    others: list[str] = []
    for name in offered:
        if name.startswith(BEARER_PREFIX):
            if token is None:
                token = name[len(BEARER_PREFIX) :].encode()
        else:
            others.append(name)
    return token, others


def token_matches(expected: bytes, presented: bytes | None) -> bool:
    """Constant-time comparison of a presented token with the expected one."""
    if presented is None:
        return False
    return hmac.compare_digest(expected, presented)
