"""One validation: a request is refused or accepted alike in-process, prepared and through
the gateway (issue 22, item 5).

The request Structs' own constraints are the one source: decoding checks
them (the gateway), and `llmrt._validate` checks a constructed value against
a mirror generated from the same annotations (in-process, prepared). The
property test below proves the two verdicts and messages agree on the
top-level fields; the others prove where and when the check runs: before
middleware, lookup and any adapter call, as one ``error`` finish.
"""

from __future__ import annotations

import math
import typing
from collections.abc import AsyncIterator
from functools import partial
from typing import Annotated, Any

import msgspec
import pytest
import trio
from _cli_process import kill, spawn_cli
from conftest import collect, finish_reason, make_options
from hypothesis import given, settings
from hypothesis import strategies as st

import llmrt
from llmrt import (
    AlwaysRetryPolicy,
    AttemptChunk,
    DecodeError,
    ErrorCode,
    FinishError,
    GenerateOptions,
    LlmCallConfig,
    LlmError,
    Message,
    StreamChunk,
    ToolSchema,
)
from llmrt._validate import CHECKED_TYPES, UNWALKED, invalid_reason
from llmrt.actors.gateway import Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.scripted import ScriptedAdapter, text_script

BOUND = 30


def scripted() -> ScriptedAdapter:
    return ScriptedAdapter(text_script("ok"))


def refused(chunks: list[StreamChunk]) -> str:
    """The message of the one INVALID_REQUEST error finish the chunks end with."""
    reason = finish_reason(chunks)
    assert isinstance(reason, FinishError), chunks
    assert reason.failure.code == ErrorCode.INVALID_REQUEST, reason
    assert len(chunks) == 1, chunks  # nothing before it: no block, no usage
    return reason.failure.message


def decoder_verdict(options: GenerateOptions) -> str | None:
    """What the wire decoder says of the same request (None: it accepts it)."""
    try:
        llmrt.decode_request(llmrt.encode(options))
    except DecodeError as exc:
        return str(exc).replace("invalid value: ", "invalid request: ", 1)
    return None


# ---- the one source ----------------------------------------------------------------------

_finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
_field_values: dict[str, st.SearchStrategy[Any]] = {
    "provider": st.sampled_from(["", "p", "demo"]),
    "model": st.sampled_from(["", "m"]),
    "temperature": st.none() | _finite | st.integers(-3, 3) | st.booleans() | st.just("hot"),
    "max_tokens": st.none() | st.integers(-5, 5) | st.just(2.0) | st.just("10"),
    "stop": st.none() | st.lists(st.sampled_from(["x", "", 1]), max_size=3).map(tuple),
    "purpose": st.none() | st.sampled_from(["compaction", "session-title", "title", ""]),
    "reasoning_effort": st.none() | st.sampled_from(["high", 3]),
    "session_id": st.none() | st.sampled_from(["s", 7]),
    "system": st.none() | st.sampled_from(["be brief", 3]),
    "tools": st.none()
    | st.lists(
        st.builds(
            ToolSchema,
            name=st.sampled_from(["", "get_weather", 5]),
            description=st.sampled_from(["", "d", None]),
            parameters=st.just({"type": "object"}),
        ),
        max_size=2,
    ).map(tuple),
}


@settings(deadline=None)
@given(st.fixed_dictionaries({}, optional=_field_values))
def test_in_process_and_the_decoder_agree_on_every_top_level_field(fields: dict[str, Any]) -> None:
    fields.setdefault("provider", "p")
    fields.setdefault("model", "m")
    options = GenerateOptions(messages=(llmrt.user_message("hi"),), **fields)
    assert invalid_reason(options) == decoder_verdict(options)


def test_the_limits_themselves_are_accepted_and_one_past_them_refused() -> None:
    assert invalid_reason(make_options(temperature=0.0, max_tokens=1)) is None
    assert invalid_reason(make_options(temperature=-1.0)) == (
        "invalid request: Expected `float` >= 0.0 - at `$.temperature`"
    )
    assert invalid_reason(make_options(max_tokens=0)) == (
        "invalid request: Expected `int` >= 1 - at `$.maxTokens`"
    )
    # Not a number at all: NaN breaks `>= 0` (JSON would turn it into null on the way).
    assert invalid_reason(make_options(temperature=math.nan)) is not None


def test_every_constrained_field_of_the_checked_types_is_in_the_mirror() -> None:
    """A field added to GenerateOptions later is checked without touching the validator."""
    for struct in CHECKED_TYPES:
        hints = typing.get_type_hints(struct, include_extras=True)
        for name in struct.__struct_fields__:  # type: ignore[attr-defined]
            if name in UNWALKED:
                continue
            bad = _breaking_value(hints[name])
            if bad is None:
                continue
            value = _valid(struct)
            broken = msgspec.structs.replace(value, **{name: bad})
            assert invalid_reason(broken) is not None, (struct.__name__, name, bad)


def _valid(struct: type) -> Any:
    if struct is LlmCallConfig:
        return LlmCallConfig(provider="p", model="m")
    return make_options()


def _breaking_value(tp: Any) -> Any:
    """A value that breaks the Meta constraint inside ``tp``, or None when it has none."""
    for arg in (tp, *typing.get_args(tp)):
        if typing.get_origin(arg) is Annotated:
            for meta in typing.get_args(arg)[1:]:
                if isinstance(meta, msgspec.Meta):
                    if meta.ge is not None:
                        return meta.ge - 1
                    if meta.gt is not None:
                        return meta.gt
                    if meta.min_length is not None:
                        return ""
    return None


def _constrained_structs(tp: Any, seen: set[type], found: set[type]) -> None:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        _constrained_structs(typing.get_args(tp)[0], seen, found)
        return
    if origin is not None:
        for arg in typing.get_args(tp):
            _constrained_structs(arg, seen, found)
        return
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct) and tp not in seen:
        seen.add(tp)
        hints = typing.get_type_hints(tp, include_extras=True)
        for name in tp.__struct_fields__:
            hint = hints[name]
            for arg in (hint, *typing.get_args(hint)):
                if typing.get_origin(arg) is Annotated and any(
                    isinstance(m, msgspec.Meta) for m in typing.get_args(arg)[1:]
                ):
                    found.add(tp)
            _constrained_structs(hint, seen, found)


def test_the_messages_left_unwalked_hold_one_constrained_struct_which_checks_itself() -> None:
    """The check skips the conversation; this keeps that sound.

    The message tree's only Struct with Meta constraints is the image
    attachment reference, and its constructor enforces them. A new one
    fails here until its constructor does the same (or the check walks it).
    """
    found: set[type] = set()
    _constrained_structs(Message, set(), found)
    assert found == {llmrt.images.ImageAttachmentRef}
    good = {"attachment_id": "sha256:" + "a" * 64, "media_type": "image/png", "byte_size": 1}
    for field, bad in [
        ("attachment_id", "../etc/passwd"),
        ("attachment_id", "x" * 201),
        ("byte_size", -1),
        ("width", 0),
        ("height", 0),
    ]:
        with pytest.raises(ValueError):
            llmrt.images.ImageAttachmentRef(**{**good, field: bad})
        with pytest.raises(DecodeError):
            wire = msgspec.json.encode({**_camel(good), _camel_name(field): bad})
            llmrt.decode(wire, llmrt.images.ImageAttachmentRef)


def _camel_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _camel(fields: dict[str, Any]) -> dict[str, Any]:
    return {_camel_name(k): v for k, v in fields.items()}


# ---- in-process: one error finish before anything runs ----------------------------------


async def test_an_invalid_request_ends_in_one_error_finish_before_middleware_or_the_adapter(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = scripted()
    await runtime.register_adapter(["p"], adapter)
    seen: list[GenerateOptions] = []

    async def spy(request: GenerateOptions, nxt: llmrt.actors.Next) -> AsyncIterator[StreamChunk]:
        seen.append(request)
        async for chunk in nxt(request):
            yield chunk

    runtime.use(spy)
    for bad in (make_options(temperature=-1.0), make_options(max_tokens=0)):
        message = refused(await collect(runtime.stream(bad)))
        assert message == invalid_reason(bad)
    assert adapter.requests == [] and seen == []
    # The limits themselves go through.
    chunks = await collect(runtime.stream(make_options(temperature=0.0, max_tokens=1)))
    assert type(finish_reason(chunks)) is llmrt.FinishStop
    assert len(adapter.requests) == 1 and len(seen) == 1
    stats = runtime.statistics()
    assert stats.failures_by_code["INVALID_REQUEST"] == 2


async def test_a_middleware_that_breaks_the_request_is_refused_before_the_adapter(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = scripted()
    await runtime.register_adapter(["p"], adapter)

    async def breaker(
        request: GenerateOptions, nxt: llmrt.actors.Next
    ) -> AsyncIterator[StreamChunk]:
        async for chunk in nxt(msgspec.structs.replace(request, max_tokens=-2)):
            yield chunk

    runtime.use(breaker)
    message = refused(await collect(runtime.stream(make_options())))
    assert message.endswith("- at `$.maxTokens`")
    assert adapter.requests == []


async def test_retry_never_retries_an_invalid_request_even_under_an_always_policy(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = scripted()
    await runtime.register_adapter(["p"], adapter)
    with trio.fail_after(BOUND):
        async with runtime.stream_with_retry(
            make_options(temperature=-0.5), policy=AlwaysRetryPolicy()
        ) as call:
            events = [event async for event in call]
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, AttemptChunk) and event.attempt == 1
    assert isinstance(event.chunk, llmrt.Finish)
    reason = event.chunk.reason
    assert isinstance(reason, FinishError) and reason.failure.code == ErrorCode.INVALID_REQUEST
    assert adapter.requests == []


async def test_prepare_call_and_resolve_call_config_refuse_before_asking_the_adapter(
    runtime: llmrt.LlmRuntime,
) -> None:
    asked: list[str] = []

    def info(provider: str, model: str) -> llmrt.ResolvedModelInfo:
        asked.append(model)
        return llmrt.ResolvedModelInfo(provider=provider, id=model, name=model)

    adapter = ScriptedAdapter(text_script("ok"), model_info=info)
    await runtime.register_adapter(["p"], adapter)
    for bad in (
        LlmCallConfig(provider="p", model="m", temperature=-1.0),
        LlmCallConfig(provider="p", model="m", max_tokens=0),
        # Invalid before unknown: the same order as the gateway's decode, then lookup.
        LlmCallConfig(provider="nowhere", model="m", max_tokens=0),
    ):
        for resolve in (runtime.prepare_call, runtime.resolve_call_config):
            with pytest.raises(LlmError) as info_:
                await resolve(bad)
            assert info_.value.code == ErrorCode.INVALID_REQUEST
            assert info_.value.failure.message == invalid_reason(bad)
            assert info_.value.failure.message.startswith("invalid call config: ")
    assert asked == []
    prepared = await runtime.prepare_call(LlmCallConfig(provider="p", model="m", max_tokens=1))
    chunks = await collect(prepared.stream(make_options(max_tokens=1)))
    assert type(finish_reason(chunks)) is llmrt.FinishStop
    assert asked == ["m"]


async def test_a_prepared_call_refuses_an_invalid_non_config_field_as_a_finish(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = scripted()
    await runtime.register_adapter(["p"], adapter)
    prepared = await runtime.prepare_call(LlmCallConfig(provider="p", model="m"))
    bad = make_options(tools=(ToolSchema(name="", description="", parameters={}),))
    assert refused(await collect(prepared.stream(bad))).endswith("- at `$.tools[0].name`")
    assert adapter.requests == []


# ---- through the gateway: the same refusal -----------------------------------------------


async def test_the_gateway_refuses_the_same_requests_with_the_same_code_and_message(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = scripted()
    await runtime.register_adapter(["p"], adapter)
    cases = [
        make_options(temperature=-1.0),
        make_options(max_tokens=0),
        make_options(purpose="title"),  # type: ignore[arg-type]
        make_options(tools=(ToolSchema(name="", description="", parameters={}),)),
        make_options(temperature=0.0, max_tokens=1),  # accepted both ways
    ]
    limits = Limits(shutdown_grace=0.2, close_timeout=2.0)
    with trio.fail_after(BOUND):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(partial(serve_gateway, runtime, limits=limits))
            async with open_gateway_client(server.url) as client:
                for options in cases:
                    async with client.stream(options) as remote:
                        via = [chunk async for chunk in remote]
                    local = await collect(runtime.stream(options))
                    if invalid_reason(options) is None:
                        assert type(finish_reason(via)) is type(finish_reason(local))
                        continue
                    remote_message = refused(via)
                    # The gateway points into its frame: `$.request.x` for `$.x`.
                    assert remote_message.replace("`$.request", "`$") == refused(local)
            nursery.cancel_scope.cancel()
    assert len(adapter.requests) == 2  # only the valid request, once each way


# ---- the CLI, as a real process ----------------------------------------------------------


def _error_line(out: str, err: str) -> str:
    lines = [line for line in (out + err).splitlines() if "INVALID_REQUEST" in line]
    assert len(lines) == 1, (out, err)
    return lines[0]


@pytest.mark.parametrize(
    ("flag", "value", "path"),
    [("--temperature", "-1", "$.temperature"), ("--max-tokens", "0", "$.maxTokens")],
)
async def test_llmrt_call_refuses_alike_in_process_and_via_the_gateway(
    runtime: llmrt.LlmRuntime, flag: str, value: str, path: str
) -> None:
    from llmrt.adapters.demo import DemoAdapter

    await runtime.register_adapter(["demo"], DemoAdapter())
    limits = Limits(shutdown_grace=0.2, close_timeout=2.0)
    with trio.fail_after(BOUND):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(partial(serve_gateway, runtime, limits=limits))
            outcomes = []
            for via in ((), ("--via", server.url)):
                cli = await spawn_cli("call", "hi", flag, value, *via)
                try:
                    code, out, err = await cli.finish()
                finally:
                    await kill(cli)
                assert code != 0, (out, err)
                assert "finish: stop" not in out + err and "max-tokens" not in out + err
                outcomes.append(_error_line(out, err))
            nursery.cancel_scope.cancel()
    local, remote = outcomes
    assert f"- at `{path}`" in local
    assert remote.replace("`$.request", "`$") == local
