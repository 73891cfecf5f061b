"""The codec: exact bytes on the wire, and one error type with a field path for bad input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

import llmrt
from llmrt import (
    DecodeError,
    Finish,
    FinishError,
    GenerateOptions,
    LlmFailure,
    Message,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)


def test_text_delta_exact_bytes() -> None:
    assert (
        llmrt.encode(TextDelta(index=0, text="hi"))
        == b'{"type":"text-delta","index":0,"text":"hi"}'
    )


def test_error_finish_exact_bytes_omit_absent_optionals() -> None:
    chunk = Finish(reason=FinishError(failure=LlmFailure(message="boom", code="SERVER_ERROR")))
    assert llmrt.encode(chunk) == (
        b'{"type":"finish","reason":{"kind":"error",'
        b'"failure":{"message":"boom","code":"SERVER_ERROR"}}}'
    )


def test_error_finish_exact_bytes_with_every_optional() -> None:
    failure = LlmFailure(
        message="m", code="RATE_LIMIT", status=429, provider_retry_after_ms=250, request_id="r"
    )
    assert llmrt.encode(Finish(reason=FinishError(failure=failure))) == (
        b'{"type":"finish","reason":{"kind":"error","failure":{"message":"m",'
        b'"code":"RATE_LIMIT","status":429,"providerRetryAfterMs":250,"requestId":"r"}}}'
    )


def test_tool_call_delta_defaults_are_omitted() -> None:
    assert llmrt.encode(ToolCallDelta(index=2)) == b'{"type":"tool-call-delta","index":2}'
    decoded = llmrt.decode_chunk(b'{"type":"tool-call-delta","index":2}')
    assert decoded == ToolCallDelta(index=2, id=None, name=None, arguments_delta="")


def test_encode_into_reuses_a_buffer() -> None:
    buf = bytearray(b"xx")
    llmrt.encode_into(TextDelta(index=1, text="a"), buf, 2)
    assert bytes(buf) == b'xx{"type":"text-delta","index":1,"text":"a"}'


def test_unknown_fields_are_ignored_for_schema_evolution() -> None:
    chunk = llmrt.decode_chunk(b'{"type":"text-delta","index":0,"text":"a","future":[1,2]}')
    assert chunk == TextDelta(index=0, text="a")


def test_typed_decoders_pick_the_variant_by_tag() -> None:
    assert llmrt.decode_chunk(b'{"type":"usage","usage":{"inputTokens":1,"outputTokens":2}}') == (
        UsageChunk(usage=llmrt.TokenUsage(input_tokens=1, output_tokens=2))
    )
    request = llmrt.decode_request(
        b'{"provider":"p","model":"m","messages":[{"id":"a","role":"user",'
        b'"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}],"maxTokens":5}'
    )
    assert request == GenerateOptions(
        provider="p",
        model="m",
        messages=(llmrt.user_message("hi", id="a"),),
        max_tokens=5,
    )


# -- bad input: always DecodeError, with a path where one exists ----------------

CHUNK_CASES: list[tuple[bytes | str, str]] = [
    # wrong tags
    (b'{"type":"text_delta","index":0,"text":"x"}', "`$.type`"),
    (b'{"type":"finish","reason":{"kind":"done"}}', "`$.reason.kind`"),
    (b'{"type":"block-end","index":0,"block":{"type":"video"}}', "`$.block.type`"),
    (b'{"index":0,"text":"x"}', "`type`"),
    # missing fields
    (b'{"type":"text-delta","text":"x"}', "`index`"),
    (
        b'{"type":"finish","reason":{"kind":"error","failure":{"message":"m"}}}',
        "`$.reason.failure`",
    ),
    (b'{"type":"finish","reason":{"kind":"error"}}', "`failure`"),
    # wrong types
    (b'{"type":"text-delta","index":"0","text":"x"}', "`$.index`"),
    (b'{"type":"text-delta","index":0,"text":5}', "`$.text`"),
    (
        b'{"type":"finish","reason":{"kind":"error","failure":{"message":"m","code":7}}}',
        "`$.reason.failure.code`",
    ),
    (b'{"type":"usage","usage":{"inputTokens":-1,"outputTokens":0}}', "`$.usage.inputTokens`"),
    (
        b'{"type":"finish","reason":{"kind":"stop"},"replayState":{"blocks":{}}}',
        "`$.replayState.blocks`",
    ),
    (
        b'{"type":"finish","reason":{"kind":"error","failure":'
        b'{"message":"m","code":"X","providerRetryAfterMs":0}}}',
        "`$.reason.failure.providerRetryAfterMs`",
    ),
    (b"[1,2]", "`$`"),
    (b"null", "`$`"),
    # not JSON at all, or not UTF-8, or cut short
    (b"\xff\xfe{}", "malformed"),
    (b'{"type":"text-delta","index":0,"text":"\xc3"}', "UTF-8"),
    ('{"type":"text-delta","index":0,"text":"\ud800"}', "Unicode"),
    (b'{"type":"text-delta","index":0,', "truncated"),
    (b"", "truncated"),
    (b"data: {}", "malformed"),
    (b'{"type":"text-delta","index":0,"text":"x"} trailing', "malformed"),
]


@pytest.mark.parametrize(
    ("data", "needle"), CHUNK_CASES, ids=[repr(d)[:40] for d, _ in CHUNK_CASES]
)
def test_bad_chunks_raise_decode_error_naming_the_problem(data: bytes | str, needle: str) -> None:
    decoders: list[Callable[[bytes | str], StreamChunk]] = [
        llmrt.decode_chunk,
        lambda d: llmrt.decode(d, StreamChunk),
    ]
    for decoder in decoders:
        with pytest.raises(DecodeError) as info:
            decoder(data)
        err = info.value
        assert type(err) is DecodeError
        assert isinstance(err, ValueError)
        assert not isinstance(err, msgspec.MsgspecError)
        assert needle in str(err)
        # `from None`: no msgspec exception leaks through as the visible cause.
        assert err.__cause__ is None
        assert err.__suppress_context__


def test_missing_field_message_names_the_field_and_its_parent() -> None:
    with pytest.raises(DecodeError) as info:
        llmrt.decode_chunk(b'{"type":"finish","reason":{"kind":"error","failure":{"message":"m"}}}')
    text = str(info.value)
    assert "`code`" in text
    assert "`$.reason.failure`" in text


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b'{"id":"a","role":"robot","content":[],"source":{"kind":"user"}}', "`$.role`"),
        (b'{"id":"a","role":"user","content":{},"source":{"kind":"user"}}', "`$.content`"),
        (
            b'{"id":"a","role":"user","content":[{"type":"text"}],"source":{"kind":"user"}}',
            "`$.content[0]`",
        ),
        (b'{"id":"a","role":"user","content":[],"source":{"kind":"bot"}}', "`$.source.kind`"),
        (b'{"id":"a","role":"user","content":[]}', "`source`"),
        (
            b'{"id":"a","role":"user","content":[{"type":"tool-result","toolCallId":"c",'
            b'"content":[{"type":"tool-call","id":"x","name":"n","arguments":{}}]}],'
            b'"source":{"kind":"tool"}}',
            "`$.content[0].content[0].arguments`",
        ),
        (b"{", "truncated"),
    ],
)
def test_bad_messages_raise_decode_error(data: bytes, needle: str) -> None:
    with pytest.raises(DecodeError) as info:
        llmrt.decode_message(data)
    assert needle in str(info.value)
    with pytest.raises(DecodeError):
        llmrt.decode(data, Message)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b'{"provider":"","model":"m","messages":[]}', "`$.provider`"),
        (b'{"provider":"p","model":"m","messages":[],"maxTokens":0}', "`$.maxTokens`"),
        (b'{"provider":"p","model":"m","messages":[],"temperature":-1}', "`$.temperature`"),
        (b'{"provider":"p","model":"m","messages":[],"purpose":"chat"}', "`$.purpose`"),
        (b'{"provider":"p","model":"m","messages":[],"tools":[{"name":"t"}]}', "`$.tools[0]`"),
        (b'{"provider":"p","model":"m","messages":[],"stop":"x"}', "`$.stop`"),
        (b'{"provider":"p","messages":[]}', "`model`"),
        (b"not json", "malformed"),
    ],
)
def test_bad_requests_raise_decode_error(data: bytes, needle: str) -> None:
    with pytest.raises(DecodeError) as info:
        llmrt.decode_request(data)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("data", "typ", "needle"),
    [
        (b'{"id":"","name":"x"}', llmrt.adapter.ReasoningEffortInfo, "`$.id`"),
        (b'{"contextWindow":0}', llmrt.adapter.ModelContext, "`$.contextWindow`"),
        (b'{"baseURL":5}', llmrt.adapter.ModelDiscoveryRequest, "`$.baseURL`"),
        (b'{"product":"llmrt"}', llmrt.adapter.AppIdentity, "`version`"),
        (b'{"mode":"sometimes"}', llmrt.ResolvedRetryPolicy, "`$.mode`"),
        (b'{"inputTokens":1.5,"outputTokens":0}', llmrt.TokenUsage, "`$.inputTokens`"),
    ],
)
def test_generic_decode_raises_decode_error(data: bytes, typ: Any, needle: str) -> None:
    with pytest.raises(DecodeError) as info:
        llmrt.decode(data, typ)
    assert needle in str(info.value)


def test_decode_error_is_the_documented_type() -> None:
    assert llmrt.DecodeError is DecodeError
    assert issubclass(DecodeError, ValueError)
    assert not issubclass(DecodeError, llmrt.LlmError)
