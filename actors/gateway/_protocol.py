"""The gateway's wire protocol ``llmrt.v1``: frames, codecs, limits and auth checks. No I/O.

Frames are frozen msgspec structs under two tagged unions (tag field
``type``): `ClientFrame` (what a client sends) and `ServerFrame` (what the
gateway sends). The same structs encode as JSON text frames (subprotocol
``llmrt.v1``, the default) or MessagePack binary frames (``llmrt.v1.msgpack``).
``docs/protocol.md`` is the normative description. Blocks, message sources
and finish reasons registered with `llmrt.vocabulary.register_content_block` and its
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

from llmrt import (
    DecodeError,
    GenerateOptions,
    LlmFailure,
    ReasoningDelta,
    ResolvedRetryPolicy,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
)
from llmrt._egress import OutboundPolicy
from llmrt._nesting import MAX_NESTING, json_too_deep, msgpack_too_deep
from llmrt._vocab import decode_open, extended
from llmrt.adapter import ModelDiscoveryRequest

from .._tracecontext import MAX_TRACEPARENT

__all__ = [
    "PROTOCOL",
    "JSON_SUBPROTOCOL",
    "MSGPACK_SUBPROTOCOL",
    "BEARER_PREFIX",
    "FRAME_BYTES_HEADER",
    "MIN_FRAME_BYTES",
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
    "ListConfigurableProvidersFrame",
    "DiscoverModelsFrame",
    "ReloadFrame",
    "ClientFrame",
    "HelloFrame",
    "ChunkFrame",
    "ChunksFrame",
    "ResultFrame",
    "ErrorFrame",
    "PongFrame",
    "RetryFrame",
    "PartFrame",
    "BinaryPartFrame",
    "RawChunkFrame",
    "RawChunksFrame",
    "ProvidersChangedFrame",
    "ReloadReport",
    "WorkerReload",
    "ServerFrame",
    "split_delta",
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
#: Handshake header in which a client announces the largest frame it accepts.
FRAME_BYTES_HEADER = "llmrt-max-frame-bytes"
#: The smallest frame limit either side may set: every frame that cannot be
#: split (a ``hello``, an ``error``, a ``part``) fits in it.
MIN_FRAME_BYTES = 4096


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
    """The gateway's limits; those a client must know are announced in the ``hello`` frame.

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
    #: Open websockets from one peer address; one more is refused with HTTP 503.
    max_connections_per_peer: int = 64
    #: A connection with no call or metadata request in flight for this long
    #: is closed (code 1001): idle clients must not hold slots forever.
    idle_timeout: float = 300.0
    #: Bytes of encoded chunks a connection may hold for its writer; a call
    #: that finds the budget spent waits (backpressure up to its upstream).
    max_pending_bytes: int = 4 << 20
    #: Connections whose request head (a plain HTTP request's or a websocket
    #: handshake's) is not complete yet, over all peers; past it the oldest of
    #: them is closed (503) to make room. Not announced: it bounds what happens
    #: before a ``hello`` exists, and the 503 names it.
    max_pre_head_connections: int = 128
    #: Bytes the heads of those connections hold together; past it the oldest
    #: of them are closed (503). Not announced, like the one above.
    max_pre_head_bytes: int = 2 << 20
    #: Token buckets on metadata frames (``list-providers``,
    #: ``list-configurable-providers``, ``list-models``, ``resolve-model``,
    #: ``discover-models``): refill rate and size, per connection; and the
    #: same over all connections of one peer address.
    metadata_per_second: float = 10.0
    metadata_burst: int = 40
    metadata_per_peer_per_second: float = 20.0
    metadata_per_peer_burst: int = 80
    #: Seconds a route's model list is answered from the gateway's cache
    #: (concurrent asks share one upstream request); 0: every ask goes upstream.
    model_list_ttl: float = 60.0
    #: Whether a ``discover-models`` frame may name a ``baseURL``: the gateway
    #: then GETs a URL its client chose and returns the list it reads there,
    #: a server-side request forgery surface (docs/security.md). Off, only
    #: configured endpoints (a request's ``provider``, a namespace's
    #: ``base_url``) are asked. A policy, not a limit: not announced.
    discover_any_url: bool = False
    #: With ``discover_any_url``: whether a client-named URL may reach loopback,
    #: private and link-local addresses (off: refused, however the host resolves).
    discover_allow_private: bool = False
    #: The HTTP APIs (``POST /v1/chat/completions``, ...): the largest request
    #: body (a larger one is answered 413), and the seconds the whole body may
    #: take to arrive after its head (408 past it). Not announced: websocket
    #: clients never send one.
    max_body_bytes: int = 16 << 20
    body_timeout: float = 30.0
    #: A started HTTP API stream quiet for this long gets the API's ping
    #: (Messages: a ``ping`` event; the OpenAI APIs: an SSE comment).
    ping_interval: float = 10.0

    @property
    def outbound(self) -> OutboundPolicy:
        """Where a ``discover-models`` request naming a ``baseURL`` may connect."""
        return OutboundPolicy(allow_private=self.discover_allow_private)

    def __attrs_post_init__(self) -> None:
        for name in (
            "max_frame_bytes",
            "hard_frame_factor",
            "max_calls_per_connection",
            "max_calls_per_server",
            "max_connections",
            "call_burst",
            "outbound_frames",
            "max_connections_per_peer",
            "max_pending_bytes",
            "max_pre_head_connections",
            "max_pre_head_bytes",
            "metadata_burst",
            "metadata_per_peer_burst",
            "max_body_bytes",
        ):
            _positive(name, getattr(self, name), integer=True)
        for name in (
            "calls_per_second",
            "heartbeat_interval",
            "heartbeat_timeout",
            "shutdown_grace",
            "close_timeout",
            "handshake_timeout",
            "idle_timeout",
            "metadata_per_second",
            "metadata_per_peer_per_second",
            "body_timeout",
            "ping_interval",
        ):
            _positive(name, getattr(self, name))
        ttl = self.model_list_ttl
        if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not 0 <= ttl < math.inf:
            raise ValueError(f"model_list_ttl must be a finite number >= 0, got {ttl!r}")
        if self.max_frame_bytes < MIN_FRAME_BYTES:
            raise ValueError(
                f"max_frame_bytes must be at least {MIN_FRAME_BYTES}, got {self.max_frame_bytes!r}"
            )

    @property
    def hard_frame_bytes(self) -> int:
        """The frame size beyond which the websocket layer closes the connection (1009)."""
        return self.max_frame_bytes * self.hard_frame_factor

    def announce(self, server_frame_bytes: int | None = None) -> HelloLimits:
        """The ``hello`` limits; ``server_frame_bytes``: this connection's cap on server frames."""
        return HelloLimits(
            max_frame_bytes=self.max_frame_bytes,
            max_calls_per_connection=self.max_calls_per_connection,
            max_calls_per_server=self.max_calls_per_server,
            max_connections=self.max_connections,
            calls_per_second=float(self.calls_per_second),
            call_burst=self.call_burst,
            heartbeat_interval=float(self.heartbeat_interval),
            max_connections_per_peer=self.max_connections_per_peer,
            idle_timeout=float(self.idle_timeout),
            max_pending_bytes=self.max_pending_bytes,
            server_frame_bytes=(
                server_frame_bytes if server_frame_bytes is not None else self.max_frame_bytes
            ),
            metadata_per_second=float(self.metadata_per_second),
            metadata_burst=self.metadata_burst,
            metadata_per_peer_per_second=float(self.metadata_per_peer_per_second),
            metadata_per_peer_burst=self.metadata_per_peer_burst,
            model_list_ttl=float(self.model_list_ttl),
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
    #: The client's W3C trace context: the gateway's span of this call (when
    #: it traces) becomes a child of it. Its format is checked on admission.
    traceparent: Annotated[str, msgspec.Meta(max_length=MAX_TRACEPARENT)] | None = None


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
    """Ask for the statistics snapshot (answered by a ``result``: a ``RuntimeStatistics``)."""

    id: _Id


class ListConfigurableProvidersFrame(_Frame, frozen=True, tag="list-configurable-providers"):
    """Ask for the provider directory (a ``result``: ``ConfigurableProvider[]``)."""

    id: _Id


class DiscoverModelsFrame(_Frame, frozen=True, tag="discover-models"):
    """Ask the discovery of ``settingsNs`` what an endpoint serves (``DiscoveredModel[]``).

    ``request.apiKey`` is used for this interrogation alone and never echoed.
    """

    id: _Id
    settings_ns: _Name
    request: ModelDiscoveryRequest = msgspec.field(default_factory=ModelDiscoveryRequest)


class ReloadFrame(_Frame, frozen=True, tag="reload"):
    """Ask the gateway to read its configuration file again (a ``result``: a `ReloadReport`).

    Only a gateway with a token takes it (every connection of one has
    presented the token); one without answers ``AUTH``.
    """

    id: _Id


ClientFrame = (
    CallFrame
    | AbortFrame
    | ListProvidersFrame
    | ListModelsFrame
    | ResolveModelFrame
    | PingFrame
    | StatsFrame
    | ListConfigurableProvidersFrame
    | DiscoverModelsFrame
    | ReloadFrame
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
    # Later additions: optional, so that a client also reads older servers' hellos.
    max_connections_per_peer: int | None = None
    idle_timeout: float | None = None
    max_pending_bytes: int | None = None
    #: The largest frame the server sends on this connection (bytes).
    server_frame_bytes: int | None = None
    #: Token buckets on metadata frames: this connection's, and its address's.
    metadata_per_second: float | None = None
    metadata_burst: int | None = None
    metadata_per_peer_per_second: float | None = None
    metadata_per_peer_burst: int | None = None
    #: How old (seconds) a model list the server answers may be.
    model_list_ttl: float | None = None


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


class ProvidersChangedFrame(_Frame, frozen=True, tag="providers-changed"):
    """The gateway's provider routes, groups or directory changed: ask ``list-providers`` again.

    Unsolicited and payload-free; changes close together may arrive as one frame.
    """


class WorkerReload(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """What one gateway process made of a reload: applied, or refused with the file's error."""

    #: Whether the new file serves now; False: the old configuration serves on.
    ok: bool
    #: The worker's slot under ``llmrt serve --workers N`` (absent for a single process).
    worker: int | None = None
    #: Why the reload was refused (``CONFIG_INVALID``: ``message`` is ``FILE:LINE: REASON``).
    error: LlmFailure | None = None
    #: Route names registered anew, withdrawn, and re-registered with changed facts.
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    #: Whether the routing groups were replaced.
    groups: bool = False
    #: Tables of the file that changed but take effect only on a restart (``gateway``).
    restart_needed: tuple[str, ...] = ()


class ReloadReport(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The ``result`` of a ``reload`` frame: every gateway process's outcome."""

    #: True when every process applied the file.
    ok: bool
    workers: tuple[WorkerReload, ...]


class PartFrame(_Frame, frozen=True, tag="part"):
    """A slice of a frame too large for the peer's frame limit (JSON: a slice of its text).

    The slices of one frame arrive in order, each with the frame's ``id``;
    the last has ``more`` false. Their concatenation is the frame.
    """

    data: str
    id: str | None = None
    more: bool = False


class BinaryPartFrame(_Frame, frozen=True, tag="part"):
    """`PartFrame` of the MessagePack encoding: ``data`` is a slice of the frame's bytes."""

    data: bytes
    id: str | None = None
    more: bool = False


# The frames both encodings carry; a `part` frame's kind depends on the encoding.
_SERVER_WHOLE = (
    HelloFrame
    | ChunkFrame
    | ChunksFrame
    | ResultFrame
    | ErrorFrame
    | PongFrame
    | RetryFrame
    | ProvidersChangedFrame
)
ServerFrame = _SERVER_WHOLE | PartFrame | BinaryPartFrame
_JSON_SERVER = _SERVER_WHOLE | PartFrame
_MSGPACK_SERVER = _SERVER_WHOLE | BinaryPartFrame


# Encode-only twins of the chunk frames: the gateway encodes each chunk once,
# as it arrives (its size is what the byte budget counts), and then writes
# frames around those bytes. They encode exactly as `ChunkFrame` / `ChunksFrame`.


class RawChunkFrame(_Frame, frozen=True, tag="chunk"):
    id: str
    chunk: msgspec.Raw
    attempt: int | None = None


class RawChunksFrame(_Frame, frozen=True, tag="chunks"):
    id: str
    chunks: tuple[msgspec.Raw, ...]
    attempt: int | None = None


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


_TOO_DEEP = f"the frame nests arrays/objects more than {MAX_NESTING} deep - at `$`"


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
    #: The server-frame union this encoding decodes (its own kind of `part` frame).
    _server_type: Any
    _values: dict[Any, Any] = attrs.field(factory=dict)

    def encode(self, frame: Any) -> str | bytes:
        """Encode a frame as the websocket message to send (``str`` for JSON)."""
        data = self._encode(frame)
        return data if self.binary else data.decode()

    def raw(self, value: Any) -> msgspec.Raw:
        """Pre-encode a value (a result for `ResultFrame`, a chunk for `RawChunksFrame`)."""
        return msgspec.Raw(self._encode(value))

    def frames_within(self, frame: Any, limit: int) -> list[str | bytes]:
        """The websocket messages that carry ``frame`` with none above ``limit`` bytes.

        One message when it fits; else `PartFrame` (JSON) / `BinaryPartFrame`
        (MessagePack) messages whose data concatenates to the frame. ``limit``
        must be at least `MIN_FRAME_BYTES`.
        """
        data = self._encode(frame)
        if len(data) <= limit:
            return [data if self.binary else data.decode()]
        id = getattr(frame, "id", None)
        id = id if isinstance(id, str) else None
        # Room for the data: the limit less an empty part's envelope, with slack
        # for the length header of a MessagePack bin.
        room = limit - len(self._encode(PartFrame(data="", id=id, more=True))) - 8
        if self.binary:
            cuts = [data[i : i + room] for i in range(0, len(data), room)]
            return [
                self._encode(BinaryPartFrame(data=cut, id=id, more=n < len(cuts) - 1))
                for n, cut in enumerate(cuts)
            ]
        return [
            self._encode(PartFrame(data=cut, id=id, more=more)).decode()
            for cut, more in _text_cuts(data.decode(), room)
        ]

    def decode_client(self, data: str | bytes) -> ClientFrame:
        """Decode a client frame. Raises `DecodeError` naming the problem (and its path).

        A frame nested deeper than `MAX_NESTING` is refused before it is
        decoded: the decoder recurses, and such a frame could exhaust the stack.
        """
        self._refuse_deep(data)
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
        except RecursionError:  # the check above makes this unreachable; never let it out
            raise DecodeError(_TOO_DEEP) from None

    def peek_id(self, data: str | bytes) -> str | None:
        """The ``id`` of a frame that failed to decode, when it has a usable one."""
        if self._too_deep(data):
            return None
        try:
            found = self._peek.decode(self._bytes(data)).id
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeEncodeError, RecursionError):
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
        except RecursionError:
            raise DecodeError(f"invalid request: {_TOO_DEEP}") from None
        except msgspec.ValidationError as exc:
            text = str(exc)
            if " - at `$" not in text:
                text += " - at `$`"
            raise DecodeError(_at_request(f"invalid request: {text}")) from None
        except (msgspec.DecodeError, UnicodeEncodeError) as exc:
            raise DecodeError(f"invalid request: {exc}") from None

    def decode_server(self, data: str | bytes) -> ServerFrame:
        """Decode a server frame (client side). Raises `DecodeError` (also when too deep).

        No depth check before decoding: server frames batch many chunks (many
        brackets), the check would cost a scan of every frame, and the
        decoder's own `RecursionError` is caught instead.
        """
        try:
            try:
                return self._server.decode(self._bytes(data))  # type: ignore[no-any-return]
            except msgspec.ValidationError as exc:
                if not extended():
                    raise
                return self._open(  # type: ignore[no-any-return]
                    self._server_type, self._bytes(data), exc
                )
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeEncodeError) as exc:
            raise DecodeError(f"bad server frame: {exc}") from None
        except RecursionError:
            raise DecodeError("bad server frame: nested too deep to decode") from None

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
        except RecursionError:
            raise DecodeError(f"bad result value: {_TOO_DEEP}") from None

    def _too_deep(self, data: str | bytes) -> bool:
        if self.binary:
            return msgpack_too_deep(data.encode() if isinstance(data, str) else data)
        return json_too_deep(data)

    def _refuse_deep(self, data: str | bytes) -> None:
        if self._too_deep(data):
            raise DecodeError(_TOO_DEEP)

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
    server_type = _JSON_SERVER if module is msgspec.json else _MSGPACK_SERVER
    return Codec(
        subprotocol=subprotocol,
        binary=module is msgspec.msgpack,
        encode=module.Encoder().encode,
        decoder_of=module.Decoder,
        client=module.Decoder(ClientFrame),
        server=module.Decoder(server_type),
        request=module.Decoder(GenerateOptions),
        peek=module.Decoder(_Peek),
        server_type=server_type,
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


def _escaped_size(text: str) -> int:
    # A slice of JSON text holds no raw control characters (msgspec escapes
    # them), so inside a JSON string only quotes and backslashes grow.
    return len(text.encode(errors="surrogatepass")) + text.count('"') + text.count("\\")


def _text_cuts(text: str, room: int) -> list[tuple[str, bool]]:
    """``text`` in consecutive slices, each at most ``room`` bytes once JSON-escaped."""
    cuts: list[tuple[str, bool]] = []
    i = 0
    while i < len(text):
        n = room
        while True:
            size = _escaped_size(text[i : i + n])
            if size <= room:
                break
            # Shrink in proportion (at least by one): converges in a step or two.
            n = max(1, min(n - 1, n * room // size))
        cuts.append((text[i : i + n], i + n < len(text)))
        i += n
    return cuts


#: The deltas whose text may be cut: pieces concatenate to the original.
_Delta = TextDelta | ReasoningDelta | ToolCallDelta


def split_delta(
    chunk: _Delta, size_of: Callable[[StreamChunk], int], room: int
) -> list[StreamChunk]:
    """``chunk`` as consecutive deltas of the same block, each of ``size_of`` <= ``room``.

    Texts (``arguments_delta`` for tool calls) concatenate to the original;
    a tool call's ``id`` is on every piece (as on every fragment an adapter
    sends) and its ``name`` on the first. A piece that
    cannot shrink further (one character) is returned as it is.
    """
    text = chunk.arguments_delta if isinstance(chunk, ToolCallDelta) else chunk.text
    size = size_of(chunk)
    if size <= room or len(text) < 2:
        return [chunk]
    count = min(len(text), -(-size // max(1, room * 9 // 10)))
    step = -(-len(text) // count)
    pieces: list[StreamChunk] = []
    for n, start in enumerate(range(0, len(text), step)):
        piece = text[start : start + step]
        part: _Delta
        if isinstance(chunk, ToolCallDelta):
            first = n == 0
            part = ToolCallDelta(
                index=chunk.index,
                id=chunk.id,
                name=chunk.name if first else None,
                arguments_delta=piece,
            )
        elif isinstance(chunk, TextDelta):
            part = TextDelta(index=chunk.index, text=piece)
        else:
            part = ReasoningDelta(index=chunk.index, text=piece)
        pieces += split_delta(part, size_of, room)
    return pieces


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

    def give_back(self) -> None:
        """Return the token `take` just spent (another budget refused the same request)."""
        self._tokens = min(float(self.burst), self._tokens + 1.0)

    def full(self, now: float) -> bool:
        """Whether the bucket would hold ``burst`` tokens at ``now`` (as good as a new one)."""
        if self._at is None:
            return True
        return self._tokens + (now - self._at) * self.rate >= self.burst


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
