"""llmrt's error codes as the provider APIs answer them: HTTP status, headers and error JSON.

One table (`ERROR_CLASSES`) from `llmrt.ErrorCode` to the HTTP status and
each API family's own names for the error: OpenAI's ``error.type`` /
``error.code`` (Chat Completions and Responses share them) and Anthropic's
``error.type`` (with its own status for overload, 529). A code the table does
not know is a 500. Pure functions, no I/O: the HTTP handler writes what they
return. A failure's message has already passed the adapter's and the
runtime's redaction; nothing here adds a secret.

`ApiRequestError` is what the request decoders raise: an `LlmError` (code
``INVALID_REQUEST`` or ``NO_ADAPTER``) that also names the request
parameter at fault, which OpenAI's error shape carries as ``param``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import attrs
import msgspec

from llmrt import ErrorCode, LlmError, LlmFailure

__all__ = [
    "ApiRequestError",
    "ErrorAnswer",
    "ErrorClass",
    "ERROR_CLASSES",
    "error_class",
    "openai_error",
    "anthropic_error",
    "openai_error_object",
    "anthropic_error_object",
    "retry_headers",
]


class ApiRequestError(LlmError):
    """A request the API refuses before any call: the code, the message and the parameter.

    ``param`` is the parameter's path in the request body (``messages[2].content``,
    ``n``), or None when the body as a whole is at fault.
    """

    def __init__(self, code: str, message: str, *, param: str | None = None) -> None:
        super().__init__(code, message)
        self.param = param


@attrs.frozen
class ErrorClass:
    """How one error code is answered: the status and each family's error names."""

    status: int
    #: OpenAI's ``error.type``.
    openai_type: str
    #: OpenAI's ``error.code`` (None: ``null``).
    openai_code: str | None
    #: Anthropic's ``error.type``.
    anthropic_type: str
    #: Anthropic's status when it differs from ``status`` (529 for overload).
    anthropic_status: int | None = None

    @property
    def messages_status(self) -> int:
        return self.anthropic_status or self.status


_CREDENTIALS = ErrorClass(401, "invalid_request_error", "invalid_api_key", "authentication_error")
_BAD_REQUEST = ErrorClass(400, "invalid_request_error", None, "invalid_request_error")
_UPSTREAM = ErrorClass(502, "server_error", None, "api_error")
_INTERNAL = ErrorClass(500, "server_error", None, "api_error")

#: The answer of every `ErrorCode`; docs/http-api.md prints this table.
ERROR_CLASSES: Final[Mapping[str, ErrorClass]] = {
    ErrorCode.RATE_LIMIT: ErrorClass(429, "requests", "rate_limit_exceeded", "rate_limit_error"),
    ErrorCode.INSUFFICIENT_BALANCE: ErrorClass(
        402, "insufficient_quota", "insufficient_quota", "billing_error"
    ),
    ErrorCode.AUTH: _CREDENTIALS,
    ErrorCode.INVALID_CREDENTIAL: _CREDENTIALS,
    ErrorCode.MISSING_CREDENTIAL: _CREDENTIALS,
    ErrorCode.CONTEXT_WINDOW_EXCEEDED: ErrorClass(
        400, "invalid_request_error", "context_length_exceeded", "invalid_request_error"
    ),
    ErrorCode.INVALID_REQUEST: _BAD_REQUEST,
    ErrorCode.UNSUPPORTED_REASONING_EFFORT: ErrorClass(
        400, "invalid_request_error", "unsupported_value", "invalid_request_error"
    ),
    ErrorCode.INVALID_PROVIDER: _BAD_REQUEST,
    ErrorCode.NO_ADAPTER: ErrorClass(
        404, "invalid_request_error", "model_not_found", "not_found_error"
    ),
    ErrorCode.TIMEOUT: ErrorClass(504, "server_error", "timeout", "timeout_error"),
    ErrorCode.OVERLOADED: ErrorClass(
        503, "server_error", "overloaded", "overloaded_error", anthropic_status=529
    ),
    ErrorCode.SERVER_ERROR: _UPSTREAM,
    ErrorCode.NETWORK: _UPSTREAM,
    ErrorCode.PROTOCOL: _UPSTREAM,
    ErrorCode.EMPTY_RESPONSE: _UPSTREAM,
    # A call aborted by anyone but the client (the gateway shutting down):
    # the client is still there to read it, and may try again elsewhere.
    ErrorCode.ABORTED: ErrorClass(503, "server_error", "aborted", "api_error"),
    ErrorCode.INTERNAL: _INTERNAL,
    ErrorCode.DUPLICATE_ADAPTER: _INTERNAL,
    ErrorCode.REGISTRATION_DISPOSED: _INTERNAL,
    ErrorCode.INVALID_PREPARED_CALL: _INTERNAL,
    ErrorCode.INVALID_MODEL_INFO: _INTERNAL,
}

_encode = msgspec.json.Encoder().encode


def error_class(code: str) -> ErrorClass:
    """The answer of ``code``; a code llmrt does not know (a plugin's) is a 500."""
    return ERROR_CLASSES.get(code, _INTERNAL)


@attrs.frozen
class ErrorAnswer:
    """One complete HTTP error answer: status, headers (beside the handler's own) and JSON body."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


def retry_headers(failure: LlmFailure) -> tuple[tuple[str, str], ...]:
    """``retry-after`` (whole seconds, rounded up) and ``retry-after-ms`` of a provider's delay.

    Both SDKs read ``retry-after-ms`` first; other clients know only ``retry-after``.
    """
    delay = failure.provider_retry_after_ms
    if delay is None:
        return ()
    return (("retry-after", str(math.ceil(delay / 1000))), ("retry-after-ms", str(delay)))


def _param(failure: LlmFailure | LlmError) -> tuple[LlmFailure, str | None]:
    if isinstance(failure, ApiRequestError):
        return failure.failure, failure.param
    if isinstance(failure, LlmError):
        return failure.failure, None
    return failure, None


def openai_error_object(failure: LlmFailure | LlmError) -> dict[str, Any]:
    """OpenAI's ``{"message", "type", "param", "code"}`` (the value of ``error``)."""
    found, param = _param(failure)
    kind = error_class(found.code)
    return {
        "message": found.message,
        "type": kind.openai_type,
        "param": param,
        "code": kind.openai_code,
    }


def anthropic_error_object(failure: LlmFailure | LlmError) -> dict[str, Any]:
    """Anthropic's ``{"type": "error", "error": {"type", "message"}}``."""
    found, _ = _param(failure)
    kind = error_class(found.code)
    return {"type": "error", "error": {"type": kind.anthropic_type, "message": found.message}}


def openai_error(failure: LlmFailure | LlmError) -> ErrorAnswer:
    """The HTTP answer of a failure in OpenAI's shape (Chat Completions, Responses)."""
    found, _ = _param(failure)
    body = _encode({"error": openai_error_object(failure)})
    return ErrorAnswer(error_class(found.code).status, retry_headers(found), body)


def anthropic_error(failure: LlmFailure | LlmError) -> ErrorAnswer:
    """The HTTP answer of a failure in Anthropic's shape (Messages)."""
    found, _ = _param(failure)
    body = _encode(anthropic_error_object(failure))
    return ErrorAnswer(error_class(found.code).messages_status, retry_headers(found), body)
