"""llmrt's error codes as each API answers them: status, headers, JSON, and the SDK's exception."""

from __future__ import annotations

import msgspec
import pytest
from _api_support import anthropic_client, json_response, openai_client
from _sdks import anthropic, openai

from llmrt import ErrorCode, LlmFailure
from llmrt.actors.gateway.api import ERROR_CLASSES, anthropic_error, error_class, openai_error

#: code -> (status, OpenAI type, OpenAI code, Anthropic type, Anthropic status)
TABLE = {
    ErrorCode.RATE_LIMIT: (429, "requests", "rate_limit_exceeded", "rate_limit_error", 429),
    ErrorCode.INSUFFICIENT_BALANCE: (
        402, "insufficient_quota", "insufficient_quota", "billing_error", 402
    ),
    ErrorCode.AUTH: (401, "invalid_request_error", "invalid_api_key", "authentication_error", 401),
    ErrorCode.CONTEXT_WINDOW_EXCEEDED: (
        400, "invalid_request_error", "context_length_exceeded", "invalid_request_error", 400
    ),
    ErrorCode.INVALID_REQUEST: (400, "invalid_request_error", None, "invalid_request_error", 400),
    ErrorCode.NO_ADAPTER: (404, "invalid_request_error", "model_not_found", "not_found_error", 404),
    ErrorCode.TIMEOUT: (504, "server_error", "timeout", "timeout_error", 504),
    ErrorCode.OVERLOADED: (503, "server_error", "overloaded", "overloaded_error", 529),
    ErrorCode.SERVER_ERROR: (502, "server_error", None, "api_error", 502),
    ErrorCode.NETWORK: (502, "server_error", None, "api_error", 502),
    ErrorCode.INTERNAL: (500, "server_error", None, "api_error", 500),
}  # fmt: skip


@pytest.mark.parametrize("code", sorted(TABLE))
def test_each_code_has_its_status_and_error_shape(code: str) -> None:
    status, openai_type, openai_code, anthropic_type, anthropic_status = TABLE[code]
    failure = LlmFailure(message="it went wrong", code=code)
    chat = openai_error(failure)
    assert chat.status == status
    assert msgspec.json.decode(chat.body) == {
        "error": {
            "message": "it went wrong",
            "type": openai_type,
            "param": None,
            "code": openai_code,
        }
    }
    messages = anthropic_error(failure)
    assert messages.status == anthropic_status
    assert msgspec.json.decode(messages.body) == {
        "type": "error",
        "error": {"type": anthropic_type, "message": "it went wrong"},
    }


def test_every_error_code_is_in_the_table() -> None:
    assert set(ERROR_CLASSES) == set(ErrorCode)
    assert error_class("SOME_PLUGIN_CODE").status == 500


def test_a_providers_delay_becomes_retry_after() -> None:
    failure = LlmFailure(
        message="slow down", code=ErrorCode.RATE_LIMIT, provider_retry_after_ms=1500
    )
    for answer in (openai_error(failure), anthropic_error(failure)):
        assert answer.status == 429
        assert dict(answer.headers) == {"retry-after": "2", "retry-after-ms": "1500"}
    assert openai_error(LlmFailure(message="x", code=ErrorCode.RATE_LIMIT)).headers == ()


#: code -> the name of the exception the SDK raises for it
OPENAI_EXCEPTIONS = {
    ErrorCode.RATE_LIMIT: "RateLimitError",
    ErrorCode.AUTH: "AuthenticationError",
    ErrorCode.INVALID_REQUEST: "BadRequestError",
    ErrorCode.CONTEXT_WINDOW_EXCEEDED: "BadRequestError",
    ErrorCode.NO_ADAPTER: "NotFoundError",
    ErrorCode.OVERLOADED: "InternalServerError",
    ErrorCode.TIMEOUT: "InternalServerError",
    ErrorCode.SERVER_ERROR: "InternalServerError",
    ErrorCode.INSUFFICIENT_BALANCE: "APIStatusError",
}
ANTHROPIC_EXCEPTIONS = {
    ErrorCode.RATE_LIMIT: "RateLimitError",
    ErrorCode.AUTH: "AuthenticationError",
    ErrorCode.INVALID_REQUEST: "BadRequestError",
    ErrorCode.NO_ADAPTER: "NotFoundError",
    ErrorCode.OVERLOADED: "OverloadedError",
    ErrorCode.TIMEOUT: "GatewayTimeoutError",
    ErrorCode.SERVER_ERROR: "InternalServerError",
    ErrorCode.INSUFFICIENT_BALANCE: "PaymentRequiredError",
}


@pytest.mark.parametrize("code", sorted(OPENAI_EXCEPTIONS))
def test_the_openai_sdk_raises_its_exception_for_each_code(code: str) -> None:
    answer = openai_error(
        LlmFailure(message="it went wrong", code=code, provider_retry_after_ms=10)
    )
    client = openai_client(
        lambda request: json_response(answer.body, answer.status, answer.headers)
    )
    with pytest.raises(getattr(openai, OPENAI_EXCEPTIONS[code])) as caught:
        client.chat.completions.create(
            model="demo/demo-1", messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.status_code == answer.status
    assert caught.value.code == error_class(code).openai_code
    assert "it went wrong" in caught.value.message


@pytest.mark.parametrize("code", sorted(ANTHROPIC_EXCEPTIONS))
def test_the_anthropic_sdk_raises_its_exception_for_each_code(code: str) -> None:
    answer = anthropic_error(LlmFailure(message="it went wrong", code=code))
    client = anthropic_client(lambda request: json_response(answer.body, answer.status))
    with pytest.raises(getattr(anthropic, ANTHROPIC_EXCEPTIONS[code])) as caught:
        client.messages.create(
            model="demo/demo-1", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.status_code == answer.status
    assert "it went wrong" in caught.value.message
