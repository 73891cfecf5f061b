"""The error vocabulary: stable codes, the serializable failure, and `LlmError`.

Consumers route on :class:`ErrorCode` values, never on message text. A failure
that ends a call travels as an :class:`LlmFailure` inside a terminal ``finish``
chunk; the same value is carried by :class:`LlmError` when it is raised.

Exception tree::

    Exception
    ├── LlmError            one LlmFailure; every provider, transport and registry failure
    └── ValueError
        └── DecodeError     bad wire input (wrong tag, missing field, bad JSON), with a field path
"""

from __future__ import annotations

import enum
from typing import Annotated

import msgspec
import trio

__all__ = ["ErrorCode", "LlmFailure", "LlmError", "DecodeError", "failure_of"]


class ErrorCode(enum.StrEnum):
    """Stable machine-routing codes. New codes may be added; none is renamed."""

    NO_ADAPTER = "NO_ADAPTER"
    DUPLICATE_ADAPTER = "DUPLICATE_ADAPTER"
    REGISTRATION_DISPOSED = "REGISTRATION_DISPOSED"
    INVALID_PROVIDER = "INVALID_PROVIDER"
    MISSING_CREDENTIAL = "MISSING_CREDENTIAL"
    INVALID_CREDENTIAL = "INVALID_CREDENTIAL"
    AUTH = "AUTH"
    INSUFFICIENT_BALANCE = "INSUFFICIENT_BALANCE"
    RATE_LIMIT = "RATE_LIMIT"
    OVERLOADED = "OVERLOADED"
    SERVER_ERROR = "SERVER_ERROR"
    INVALID_REQUEST = "INVALID_REQUEST"
    CONTEXT_WINDOW_EXCEEDED = "CONTEXT_WINDOW_EXCEEDED"
    EMPTY_RESPONSE = "EMPTY_RESPONSE"
    TIMEOUT = "TIMEOUT"
    ABORTED = "ABORTED"
    NETWORK = "NETWORK"
    PROTOCOL = "PROTOCOL"
    UNSUPPORTED_REASONING_EFFORT = "UNSUPPORTED_REASONING_EFFORT"
    INVALID_PREPARED_CALL = "INVALID_PREPARED_CALL"
    INVALID_MODEL_INFO = "INVALID_MODEL_INFO"
    #: An adapter raised something that is not an `LlmError` (a bug in the
    #: adapter, not a provider answer). The message names the exception type.
    INTERNAL = "INTERNAL"


class LlmFailure(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Serializable facts about a failed call; retry policy decides what to do with them."""

    message: str
    code: str
    status: int | None = None
    #: A provider-requested delay, validated positive; not a retry decision.
    provider_retry_after_ms: Annotated[int, msgspec.Meta(gt=0)] | None = None
    #: Opaque provider request id, for diagnostics.
    request_id: str | None = None

    def __post_init__(self) -> None:
        # Decoding checks the Meta constraint; constructing does not, so check
        # here too: a failure with a negative delay must not exist at all.
        delay = self.provider_retry_after_ms
        if delay is not None and (type(delay) is not int or delay <= 0):
            raise ValueError(f"provider_retry_after_ms must be a positive int, not {delay!r}")


class LlmError(Exception):
    """A failure with a stable code. ``str(err)`` is ``"CODE: message"``.

    Construct it from a code and message, or wrap an existing failure with
    :meth:`from_failure`.
    """

    failure: LlmFailure

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        provider_retry_after_ms: int | None = None,
        request_id: str | None = None,
    ) -> None:
        retry_after = (
            provider_retry_after_ms
            if provider_retry_after_ms is not None and provider_retry_after_ms > 0
            else None
        )
        self.failure = LlmFailure(
            message=message,
            code=str(code),
            status=status,
            provider_retry_after_ms=retry_after,
            request_id=request_id,
        )
        super().__init__(f"{code}: {message}")

    @classmethod
    def from_failure(cls, failure: LlmFailure) -> LlmError:
        err = cls.__new__(cls)
        Exception.__init__(err, f"{failure.code}: {failure.message}")
        err.failure = failure
        return err

    @property
    def code(self) -> str:
        return self.failure.code


class DecodeError(ValueError):
    """Wire input that does not decode to the expected llmrt value.

    The message says what was wrong and where, as a JSON path
    (``Expected `int`, got `str` - at `$.index```).
    """


def failure_of(exc: BaseException) -> LlmFailure:
    """Turn any exception into the failure that a terminal finish chunk carries.

    `LlmError` keeps its own failure; timeouts become ``TIMEOUT``; OS-level
    connection errors ``NETWORK``; bad wire input ``PROTOCOL``; anything else
    ``INTERNAL`` naming the exception type. Adapters should translate their
    library's exceptions into `LlmError` at the edge; this is the backstop.
    """
    if isinstance(exc, LlmError):
        return exc.failure
    if isinstance(exc, TimeoutError | trio.TooSlowError):
        return LlmFailure(message=f"timed out: {_describe(exc)}", code=ErrorCode.TIMEOUT)
    if isinstance(exc, OSError | trio.BrokenResourceError):
        return LlmFailure(message=f"connection failed: {_describe(exc)}", code=ErrorCode.NETWORK)
    if isinstance(exc, DecodeError | msgspec.DecodeError):
        return LlmFailure(message=f"malformed provider data: {exc}", code=ErrorCode.PROTOCOL)
    return LlmFailure(message=f"adapter raised {_describe(exc)}", code=ErrorCode.INTERNAL)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
