"""Model metadata, call-config resolution, prepared calls and replay gating.

DESIGN.md §2 items 7 and 9.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import msgspec
import pytest
import trio
from conftest import collect, finish_reason, make_options

import llmrt
from llmrt import (
    CallConfigDefaults,
    ErrorCode,
    FinishError,
    FinishStop,
    GenerateOptions,
    LlmCallConfig,
    LlmError,
    Message,
    ModelInfo,
    ModelSource,
    NormalRetryPolicy,
    ReplayEnvelope,
    ResolvedModelInfo,
    StreamChunk,
    TextBlock,
    default_retry_policy,
    user_message,
)
from llmrt.adapter import ModelContext, ModelReasoningInfo, ReasoningEffortInfo
from llmrt.adapters.scripted import ScriptedAdapter, text_script

EFFORTS = (
    ReasoningEffortInfo(id="low", name="Low"),
    ReasoningEffortInfo(id="high", name="High"),
)
RICH = ResolvedModelInfo(
    provider="p",
    id="m",
    name="Model M",
    context=ModelContext(context_window=64_000),
    default_max_tokens=512,
    reasoning=ModelReasoningInfo(efforts=EFFORTS, default_effort="low"),
)


@attrs.define(eq=False)
class CatalogAdapter(ScriptedAdapter):
    """Answers `list_models` with ``catalog`` as is, and counts `resolve_model` calls."""

    catalog: Any = ()
    resolved: int = attrs.field(default=0, init=False)

    async def list_models(self, provider: str) -> Sequence[ModelInfo]:
        return self.catalog  # type: ignore[no-any-return]

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        self.resolved += 1
        return await super().resolve_model(provider, model)


@attrs.define(eq=False)
class RaisingResolveAdapter(ScriptedAdapter):
    exc: Exception = attrs.field(factory=lambda: RuntimeError("lookup failed"))

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        raise self.exc


@attrs.define(eq=False)
class SlowResolveAdapter(ScriptedAdapter):
    cancelled: bool = attrs.field(default=False, init=False)

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")


def rich_adapter(**kw: Any) -> CatalogAdapter:
    return CatalogAdapter(text_script(["ok"]), model_info={"m": RICH}, **kw)


async def llm_code(awaitable: Any) -> str:
    with pytest.raises(LlmError) as info:
        await awaitable
    return info.value.code


def error_code(chunks: list[StreamChunk]) -> str:
    reason = finish_reason(chunks)
    assert isinstance(reason, FinishError), reason
    return reason.failure.code


def options_for(config: LlmCallConfig, **kw: Any) -> GenerateOptions:
    """A request carrying exactly the call-config fields of ``config``."""
    return make_options(
        config.provider,
        config.model,
        reasoning_effort=config.reasoning_effort,
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        stop=config.stop,
        **kw,
    )


# ---- list_models -----------------------------------------------------------------------


async def test_list_models_is_validated_and_detached(runtime: llmrt.LlmRuntime) -> None:
    catalog = [
        ModelInfo(provider="p", id="m1", name="M1", input_modalities=("text",)),
        ModelInfo(provider="p", id="m2", name="M2"),
    ]
    adapter = rich_adapter(catalog=catalog)
    await runtime.register_adapter(["p"], adapter)
    models = await runtime.list_models("p")
    assert models == tuple(catalog)
    assert isinstance(models, tuple)
    assert all(a is not b for a, b in zip(models, catalog, strict=True))
    catalog.append(ModelInfo(provider="p", id="m3", name="M3"))
    assert [m.id for m in models] == ["m1", "m2"]
    # A generator is read once, entirely.
    adapter.catalog = (m for m in catalog)
    assert [m.id for m in await runtime.list_models("p")] == ["m1", "m2", "m3"]


async def test_list_models_of_an_adapter_without_a_catalog_is_empty(
    runtime: llmrt.LlmRuntime,
) -> None:
    await runtime.register_adapter(["p"], ScriptedAdapter(text_script(["x"])))
    assert await runtime.list_models("p") == ()
    assert await llm_code(runtime.list_models("nope")) == ErrorCode.NO_ADAPTER


@pytest.mark.parametrize(
    "catalog",
    [
        [ModelInfo(provider="p", id="m1", name="M1"), ModelInfo(provider="q", id="m2", name="M2")],
        [ModelInfo(provider="p", id="m1", name="M1"), {"provider": "p", "id": "m2", "name": "M"}],
        ["m1"],
        "m1",
        None,
        [ModelInfo(provider="p", id="m1", name="M1", input_modalities=("smell",))],  # type: ignore[arg-type]
    ],
    ids=["wrong-provider", "dict", "str-item", "str", "none", "bad-modality"],
)
async def test_malformed_catalogs_are_refused(runtime: llmrt.LlmRuntime, catalog: Any) -> None:
    await runtime.register_adapter(["p"], rich_adapter(catalog=catalog))
    assert await llm_code(runtime.list_models("p")) == ErrorCode.INVALID_MODEL_INFO


# ---- resolve_model_info ----------------------------------------------------------------


async def test_resolve_model_info_is_validated_and_detached(runtime: llmrt.LlmRuntime) -> None:
    await runtime.register_adapter(["p"], rich_adapter())
    info = await runtime.resolve_model_info("p", "m")
    assert info == RICH
    assert info is not RICH
    assert info.reasoning is not RICH.reasoning
    # An unknown model gets identity only: absent metadata, not an error.
    assert await runtime.resolve_model_info("p", "other") == ResolvedModelInfo(
        provider="p", id="other", name="other"
    )
    assert await llm_code(runtime.resolve_model_info("q", "m")) == ErrorCode.NO_ADAPTER


def _effort(*ids: str, default: str | None = None) -> ModelReasoningInfo:
    return ModelReasoningInfo(
        efforts=tuple(ReasoningEffortInfo(id=i, name=i) for i in ids), default_effort=default
    )


@pytest.mark.parametrize(
    "answer",
    [
        msgspec.structs.replace(RICH, id="not-m"),
        msgspec.structs.replace(RICH, provider="q"),
        msgspec.structs.replace(RICH, context=ModelContext(context_window=0)),
        msgspec.structs.replace(RICH, context=ModelContext(context_window=-10)),
        msgspec.structs.replace(RICH, default_max_tokens=0),
        msgspec.structs.replace(RICH, reasoning=_effort("low", "low")),
        msgspec.structs.replace(RICH, reasoning=_effort("low", "high", default="max")),
        msgspec.structs.replace(RICH, reasoning=_effort("")),
        ModelInfo(provider="p", id="m", name="m"),
        {"provider": "p", "id": "m", "name": "m"},
    ],
    ids=[
        "wrong-id",
        "wrong-provider",
        "zero-window",
        "negative-window",
        "zero-max-tokens",
        "duplicate-effort",
        "default-not-listed",
        "empty-effort-id",
        "model-info",
        "dict",
    ],
)
async def test_malformed_model_info_is_refused(runtime: llmrt.LlmRuntime, answer: Any) -> None:
    adapter = ScriptedAdapter(text_script(["x"]), model_info=lambda provider, model: answer)
    await runtime.register_adapter(["p"], adapter)
    assert await llm_code(runtime.resolve_model_info("p", "m")) == ErrorCode.INVALID_MODEL_INFO
    config = LlmCallConfig(provider="p", model="m")
    assert await llm_code(runtime.resolve_call_config(config)) == ErrorCode.INVALID_MODEL_INFO
    assert await llm_code(runtime.prepare_call(config)) == ErrorCode.INVALID_MODEL_INFO
    # A direct call refuses it before the adapter streams.
    assert error_code(await collect(runtime.stream(make_options()))) == ErrorCode.INVALID_MODEL_INFO
    assert adapter.requests == []


@pytest.mark.parametrize(
    "exc", [RuntimeError("lookup failed"), LlmError(ErrorCode.AUTH, "bad key")], ids=type
)
async def test_an_adapter_exception_from_resolve_model_propagates(
    runtime: llmrt.LlmRuntime, exc: Exception
) -> None:
    await runtime.register_adapter(["p"], RaisingResolveAdapter(text_script(["x"]), exc=exc))
    with pytest.raises(type(exc)) as info:
        await runtime.resolve_model_info("p", "m")
    assert info.value is exc


async def test_resolve_model_info_is_cancellable(
    runtime: llmrt.LlmRuntime, autojump_clock: trio.testing.MockClock
) -> None:
    adapter = SlowResolveAdapter(text_script(["x"]))
    await runtime.register_adapter(["p"], adapter)
    start = trio.current_time()
    with trio.move_on_after(3.0) as scope:
        await runtime.resolve_model_info("p", "m")
    assert scope.cancelled_caught
    assert adapter.cancelled
    assert trio.current_time() == start + 3.0


# ---- resolve_call_config ---------------------------------------------------------------


async def test_resolve_call_config_materializes_only_absent_fields(
    runtime: llmrt.LlmRuntime,
) -> None:
    await runtime.register_adapter(["p"], rich_adapter())
    bare = LlmCallConfig(provider="p", model="m", temperature=0.5)
    assert await runtime.resolve_call_config(bare) == LlmCallConfig(
        provider="p", model="m", temperature=0.5, max_tokens=512, reasoning_effort="low"
    )
    explicit = LlmCallConfig(provider="p", model="m", max_tokens=100, reasoning_effort="high")
    assert await runtime.resolve_call_config(explicit) == explicit


async def test_an_unsupported_explicit_effort_is_refused_not_clamped(
    runtime: llmrt.LlmRuntime,
) -> None:
    await runtime.register_adapter(["p"], rich_adapter())
    for effort in ("medium", "LOW", "max"):
        config = LlmCallConfig(provider="p", model="m", reasoning_effort=effort)
        code = await llm_code(runtime.resolve_call_config(config))
        assert code == ErrorCode.UNSUPPORTED_REASONING_EFFORT
        assert await llm_code(runtime.prepare_call(config)) == code
    # A model that lists no efforts supports none.
    config = LlmCallConfig(provider="p", model="plain", reasoning_effort="low")
    code = await llm_code(runtime.resolve_call_config(config))
    assert code == ErrorCode.UNSUPPORTED_REASONING_EFFORT


async def test_resolve_call_config_without_defaults_changes_nothing(
    runtime: llmrt.LlmRuntime,
) -> None:
    no_default = msgspec.structs.replace(
        RICH, default_max_tokens=None, reasoning=_effort("low", "high")
    )
    await runtime.register_adapter(
        ["p"], ScriptedAdapter(text_script(["x"]), model_info={"m": no_default})
    )
    config = LlmCallConfig(provider="p", model="m")
    assert await runtime.resolve_call_config(config) == config
    assert await llm_code(runtime.resolve_call_config(LlmCallConfig(provider="q", model="m"))) == (
        ErrorCode.NO_ADAPTER
    )


# ---- prepare_call ----------------------------------------------------------------------


async def test_prepare_call_reports_defaults_context_and_policy(
    runtime: llmrt.LlmRuntime,
) -> None:
    policy = NormalRetryPolicy(max_retries=7)
    await runtime.register_adapter(["p"], rich_adapter(retry_policy=policy))
    prepared = await runtime.prepare_call(LlmCallConfig(provider="p", model="m"))
    assert prepared.config == LlmCallConfig(
        provider="p", model="m", max_tokens=512, reasoning_effort="low"
    )
    assert prepared.adapter_defaults == CallConfigDefaults(reasoning_effort=True, max_tokens=True)
    assert prepared.context == ModelContext(context_window=64_000)
    assert prepared.retry_policy == policy

    explicit = LlmCallConfig(provider="p", model="m", max_tokens=9, reasoning_effort="high")
    prepared = await runtime.prepare_call(explicit)
    assert prepared.config == explicit
    assert prepared.adapter_defaults == CallConfigDefaults()

    half = LlmCallConfig(provider="p", model="m", reasoning_effort="high")
    prepared = await runtime.prepare_call(half)
    assert prepared.adapter_defaults == CallConfigDefaults(max_tokens=True)

    plain = await runtime.prepare_call(LlmCallConfig(provider="p", model="plain"))
    assert plain.context is None
    assert plain.adapter_defaults == CallConfigDefaults()
    assert await llm_code(runtime.prepare_call(LlmCallConfig(provider="q", model="m"))) == (
        ErrorCode.NO_ADAPTER
    )


async def test_a_prepared_call_streams_once(runtime: llmrt.LlmRuntime) -> None:
    adapter = rich_adapter()
    await runtime.register_adapter(["p"], adapter)
    prepared = await runtime.prepare_call(LlmCallConfig(provider="p", model="m"))
    assert prepared.retry_policy == default_retry_policy()
    assert adapter.resolved == 1
    options = options_for(prepared.config)
    chunks = await collect(prepared.stream(options))
    assert isinstance(finish_reason(chunks), FinishStop)
    assert adapter.requests == [options]
    # Dispatch used the preparation's lookup: no second resolve_model.
    assert adapter.resolved == 1
    with pytest.raises(LlmError) as info:
        prepared.stream(options)
    assert info.value.code == ErrorCode.INVALID_PREPARED_CALL
    assert len(adapter.requests) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.3},
        {"max_tokens": None},
        {"max_tokens": 513},
        {"reasoning_effort": "high"},
        {"model": "other"},
        {"stop": ("END",)},
    ],
    ids=lambda change: next(iter(change)),
)
async def test_a_request_that_differs_from_the_prepared_config_is_refused(
    runtime: llmrt.LlmRuntime, change: dict[str, Any]
) -> None:
    adapter = rich_adapter()
    await runtime.register_adapter(["p"], adapter)
    prepared = await runtime.prepare_call(LlmCallConfig(provider="p", model="m"))
    options = msgspec.structs.replace(options_for(prepared.config), **change)
    with pytest.raises(LlmError) as info:
        prepared.stream(options)
    assert info.value.code == ErrorCode.INVALID_PREPARED_CALL
    assert adapter.requests == []


async def test_a_prepared_call_whose_route_moved_ends_with_no_adapter(
    runtime: llmrt.LlmRuntime,
) -> None:
    first = rich_adapter()
    second = rich_adapter()
    first_handle = await runtime.register_adapter(["p"], first)
    prepared = await runtime.prepare_call(LlmCallConfig(provider="p", model="m"))
    await first_handle.replace(["x"])
    await runtime.register_adapter(["p"], second)
    chunks = await collect(prepared.stream(options_for(prepared.config)))
    assert error_code(chunks) == ErrorCode.NO_ADAPTER
    assert first.requests == []
    assert second.requests == []
    assert (first.resolved, second.resolved) == (1, 0)


async def test_a_prepared_call_survives_a_replace_that_keeps_its_route(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = rich_adapter()
    handle = await runtime.register_adapter(["p"], adapter)
    prepared = await runtime.prepare_call(LlmCallConfig(provider="p", model="m"))
    await handle.replace(["x", "p"])
    chunks = await collect(prepared.stream(options_for(prepared.config)))
    assert isinstance(finish_reason(chunks), FinishStop)
    assert len(adapter.requests) == 1


# ---- direct dispatch resolves the config too -------------------------------------------


async def test_direct_stream_refuses_an_unsupported_effort_before_the_adapter(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = rich_adapter()
    await runtime.register_adapter(["p"], adapter)
    chunks = await collect(runtime.stream(make_options(reasoning_effort="extreme")))
    assert error_code(chunks) == ErrorCode.UNSUPPORTED_REASONING_EFFORT
    assert adapter.requests == []
    assert adapter.open_streams == 0 and adapter.closed_at == []


async def test_direct_stream_materializes_adapter_defaults(runtime: llmrt.LlmRuntime) -> None:
    adapter = rich_adapter()
    await runtime.register_adapter(["p"], adapter)
    options = make_options()
    assert isinstance(finish_reason(await collect(runtime.stream(options))), FinishStop)
    sent = adapter.requests[0]
    assert sent.max_tokens == 512
    assert sent.reasoning_effort == "low"
    assert msgspec.structs.replace(sent, max_tokens=None, reasoning_effort=None) == options

    explicit = make_options(max_tokens=50, reasoning_effort="high")
    await collect(runtime.stream(explicit))
    assert adapter.requests[1] == explicit


# ---- replay gating (item 9) ------------------------------------------------------------


def from_model(provider: str, *, replay: bool = True) -> Message:
    return Message(
        id=f"msg_{provider}",
        role="assistant",
        content=(TextBlock(text=f"earlier answer from {provider}"),),
        source=ModelSource(
            provider=provider,
            model="m",
            replay_state=ReplayEnvelope(response={"signature": "sig-1"}, blocks=("b0",))
            if replay
            else None,
        ),
    )


def conversation(*history: Message) -> tuple[Message, ...]:
    return (user_message("first", id="u1"), *history, user_message("again", id="u2"))


def stripped(message: Message) -> Message:
    assert isinstance(message.source, ModelSource)
    return msgspec.structs.replace(
        message, source=msgspec.structs.replace(message.source, replay_state=None)
    )


async def test_replay_state_is_kept_when_one_adapter_owns_both_providers(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = ScriptedAdapter(text_script(["x"]))
    await runtime.register_adapter(["a", "b"], adapter)
    messages = conversation(from_model("a"), from_model("b"))
    options = make_options("b", messages=messages)
    assert isinstance(finish_reason(await collect(runtime.stream(options))), FinishStop)
    assert adapter.requests[0].messages == messages


async def test_replay_state_is_stripped_for_another_adapters_provider(
    runtime: llmrt.LlmRuntime,
) -> None:
    owner_of_a = ScriptedAdapter(text_script(["x"]))
    owner_of_b = ScriptedAdapter(text_script(["y"]))
    await runtime.register_adapter(["a"], owner_of_a)
    await runtime.register_adapter(["b"], owner_of_b)
    own, foreign, plain = from_model("b"), from_model("a"), from_model("a", replay=False)
    messages = conversation(foreign, own, plain)
    options = make_options("b", messages=messages)
    assert isinstance(finish_reason(await collect(runtime.stream(options))), FinishStop)
    sent = owner_of_b.requests[0]
    assert sent.messages == conversation(stripped(foreign), own, plain)
    assert msgspec.structs.replace(sent, messages=messages) == options
    assert owner_of_a.requests == []


async def test_replay_state_is_stripped_for_an_unregistered_provider(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = ScriptedAdapter(text_script(["x"]))
    await runtime.register_adapter(["b"], adapter)
    ghost = from_model("gone")
    options = make_options("b", messages=conversation(ghost))
    await collect(runtime.stream(options))
    assert adapter.requests[0].messages == conversation(stripped(ghost))


async def test_replay_gating_follows_the_current_owner(runtime: llmrt.LlmRuntime) -> None:
    adapter = ScriptedAdapter(text_script(["x"]))
    handle = await runtime.register_adapter(["a", "b"], adapter)
    message = from_model("a")
    await handle.replace(["b"])  # "a" is no longer this adapter's
    await collect(runtime.stream(make_options("b", messages=conversation(message))))
    assert adapter.requests[0].messages == conversation(stripped(message))
    await handle.replace(["b", "a"])
    await collect(runtime.stream(make_options("b", messages=conversation(message))))
    assert adapter.requests[1].messages == conversation(message)


# ---- the registration's memo of validated answers -----------------------------------------


async def test_an_answer_validated_before_is_served_from_the_memo() -> None:
    from llmrt.actors._prepare import validated_model_info

    adapter = ScriptedAdapter(
        text_script(["x"]), model_info=lambda provider, model: msgspec.structs.replace(RICH)
    )
    memo: dict[ResolvedModelInfo, ResolvedModelInfo] = {}
    first = await validated_model_info(adapter, "p", "m", memo)
    assert first == RICH and list(memo.values()) == [first]
    # An equal answer (a new object) gets the detached copy made the first time.
    assert await validated_model_info(adapter, "p", "m", memo) is first
    # Without the memo, every answer is a fresh copy.
    assert await validated_model_info(adapter, "p", "m") is not first


async def test_the_memo_still_checks_the_names_asked_for() -> None:
    from llmrt.actors._prepare import validated_model_info

    adapter = ScriptedAdapter(text_script(["x"]), model_info=lambda provider, model: RICH)
    memo: dict[ResolvedModelInfo, ResolvedModelInfo] = {}
    await validated_model_info(adapter, "p", "m", memo)
    # The same answer for another model, or another provider, is still wrong.
    for provider, model in (("p", "other"), ("q", "m")):
        with pytest.raises(LlmError) as info:
            await validated_model_info(adapter, provider, model, memo)
        assert info.value.code == ErrorCode.INVALID_MODEL_INFO


async def test_an_invalid_answer_is_never_memoized_and_the_memo_is_bounded() -> None:
    from llmrt.actors._prepare import MEMO_ENTRIES, validated_model_info

    bad = msgspec.structs.replace(RICH, default_max_tokens=0)
    answers = iter([bad, bad])
    adapter = ScriptedAdapter(text_script(["x"]), model_info=lambda p, m: next(answers))
    memo: dict[ResolvedModelInfo, ResolvedModelInfo] = {}
    for _ in range(2):  # refused each time: the first refusal left nothing behind
        with pytest.raises(LlmError):
            await validated_model_info(adapter, "p", "m", memo)
    assert memo == {}
    many = ScriptedAdapter(
        text_script(["x"]),
        model_info=lambda provider, model: ResolvedModelInfo(
            provider=provider, id=model, name=model
        ),
    )
    for n in range(MEMO_ENTRIES + 10):
        await validated_model_info(many, "p", f"m{n}", memo)
    assert 0 < len(memo) <= MEMO_ENTRIES


async def test_a_call_after_the_answer_changed_checks_the_new_answer(
    runtime: llmrt.LlmRuntime,
) -> None:
    answers = iter([RICH, RICH, msgspec.structs.replace(RICH, default_max_tokens=0), RICH])
    adapter = CatalogAdapter(text_script(["x"]), model_info=lambda p, m: next(answers))
    await runtime.register_adapter(["p"], adapter)
    reasons = [type(finish_reason(await collect(runtime.stream(make_options())))) for _ in range(4)]
    assert reasons == [FinishStop, FinishStop, FinishError, FinishStop]
    assert adapter.resolved == 4  # the adapter is asked every time
