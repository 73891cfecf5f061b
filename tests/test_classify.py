"""HTTP and in-band error classification against the recorded/quoted cases in wire/errors.json."""

from __future__ import annotations

import email.utils
import json
from pathlib import Path
from typing import Any

import pytest

from llmrt import ErrorCode
from llmrt.adapters._classify import (
    classify_http_error,
    classify_stream_error,
    is_context_window_exceeded,
    parse_retry_after,
)

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parent / "wire" / "errors.json").read_text(encoding="utf-8")
)
NOW = 1_780_000_000.0  # a fixed "now" for HTTP-date arithmetic


def test_all_cases_present() -> None:
    assert len(CASES) == 23


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_errors_json_case(case: dict[str, Any]) -> None:
    failure = classify_http_error(
        case["provider"],
        case["http_status"],
        case["headers"],
        case["body"].encode(),
        now=NOW,
    )
    assert failure.code == case["expected_code"]
    assert failure.provider_retry_after_ms == case["expected_retry_after_ms"]
    assert failure.status == case["http_status"]
    # The provider's own words are quoted, not the raw JSON envelope.
    assert '{"' not in failure.message
    assert len(failure.message) <= 600
    body = json.loads(case["body"])
    header_id = next(
        (
            case["headers"][h]
            for h in ("request-id", "x-request-id", "x-ds-trace-id")
            if h in case["headers"]
        ),
        None,
    )
    assert failure.request_id == (header_id or body.get("request_id"))


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_message_quotes_provider_text(case: dict[str, Any]) -> None:
    failure = classify_http_error(
        case["provider"], case["http_status"], case["headers"], case["body"].encode()
    )
    provider_text = json.loads(case["body"])["error"]["message"]
    assert provider_text.split(":")[0].split(",")[0][:30] in failure.message


def test_echoed_api_key_is_redacted() -> None:
    case = next(c for c in CASES if c["id"] == "openai_401_auth")
    failure = classify_http_error("openai", 401, case["headers"], case["body"].encode())
    assert "invalid-key" not in failure.message
    assert failure.code == ErrorCode.AUTH
    body = json.dumps(
        {"error": {"message": "Incorrect API key provided: sk-proj-abcdefgh1234. See docs."}}
    )
    failure = classify_http_error("openai", 401, {}, body.encode())
    assert "sk-proj" not in failure.message
    assert "abcdefgh1234" not in failure.message


def test_long_provider_text_is_truncated() -> None:
    body = json.dumps({"error": {"message": "x" * 10_000, "type": "server_error"}}).encode()
    failure = classify_http_error("openai", 500, {}, body)
    assert failure.code == ErrorCode.SERVER_ERROR
    assert 400 < len(failure.message) < 600


# -- non-JSON bodies ------------------------------------------------------------


def test_html_body_with_502() -> None:
    html = (
        b"<html><head><title>502 Bad Gateway</title></head>"
        b"<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center>"
        + b"<!-- padding -->" * 500
        + b"</body></html>"
    )
    failure = classify_http_error("openai", 502, {"Content-Type": "text/html"}, html)
    assert failure.code == ErrorCode.SERVER_ERROR
    assert failure.status == 502
    assert "502 Bad Gateway" in failure.message
    assert "padding" not in failure.message


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, ErrorCode.INVALID_REQUEST),
        (401, ErrorCode.AUTH),
        (403, ErrorCode.AUTH),
        (402, ErrorCode.INSUFFICIENT_BALANCE),
        (404, ErrorCode.INVALID_REQUEST),
        (408, ErrorCode.TIMEOUT),
        (413, ErrorCode.INVALID_REQUEST),
        (418, ErrorCode.INVALID_REQUEST),
        (422, ErrorCode.INVALID_REQUEST),
        (429, ErrorCode.RATE_LIMIT),
        (500, ErrorCode.SERVER_ERROR),
        (502, ErrorCode.SERVER_ERROR),
        (503, ErrorCode.OVERLOADED),
        (504, ErrorCode.SERVER_ERROR),
        (529, ErrorCode.OVERLOADED),
        (599, ErrorCode.SERVER_ERROR),
        (302, ErrorCode.PROTOCOL),
    ],
)
@pytest.mark.parametrize("provider", ["openai", "deepseek", "anthropic"])
def test_empty_body_classifies_by_status(provider: str, status: int, code: ErrorCode) -> None:
    failure = classify_http_error(provider, status, {}, b"")
    assert failure.code == code
    assert "empty response body" in failure.message


@pytest.mark.parametrize(
    "body", [b"not json", b"\x00\xff\xfe", b"[1, 2]", b'"text"', b"{", b'{"error": 5}']
)
def test_odd_bodies_do_not_raise(body: bytes) -> None:
    assert classify_http_error("openai", 503, {}, body).code == ErrorCode.OVERLOADED


def test_octet_stream_json_body_is_parsed() -> None:
    case = next(c for c in CASES if c["id"] == "deepseek_400_context_window")
    assert case["headers"]["content-type"] == "application/octet-stream"
    failure = classify_http_error("deepseek", 400, case["headers"], case["body"].encode())
    assert failure.code == ErrorCode.CONTEXT_WINDOW_EXCEEDED
    assert "maximum context length is 1048565 tokens" in failure.message


def test_413_with_overflow_text() -> None:
    body = json.dumps(
        {
            "type": "error",
            "error": {
                "type": "request_too_large",
                "message": "Request exceeds the maximum allowed number of bytes",
            },
        }
    ).encode()
    assert classify_http_error("anthropic", 413, {}, body).code == ErrorCode.INVALID_REQUEST
    body = b'{"error":{"message":"prompt is too long: 300000 tokens > 200000 maximum"}}'
    assert classify_http_error("openai", 413, {}, body).code == ErrorCode.CONTEXT_WINDOW_EXCEEDED


def test_anthropic_error_type_drives() -> None:
    def body(kind: str) -> bytes:
        return json.dumps({"type": "error", "error": {"type": kind, "message": "m"}}).encode()

    assert classify_http_error("anthropic", 500, {}, body("overloaded_error")).code == "OVERLOADED"
    assert classify_http_error("anthropic", 400, {}, body("permission_error")).code == "AUTH"
    assert classify_http_error("anthropic", 402, {}, body("billing_error")).code == (
        "INSUFFICIENT_BALANCE"
    )
    assert classify_http_error("anthropic", 504, {}, body("timeout_error")).code == "TIMEOUT"
    # An unknown type falls back to the status.
    assert classify_http_error("anthropic", 503, {}, body("new_error")).code == "OVERLOADED"


def test_vllm_style_flat_error_object() -> None:
    body = json.dumps(
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    ).encode()
    failure = classify_http_error("openai", 400, {}, body)
    assert failure.code == ErrorCode.CONTEXT_WINDOW_EXCEEDED


def test_request_id_from_body_when_no_header() -> None:
    body = b'{"type":"error","error":{"type":"api_error","message":"boom"},"request_id":"req_1"}'
    assert classify_http_error("anthropic", 500, {}, body).request_id == "req_1"
    assert (
        classify_http_error("anthropic", 500, {"Request-Id": "req_h"}, body).request_id == "req_h"
    )


def test_request_headers_never_echoed() -> None:
    # Only response headers reach the classifier, and none is quoted in the message.
    headers = {"x-request-id": "req_2", "set-cookie": "session=secret-cookie"}
    failure = classify_http_error("openai", 500, headers, b"")
    assert "secret-cookie" not in failure.message


# -- Retry-After ------------------------------------------------------------------


def http_date(at: float) -> str:
    return email.utils.formatdate(at, usegmt=True)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "17"}, 17_000),
        ({"Retry-After": "17"}, 17_000),
        ({"retry-after": "1.5"}, 1_500),
        ({"retry-after": "0.0004"}, 1),
        ({"retry-after": " 2 "}, 2_000),
        ({"retry-after": "0"}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "1e3"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "\u0661\u0662"}, None),  # Arabic-Indic digits are not HTTP digits
        ({"retry-after": ""}, None),
        ({"retry-after-ms": "120", "retry-after": "1"}, 120),
        ({"Retry-After-Ms": "250.2"}, 251),
        ({"retry-after-ms": "0", "retry-after": "2"}, 2_000),
        ({"retry-after-ms": "junk", "retry-after": "2"}, 2_000),
        ({"retry-after-ms": "-5"}, None),
        ({"retry-after": http_date(NOW + 30)}, 30_000),
        ({"retry-after": http_date(NOW - 30)}, None),
        ({"retry-after": http_date(NOW)}, None),
        ({"retry-after": "Wed, 99 Foo 2026 25:61:00 GMT"}, None),
        ({"retry-after": "Sun Nov  6 08:49:37 1994"}, None),  # asctime form, in the past
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: int | None) -> None:
    assert parse_retry_after(headers, NOW) == expected


def test_retry_after_on_failure_uses_now() -> None:
    headers = {"retry-after": http_date(NOW + 5)}
    failure = classify_http_error("anthropic", 429, headers, b"", now=NOW)
    assert failure.code == ErrorCode.RATE_LIMIT
    assert failure.provider_retry_after_ms == 5_000


# -- in-band stream errors ----------------------------------------------------------


def test_anthropic_inband_overloaded() -> None:
    payload = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    failure = classify_stream_error("anthropic", payload)
    assert failure.code == ErrorCode.OVERLOADED
    assert failure.status is None
    assert "Overloaded" in failure.message


def test_anthropic_inband_types() -> None:
    def payload(kind: str, message: str = "m") -> dict[str, Any]:
        return {"type": "error", "error": {"type": kind, "message": message}}

    assert classify_stream_error("anthropic", payload("api_error")).code == "SERVER_ERROR"
    assert classify_stream_error("anthropic", payload("rate_limit_error")).code == "RATE_LIMIT"
    overflow = payload(
        "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
    )
    assert classify_stream_error("anthropic", overflow).code == "CONTEXT_WINDOW_EXCEEDED"
    assert classify_stream_error("anthropic", payload("mystery")).code == "SERVER_ERROR"


def test_openai_inband_errors() -> None:
    def payload(message: str, kind: str | None, code: str | None) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    server = payload("The server had an error", "server_error", None)
    assert classify_stream_error("openai", server).code == ErrorCode.SERVER_ERROR
    overflow = payload(
        "This model's maximum context length is 128000 tokens.", "invalid_request_error", None
    )
    assert classify_stream_error("openai", overflow).code == ErrorCode.CONTEXT_WINDOW_EXCEEDED
    coded = payload("too long", "invalid_request_error", "context_length_exceeded")
    assert classify_stream_error("openai", coded).code == ErrorCode.CONTEXT_WINDOW_EXCEEDED
    quota = payload("You exceeded your current quota", "insufficient_quota", "insufficient_quota")
    assert classify_stream_error("openai", quota).code == ErrorCode.INSUFFICIENT_BALANCE
    limit = payload("Rate limit reached", "tokens", "rate_limit_exceeded")
    assert classify_stream_error("openai", limit).code == ErrorCode.RATE_LIMIT
    busy = payload("The engine is currently overloaded", None, None)
    assert classify_stream_error("deepseek", busy).code == ErrorCode.OVERLOADED
    assert classify_stream_error("openai", {"error": "boom"}).code == ErrorCode.SERVER_ERROR
    assert "boom" in classify_stream_error("openai", {"error": "boom"}).message
    with_status = {"error": {"message": "slow down", "code": 429}}
    assert classify_stream_error("openai", with_status).code == ErrorCode.RATE_LIMIT


# -- context-window detection -----------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 128000 tokens. "
        "However, your messages resulted in 204308 tokens.",
        "This model's maximum context length is 1048565 tokens. However, you requested "
        "1250025 tokens (1250025 in the messages, 0 in the completion).",
        "prompt is too long: 3333404 tokens > 200000 maximum",
        "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
        "decrease input length or `max_tokens` and try again",
        "Your input exceeds the context window of this model. "
        "Please adjust your input and try again.",
        "the request exceeds the available context size, try increasing it",
    ],
)
def test_overflow_messages(message: str) -> None:
    assert is_context_window_exceeded(message)


@pytest.mark.parametrize(
    "message",
    [
        "Invalid max_tokens value, the valid range of max_tokens is [1, 8192]",
        "Request too large for gpt-5-nano in organization org-x on tokens per min (TPM): "
        "Limit 2000000, Requested 2500013.",
        "max_tokens: Field required",
        "",
        None,
    ],
)
def test_not_overflow_messages(message: str | None) -> None:
    assert not is_context_window_exceeded(message)


def test_overflow_codes() -> None:
    assert is_context_window_exceeded(None, code="context_length_exceeded")
    assert is_context_window_exceeded("", error_type="exceed_context_size_error")
    assert not is_context_window_exceeded("bad", code="invalid_request_error")
