"""Errors: `LlmError`, `failure_of`, secret-free reprs and the attribution header."""

from __future__ import annotations

import importlib.metadata

import pytest
import trio

import llmrt
from llmrt import DecodeError, ErrorCode, LlmError, LlmFailure, failure_of


def test_llm_error_carries_one_failure() -> None:
    err = LlmError(
        ErrorCode.RATE_LIMIT,
        "too many requests",
        status=429,
        provider_retry_after_ms=2000,
        request_id="req_9",
    )
    assert err.failure == LlmFailure(
        message="too many requests",
        code="RATE_LIMIT",
        status=429,
        provider_retry_after_ms=2000,
        request_id="req_9",
    )
    assert err.code == "RATE_LIMIT"
    assert type(err.failure.code) is str
    assert str(err) == "RATE_LIMIT: too many requests"
    assert isinstance(err, Exception)


def test_llm_error_minimal() -> None:
    err = LlmError("AUTH", "bad key")
    assert err.failure == LlmFailure(message="bad key", code="AUTH")
    assert err.failure.status is None
    assert err.failure.provider_retry_after_ms is None
    assert err.failure.request_id is None
    assert str(err) == "AUTH: bad key"


@pytest.mark.parametrize("retry_after", [0, -5])
def test_non_positive_provider_retry_after_is_dropped(retry_after: int) -> None:
    err = LlmError(ErrorCode.OVERLOADED, "busy", provider_retry_after_ms=retry_after)
    assert err.failure.provider_retry_after_ms is None
    assert llmrt.encode(err.failure) == b'{"message":"busy","code":"OVERLOADED"}'


@pytest.mark.parametrize("retry_after", [0, -5, 1.5, True, "100"])
def test_a_failure_with_a_bad_retry_after_cannot_be_built(retry_after: object) -> None:
    with pytest.raises(ValueError, match="provider_retry_after_ms"):
        LlmFailure(message="busy", code="OVERLOADED", provider_retry_after_ms=retry_after)  # type: ignore[arg-type]
    with pytest.raises(DecodeError):
        llmrt.decode(
            b'{"message":"busy","code":"OVERLOADED","providerRetryAfterMs":-5}', LlmFailure
        )


def test_from_failure_keeps_the_failure() -> None:
    failure = LlmFailure(message="gone", code=ErrorCode.NETWORK, status=502, request_id="r")
    err = LlmError.from_failure(failure)
    assert isinstance(err, LlmError)
    assert err.failure is failure
    assert err.code == "NETWORK"
    assert str(err) == "NETWORK: gone"
    with pytest.raises(LlmError) as info:
        raise err
    assert info.value.failure == failure


def test_error_codes_are_stable_strings() -> None:
    expected = {
        "NO_ADAPTER",
        "DUPLICATE_ADAPTER",
        "REGISTRATION_DISPOSED",
        "INVALID_PROVIDER",
        "MISSING_CREDENTIAL",
        "INVALID_CREDENTIAL",
        "AUTH",
        "INSUFFICIENT_BALANCE",
        "RATE_LIMIT",
        "OVERLOADED",
        "SERVER_ERROR",
        "INVALID_REQUEST",
        "CONTEXT_WINDOW_EXCEEDED",
        "EMPTY_RESPONSE",
        "TIMEOUT",
        "ABORTED",
        "NETWORK",
        "PROTOCOL",
        "UNSUPPORTED_REASONING_EFFORT",
        "INVALID_PREPARED_CALL",
        "INVALID_MODEL_INFO",
    }
    values = {code.value for code in ErrorCode}
    assert expected <= values
    for code in ErrorCode:
        assert code.value == code.name
        assert code == code.value


# -- failure_of ----------------------------------------------------------------


def test_failure_of_keeps_an_llm_errors_failure() -> None:
    err = LlmError(ErrorCode.CONTEXT_WINDOW_EXCEEDED, "too long", status=400)
    assert failure_of(err) is err.failure


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (TimeoutError("read"), ErrorCode.TIMEOUT),
        (trio.TooSlowError(), ErrorCode.TIMEOUT),
        (OSError("unreachable"), ErrorCode.NETWORK),
        (ConnectionResetError("reset by peer"), ErrorCode.NETWORK),
        (trio.BrokenResourceError(), ErrorCode.NETWORK),
        (DecodeError("invalid value: Expected `int` - at `$.index`"), ErrorCode.PROTOCOL),
    ],
)
def test_failure_of_maps_foreign_exceptions(exc: BaseException, code: ErrorCode) -> None:
    failure = failure_of(exc)
    assert failure.code == code
    assert failure.message
    assert failure.status is None


def test_failure_of_decode_error_keeps_the_path() -> None:
    with pytest.raises(DecodeError) as info:
        llmrt.decode_chunk(b'{"type":"text-delta","index":"x","text":""}')
    failure = failure_of(info.value)
    assert failure.code == ErrorCode.PROTOCOL
    assert "$.index" in failure.message


@pytest.mark.parametrize(
    ("exc", "name"),
    [
        (KeyError("choices"), "KeyError"),
        (ZeroDivisionError(), "ZeroDivisionError"),
        (ValueError("nope"), "ValueError"),
        (RuntimeError(), "RuntimeError"),
    ],
)
def test_failure_of_anything_else_is_internal_naming_the_type(
    exc: BaseException, name: str
) -> None:
    failure = failure_of(exc)
    assert failure.code == ErrorCode.INTERNAL
    assert name in failure.message


def test_failure_of_result_is_a_wire_value() -> None:
    failure = failure_of(OSError("refused"))
    chunk = llmrt.Finish(reason=llmrt.FinishError(failure=failure))
    assert llmrt.decode_chunk(llmrt.encode(chunk)) == chunk


# -- secrets and identity ----------------------------------------------------------


def test_model_discovery_request_repr_hides_the_api_key() -> None:
    secret = "sk-live-0123456789abcdef"
    request = llmrt.adapter.ModelDiscoveryRequest(
        provider="vllm", base_url="http://127.0.0.1:8000", api_key=secret
    )
    for text in (repr(request), str(request), f"{request}", f"{request!r}", repr([request])):
        assert secret not in text
        assert "vllm" in text
    assert "api_key=None" in repr(llmrt.adapter.ModelDiscoveryRequest())
    # rich (pretty-printing loggers, tracebacks with locals) reads `__rich_repr__`.
    rich_fields = dict(request.__rich_repr__())
    assert secret not in repr(rich_fields)
    assert rich_fields["api_key"] == "***"
    assert rich_fields["provider"] == "vllm"
    # The key still travels on the wire: it is the point of the request.
    decoded = llmrt.decode(llmrt.encode(request), llmrt.adapter.ModelDiscoveryRequest)
    assert decoded.api_key == secret


def test_attribution_headers_come_from_package_metadata() -> None:
    version = importlib.metadata.version("llmrt")
    headers = llmrt.adapter.attribution_headers()
    assert set(headers) == {"User-Agent"}
    agent = headers["User-Agent"]
    assert agent.startswith(f"llmrt/{version} (+")
    assert agent.endswith(")")
    url = agent[len(f"llmrt/{version} (+") : -1]
    assert url.startswith("https://")
    assert llmrt.adapter.app_identity().version == version
    assert llmrt.__version__ == version


def test_attribution_headers_for_a_custom_identity() -> None:
    ident = llmrt.adapter.AppIdentity(product="host", version="2.0", url="https://example.org")
    assert llmrt.adapter.attribution_headers(ident) == {
        "User-Agent": "host/2.0 (+https://example.org)"
    }
    bare = llmrt.adapter.AppIdentity(product="host", version="2.0", url="")
    assert llmrt.adapter.attribution_headers(bare) == {"User-Agent": "host/2.0"}
