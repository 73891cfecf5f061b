"""Google's error objects in the shared classifier (provider kind ``gemini``), without sockets."""

from __future__ import annotations

import json

from llmrt import ErrorCode
from llmrt.adapters._classify import classify_http_error, classify_stream_error

RETRY = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "4.5s"}


def body(**error: object) -> bytes:
    return json.dumps({"error": error}).encode()


def test_a_header_delay_wins_over_retry_info() -> None:
    raw = body(code=429, message="slow down", status="RESOURCE_EXHAUSTED", details=[RETRY])
    assert classify_http_error("gemini", 429, {}, raw).provider_retry_after_ms == 4500
    with_header = classify_http_error("gemini", 429, {"Retry-After": "1"}, raw)
    assert with_header.provider_retry_after_ms == 1000


def test_a_list_wrapped_error_is_read() -> None:
    raw = json.dumps([{"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}}])
    failure = classify_http_error("gemini", 503, {}, raw.encode())
    assert failure.code == ErrorCode.OVERLOADED
    assert "UNAVAILABLE" in failure.message


def test_odd_details_are_ignored() -> None:
    raw = body(code=429, message="m", details=["text", {"@type": RETRY["@type"], "retryDelay": 5}])
    failure = classify_http_error("gemini", 429, {}, raw)
    assert failure.code == ErrorCode.RATE_LIMIT and failure.provider_retry_after_ms is None


def test_other_providers_are_not_refined() -> None:
    raw = body(
        code=400,
        message="The input token count (9) exceeds the maximum number of tokens allowed (8).",
        status="INVALID_ARGUMENT",
    )
    assert classify_http_error("gemini", 400, {}, raw).code == ErrorCode.CONTEXT_WINDOW_EXCEEDED
    assert classify_http_error("openai", 400, {}, raw).code == ErrorCode.INVALID_REQUEST


def test_in_band_errors_route_on_the_status_name_without_a_code() -> None:
    payload = {"error": {"message": "try later", "status": "DEADLINE_EXCEEDED"}}
    assert classify_stream_error("gemini", payload).code == ErrorCode.TIMEOUT
    payload = {"error": {"message": "no", "status": "PERMISSION_DENIED", "details": [RETRY]}}
    failure = classify_stream_error("gemini", payload)
    assert failure.code == ErrorCode.AUTH and failure.provider_retry_after_ms == 4500
