"""Classify provider errors (HTTP error responses and in-band stream errors) into `LlmFailure`s.

Pure functions, no I/O. Inputs are what an adapter has at hand: the provider
kind (``"openai"``, ``"deepseek"``, ``"anthropic"``; any other
OpenAI-compatible server is classified like ``"openai"``), the HTTP status,
the response headers and the raw body bytes, or the decoded payload of an
in-band error event.

Precedence, most specific first (the cases in ``tests/wire/errors.json`` are
the authority):

1. context-window overflow, recognised by the providers' documented codes
   and messages (``CONTEXT_WINDOW_EXCEEDED``), for 400/404/413/422 and in-band;
2. exhausted credit: OpenAI ``insufficient_quota`` (sent as 429), Anthropic
   ``billing_error`` or its 400 "credit balance is too low" message, and
   HTTP 402 (``INSUFFICIENT_BALANCE``);
3. Anthropic's ``error.type`` when it is one of the documented types;
4. the HTTP status; for in-band errors (no status) the error code/type.

Decided explicitly: OpenAI's 429 ``rate_limit_exceeded`` "Request too large
... on tokens per min" stays ``RATE_LIMIT`` (its code says so), although a
request above the per-minute limit can never succeed on retry. The retry
policy bounds the attempts; the message carries the provider's explanation.
Anthropic's ``timeout_error`` maps to ``TIMEOUT``.

Messages quote the provider's error text (truncated), never the raw body in
full, never request headers; credential-looking phrases the provider echoes
back are redacted here, before any cut (`llmrt.adapter.Redactor` without secrets).
The exact keys are removed by value where the call receives the failure
(the one redaction point, docs/security.md).
"""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import math
import re
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from llmrt import ErrorCode, LlmFailure
from llmrt.adapter import Redactor

__all__ = [
    "classify_http_error",
    "classify_stream_error",
    "is_context_window_exceeded",
    "parse_retry_after",
]

#: Longest provider text quoted in a failure message, in characters.
MAX_MESSAGE_CHARS = 500

# Lower-cased substrings of the providers' documented overflow messages.
_OVERFLOW_TEXTS = (
    "maximum context length",  # OpenAI, DeepSeek, vLLM, OpenRouter, Mistral
    "context_length_exceeded",
    "prompt is too long",  # Anthropic: "prompt is too long: N tokens > M maximum"
    "exceed context limit",  # Anthropic: "input length and `max_tokens` exceed context limit"
    "exceeds the context window",  # OpenAI Responses API
    "exceeds the available context size",  # llama.cpp server
    "context window exceeded",
)
_OVERFLOW_CODES = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "model_context_window_exceeded"}
)
_CREDIT_TEXTS = ("credit balance is too low", "insufficient balance", "insufficient_quota")
_CREDIT_CODES = frozenset({"insufficient_quota", "billing_error", "insufficient_balance"})

_ANTHROPIC_TYPES: dict[str, ErrorCode] = {
    "invalid_request_error": ErrorCode.INVALID_REQUEST,
    "authentication_error": ErrorCode.AUTH,
    "permission_error": ErrorCode.AUTH,
    "not_found_error": ErrorCode.INVALID_REQUEST,
    "request_too_large": ErrorCode.INVALID_REQUEST,
    "rate_limit_error": ErrorCode.RATE_LIMIT,
    "api_error": ErrorCode.SERVER_ERROR,
    "overloaded_error": ErrorCode.OVERLOADED,
    "billing_error": ErrorCode.INSUFFICIENT_BALANCE,
    "timeout_error": ErrorCode.TIMEOUT,
}
# In-band errors have no status: route on the code, then the type.
_INBAND_NAMES: dict[str, ErrorCode] = {
    **_ANTHROPIC_TYPES,
    "invalid_api_key": ErrorCode.AUTH,
    "rate_limit_exceeded": ErrorCode.RATE_LIMIT,
    "tokens": ErrorCode.RATE_LIMIT,
    "requests": ErrorCode.RATE_LIMIT,
    "server_error": ErrorCode.SERVER_ERROR,
    "internal_error": ErrorCode.SERVER_ERROR,
    "overloaded": ErrorCode.OVERLOADED,
    "server_overloaded": ErrorCode.OVERLOADED,
}
_STATUS: dict[int, ErrorCode] = {
    400: ErrorCode.INVALID_REQUEST,
    401: ErrorCode.AUTH,
    402: ErrorCode.INSUFFICIENT_BALANCE,
    403: ErrorCode.AUTH,
    404: ErrorCode.INVALID_REQUEST,
    408: ErrorCode.TIMEOUT,
    413: ErrorCode.INVALID_REQUEST,
    422: ErrorCode.INVALID_REQUEST,
    429: ErrorCode.RATE_LIMIT,
    500: ErrorCode.SERVER_ERROR,
    502: ErrorCode.SERVER_ERROR,
    503: ErrorCode.OVERLOADED,
    504: ErrorCode.SERVER_ERROR,
    529: ErrorCode.OVERLOADED,
}
# Statuses whose body may reveal a context overflow (others never do).
_OVERFLOW_STATUSES = frozenset({400, 404, 413, 422})
_REQUEST_ID_HEADERS = ("request-id", "x-request-id", "x-ds-trace-id")

_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")
# A provider echoing a (usually masked) key back: "Incorrect API key provided: sk-...".
_PHRASES = Redactor()
_HTML_TITLE = re.compile(rb"(?is)<title[^>]*>(.*?)</title>")
_SPACES = re.compile(r"\s+")

_json_decoder = msgspec.json.Decoder()


class _ErrorInfo(msgspec.Struct, frozen=True):
    """What a body or payload says about an error, all optional."""

    message: str = ""
    type: str = ""
    code: str = ""
    request_id: str | None = None
    #: An integer ``code`` inside the error object (vLLM-style servers put the status there).
    status: int | None = None


def is_context_window_exceeded(
    message: str | None, *, code: str | None = None, error_type: str | None = None
) -> bool:
    """Whether a provider error says the prompt does not fit the model's context window.

    Recognises OpenAI's ``context_length_exceeded`` code and "maximum context
    length" texts, DeepSeek's "This model's maximum context length is N
    tokens..." (sent with a generic code), Anthropic's "prompt is too long: N
    tokens > M maximum" and "... exceed context limit", and llama.cpp's
    ``exceed_context_size_error``. A message that merely mentions tokens (e.g.
    an invalid ``max_tokens`` range) does not count.
    """
    for name in (code, error_type):
        if name and name.lower() in _OVERFLOW_CODES:
            return True
    if not message:
        return False
    text = message.lower()
    return any(phrase in text for phrase in _OVERFLOW_TEXTS)


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> int | None:
    """The delay a provider asks for, in whole milliseconds (rounded up), or None.

    Reads ``retry-after-ms`` (milliseconds) first, then ``Retry-After`` as
    seconds (integer or decimal) or as an HTTP date, relative to ``now``
    (seconds since the epoch; default: the current time). Header names are
    matched case-insensitively. A missing, unparseable, zero, negative or
    past value gives None.
    """
    lower = _lower_keys(headers)
    ms = lower.get("retry-after-ms")
    if ms is not None and _SECONDS.fullmatch(ms.strip()):
        value = math.ceil(float(ms.strip()))
        if value > 0:
            return value
    after = lower.get("retry-after")
    if after is None:
        return None
    after = after.strip()
    if _SECONDS.fullmatch(after):
        value = math.ceil(float(after) * 1000)
        return value if value > 0 else None
    try:
        when = email.utils.parsedate_to_datetime(after)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # asctime form or "-0000": HTTP dates are GMT (RFC 9110)
        when = when.replace(tzinfo=datetime.UTC)
    delay = when.timestamp() - (time.time() if now is None else now)
    value = math.ceil(delay * 1000)
    return value if value > 0 else None


def classify_http_error(
    provider_kind: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float | None = None,
) -> LlmFailure:
    """Turn a non-2xx provider response into an `LlmFailure`; never raises.

    The body is parsed as JSON whatever its content type (DeepSeek sends JSON
    as ``application/octet-stream``); a body that is not JSON (an HTML page
    from a proxy, an empty body) is classified by status alone. ``status`` is
    the HTTP status, ``provider_retry_after_ms`` comes from `parse_retry_after`
    (``now`` as there), ``request_id`` from the ``request-id`` /
    ``x-request-id`` / ``x-ds-trace-id`` header or the body's ``request_id``.
    """
    lower = _lower_keys(headers)
    info = _info_from_body(body)
    code = _decide(provider_kind, status, info)
    request_id = next((lower[h] for h in _REQUEST_ID_HEADERS if lower.get(h)), None)
    if info.message:
        text = info.message
    elif body.strip():
        text = _describe_non_json(body)
    else:
        text = "empty response body"
    label = f"{provider_kind} HTTP {status}{_detail(info)}"
    failure = LlmFailure(
        message=f"{label}: {_clean(text)}",
        code=code,
        status=status,
        provider_retry_after_ms=parse_retry_after(headers, now),
        request_id=request_id or info.request_id,
    )
    if provider_kind == "gemini":
        with contextlib.suppress(msgspec.DecodeError):
            failure = _refine_google(failure, _json_decoder.decode(body))
    return failure


def classify_stream_error(provider_kind: str, payload: Mapping[str, Any]) -> LlmFailure:
    """Turn an in-band error event's decoded ``data`` into an `LlmFailure`; never raises.

    Handles OpenAI-style ``{"error": {"message", "type", "code"}}`` objects
    (also DeepSeek and compatible servers) and Anthropic ``event: error``
    payloads (``{"type": "error", "error": {"type": "overloaded_error", ...}}``,
    which arrive after HTTP 200). ``status`` stays None.
    """
    info = _info_from_object(payload)
    code = _decide(provider_kind, info.status, info)
    label = f"{provider_kind} stream error{_detail(info)}"
    failure = LlmFailure(
        message=f"{label}: {_clean(info.message or 'no message')}",
        code=code,
        request_id=info.request_id,
    )
    if provider_kind == "gemini":
        failure = _refine_google(failure, payload)
    return failure


# -- internals -------------------------------------------------------------


def _decide(provider_kind: str, status: int | None, info: _ErrorInfo) -> ErrorCode:
    names = (info.code.lower(), info.type.lower())
    if (status is None or status in _OVERFLOW_STATUSES) and is_context_window_exceeded(
        info.message, code=names[0], error_type=names[1]
    ):
        return ErrorCode.CONTEXT_WINDOW_EXCEEDED
    text = info.message.lower()
    if any(n in _CREDIT_CODES for n in names) or any(t in text for t in _CREDIT_TEXTS):
        return ErrorCode.INSUFFICIENT_BALANCE
    if provider_kind == "anthropic" and names[1] in _ANTHROPIC_TYPES:
        return _ANTHROPIC_TYPES[names[1]]
    if status is not None:
        known = _STATUS.get(status)
        if known is not None:
            return known
        if 400 <= status < 500:
            return ErrorCode.INVALID_REQUEST
        if status >= 500:
            return ErrorCode.SERVER_ERROR
        # 1xx/2xx/3xx where an error was expected: the exchange itself is wrong.
        return ErrorCode.PROTOCOL
    for name in names:
        if name in _INBAND_NAMES:
            return _INBAND_NAMES[name]
    if "overloaded" in text:
        return ErrorCode.OVERLOADED
    return ErrorCode.SERVER_ERROR


def _info_from_body(body: bytes) -> _ErrorInfo:
    try:
        decoded = _json_decoder.decode(body)
    except msgspec.DecodeError:
        return _ErrorInfo()
    return _info_from_object(decoded) if isinstance(decoded, Mapping) else _ErrorInfo()


def _info_from_object(obj: Mapping[str, Any]) -> _ErrorInfo:
    """Read ``{"error": {...}}`` (OpenAI, Anthropic), ``{"error": "text"}`` or a flat object."""
    error = obj.get("error")
    if isinstance(error, str):
        inner: Mapping[str, Any] = {"message": error}
    elif isinstance(error, Mapping):
        inner = error
    else:
        inner = obj  # vLLM-style flat {"object": "error", "message", "type", "code"}
    raw_code = inner.get("code")
    status = raw_code if type(raw_code) is int and 100 <= raw_code <= 599 else None
    request_id = obj.get("request_id")
    return _ErrorInfo(
        message=_text(inner.get("message")),
        type=_text(inner.get("type")),
        code=_text(raw_code) if status is None else "",
        request_id=request_id if isinstance(request_id, str) and request_id else None,
        status=status,
    )


def _detail(info: _ErrorInfo) -> str:
    names = [n for n in dict.fromkeys((info.type, info.code)) if n]
    return f" ({', '.join(names)})" if names else ""


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _describe_non_json(body: bytes) -> str:
    title = _HTML_TITLE.search(body[:65536])
    snippet = title.group(1) if title else body[:2048]
    return "non-JSON body: " + snippet.decode("utf-8", "replace")


def _clean(text: str) -> str:
    """One line, key-like tokens redacted, at most MAX_MESSAGE_CHARS characters."""
    text = _SPACES.sub(" ", text).strip()
    text = _PHRASES.redact(text)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text


def _lower_keys(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


# -- Google (Gemini API) ---------------------------------------------------
#
# Google's errors are ``{"error": {"code": <HTTP status>, "message", "status":
# "RESOURCE_EXHAUSTED", "details": [...]}}``. The generic reading routes them
# by ``code``; these facts only the Google form carries come on top.

_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)s\s*")
# "The input token count (N) exceeds the maximum number of tokens allowed (M)."
_GOOGLE_OVERFLOW = re.compile(r"input token count.*exceeds the maximum", re.IGNORECASE | re.DOTALL)
# ``error.status`` names, for in-band errors whose ``code`` is missing.
_GOOGLE_STATUS: dict[str, ErrorCode] = {
    "INVALID_ARGUMENT": ErrorCode.INVALID_REQUEST,
    "FAILED_PRECONDITION": ErrorCode.INVALID_REQUEST,
    "NOT_FOUND": ErrorCode.INVALID_REQUEST,
    "UNAUTHENTICATED": ErrorCode.AUTH,
    "PERMISSION_DENIED": ErrorCode.AUTH,
    "RESOURCE_EXHAUSTED": ErrorCode.RATE_LIMIT,
    "UNAVAILABLE": ErrorCode.OVERLOADED,
    "DEADLINE_EXCEEDED": ErrorCode.TIMEOUT,
    "INTERNAL": ErrorCode.SERVER_ERROR,
}
_GOOGLE_AUTH_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED"})


def _google_error(payload: object) -> Mapping[str, Any]:
    """The inner object of ``{"error": {...}}``, also inside a one-element list."""
    if isinstance(payload, list) and payload:
        payload = payload[0]
    if isinstance(payload, Mapping):
        inner = payload.get("error")
        if isinstance(inner, Mapping):
            return inner
    return {}


def _google_retry_ms(details: list[Mapping[str, Any]]) -> int | None:
    """``RetryInfo.retryDelay`` (a protobuf Duration: ``"37s"``, ``"1.5s"``) in ms, rounded up."""
    for detail in details:
        delay = detail.get("retryDelay") if detail.get("@type") == _RETRY_INFO else None
        found = _DURATION.fullmatch(delay) if isinstance(delay, str) else None
        if found:
            value = math.ceil(float(found[1]) * 1000)
            return value if value > 0 else None
    return None


def _refine_google(failure: LlmFailure, payload: object) -> LlmFailure:
    """Refine a Gemini failure from the error object's message, status and details.

    "input token count ... exceeds the maximum" -> ``CONTEXT_WINDOW_EXCEEDED``;
    an ``ErrorInfo`` reason ``API_KEY_INVALID`` (Google sends it as 400) ->
    ``AUTH``; an in-band error without a ``code`` routes on ``status``; a
    ``RetryInfo.retryDelay`` -> ``providerRetryAfterMs`` when no header gave one.
    """
    error = _google_error(payload)
    if not error:
        return failure
    raw_details = error.get("details")
    details = (
        [d for d in raw_details if isinstance(d, Mapping)] if isinstance(raw_details, list) else []
    )
    reasons = {d.get("reason") for d in details if d.get("@type") == _ERROR_INFO}
    message, status_name = error.get("message"), error.get("status")
    code = failure.code
    if isinstance(message, str) and _GOOGLE_OVERFLOW.search(message):
        code = ErrorCode.CONTEXT_WINDOW_EXCEEDED
    elif reasons & _GOOGLE_AUTH_REASONS:
        code = ErrorCode.AUTH
    elif (
        failure.status is None
        and not isinstance(error.get("code"), int)
        and isinstance(status_name, str)
        and status_name in _GOOGLE_STATUS
    ):
        code = _GOOGLE_STATUS[status_name]
    retry_after = failure.provider_retry_after_ms
    if retry_after is None:
        retry_after = _google_retry_ms(details)
    if isinstance(status_name, str) and status_name and status_name not in failure.message:
        # Name Google's status in the message, as the type is named for others.
        label, _, rest = failure.message.partition(": ")
        failure = msgspec.structs.replace(failure, message=f"{label} ({status_name}): {rest}")
    return msgspec.structs.replace(failure, code=code, provider_retry_after_ms=retry_after)
