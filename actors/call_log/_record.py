"""The call log's records: one JSON object per line, each tagged by ``kind``.

* ``call``: one request an adapter served (one attempt of a retried or routed
  call is one of these): the request exactly as the adapter received it, its
  digest, who served it, every raw chunk with its arrival time, the finish, usage;
* ``retry``: a ``stream_with_retry`` call: its attempts, the call record of
  each, why each was retried, and the final finish;
* ``routed``: a call to a routing group: the ``call`` records of the
  deployments it tried and the finish's `Routing`.

``v`` is the format's version (`FORMAT_VERSION`); a reader ignores fields it
does not know. No I/O here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from llmrt._chunks import Finish, Routing, StreamChunk, TokenUsage, UsageChunk
from llmrt._codec import decode, encode
from llmrt._request import GenerateOptions

__all__ = [
    "FORMAT_VERSION",
    "CallRecord",
    "LogRecord",
    "RetryAttemptRecord",
    "RetryRecord",
    "RoutedRecord",
    "decode_record",
    "request_digest",
    "usage_of",
]

#: The version of the record format; it changes only when a field changes meaning.
#: 2: a call's chunk times are ``start`` and ``times`` on the runtime's clock (1 had
#: ``offsets`` from the start, which cost the writer a new float per chunk).
FORMAT_VERSION = 2


class _Record(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag_field="kind"):
    v: int = FORMAT_VERSION
    #: The record's id (``llmrt log show ID``); unique across processes and restarts.
    id: str
    #: Wall-clock time (Unix seconds) the record began.
    at: float


class CallRecord(_Record, frozen=True, kw_only=True, tag="call"):
    """One request served by one adapter."""

    #: The route (provider name) the call was made to, and the registration serving it.
    provider: str
    registration: int
    #: The serving adapter's class name.
    adapter: str
    model: str
    #: ``sha256:`` and the hex digest of the request's canonical JSON (`request_digest`).
    digest: str
    #: The request as the adapter received it: defaults applied, images projected, replay gated.
    request: GenerateOptions
    #: Every chunk the adapter yielded (its finish too, when it sent one), in order.
    chunks: tuple[StreamChunk, ...]
    #: The call's start on the runtime's clock (trio's: seconds, from an arbitrary origin).
    start: float = 0.0
    #: Per chunk, its arrival on the same clock (`offsets` subtracts ``start``).
    times: tuple[float, ...] = ()
    #: The call's terminal finish, as the consumer received it (None: none was made).
    finish: Finish | None = None
    #: The last usage the adapter reported (its ``cost`` too, where it prices calls).
    usage: TokenUsage | None = None
    #: Seconds from the call's start to its end.
    duration: float = 0.0
    #: Set when a middleware raised instead of the call finishing: its exception type.
    middleware_error: str | None = None

    @property
    def offsets(self) -> tuple[float, ...]:
        """Per chunk, seconds from the call's start to its arrival."""
        start = self.start
        return tuple(t - start for t in self.times)


class RetryAttemptRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One attempt of a retried call: its call record, and why it was retried."""

    attempt: int
    #: The id of the attempt's ``call`` (or ``routed``) record; None: it never reached one.
    call: str | None = None
    #: The failure code that made it retried, and the back-off; None on the last attempt.
    code: str | None = None
    delay_ms: float | None = None


class RetryRecord(_Record, frozen=True, kw_only=True, tag="retry"):
    """A call run by ``stream_with_retry``."""

    provider: str
    model: str
    attempts: tuple[RetryAttemptRecord, ...]
    finish: Finish | None = None


class RoutedRecord(_Record, frozen=True, kw_only=True, tag="routed"):
    """A call to a routing group."""

    group: str
    #: The ids of the ``call`` records of the deployments tried, in order.
    calls: tuple[str, ...]
    routing: Routing | None = None
    finish: Finish | None = None


LogRecord = CallRecord | RetryRecord | RoutedRecord


def request_digest(request: GenerateOptions) -> str:
    """The stable digest of a request: sha256 of its canonical JSON (`llmrt.encode`)."""
    return "sha256:" + hashlib.sha256(encode(request)).hexdigest()


def usage_of(chunks: Sequence[StreamChunk]) -> TokenUsage | None:
    """The last usage among ``chunks`` (the one a consumer's assembler keeps)."""
    for chunk in reversed(chunks):
        if type(chunk) is UsageChunk:
            return chunk.usage
    return None


def decode_record(line: bytes | str) -> LogRecord:
    """One line of a call log as its record. Raises `llmrt.DecodeError`."""
    record: LogRecord = decode(line, LogRecord)
    return record
