"""The vocabulary: every wire type round-trips through JSON, is immutable, and validates."""

from __future__ import annotations

import json
from typing import Any

import pytest

import llmrt
from llmrt import (
    AlwaysRetryPolicy,
    BlockEnd,
    BlockStart,
    CallConfigDefaults,
    ContentBlock,
    DecodeError,
    ErrorCode,
    Finish,
    FinishAborted,
    FinishError,
    FinishMaxTokens,
    FinishReason,
    FinishStop,
    FinishToolCalls,
    GenerateOptions,
    ImageBlock,
    LlmCallConfig,
    LlmFailure,
    Message,
    MessageSource,
    ModelInfo,
    ModelSource,
    NormalRetryPolicy,
    PluginSource,
    ReasoningBlock,
    ReasoningDelta,
    ReplayEnvelope,
    ResolvedModelInfo,
    ResolvedRetryPolicy,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    ToolResultBlock,
    ToolSchema,
    ToolSource,
    UsageChunk,
    UserSource,
)
from llmrt.adapter import (
    AppIdentity,
    ConfigurableProvider,
    DiscoveredModel,
    ModelContext,
    ModelDiscoveryRequest,
    ModelReasoningInfo,
    ProviderInfo,
    ReasoningEffortInfo,
)
from llmrt.vocabulary import ContextSnapshotSection

FAILURE = LlmFailure(
    message="slow down",
    code=ErrorCode.RATE_LIMIT,
    status=429,
    provider_retry_after_ms=1500,
    request_id="req_1",
)
ENVELOPE = ReplayEnvelope(response={"id": "resp_1", "n": [1, 2]}, blocks=({"sig": "a"}, None, 3))
USAGE = TokenUsage(
    input_tokens=10,
    output_tokens=20,
    cache_read_tokens=5,
    cache_write_tokens=2,
    reasoning_tokens=7,
)
NESTED_RESULT = ToolResultBlock(
    tool_call_id="call_1",
    content=(
        TextBlock(text="ok"),
        ImageBlock(media_type="image/png", url="https://example.com/a.png"),
        ToolResultBlock(tool_call_id="call_0", content=(TextBlock(text="inner"),), is_error=True),
    ),
    is_error=True,
)

CONTENT_BLOCKS: list[ContentBlock] = [
    TextBlock(text="hello ✓"),
    ReasoningBlock(text="thinking…"),
    ImageBlock(media_type="image/png", data="iVBORw0KGgo="),
    ImageBlock(media_type="image/jpeg", url="https://example.com/cat.jpg"),
    ToolCallBlock(id="call_1", name="search", arguments='{"q": "trio"'),
    NESTED_RESULT,
]

SOURCES: list[MessageSource] = [
    UserSource(),
    PluginSource(plugin="memory"),
    PluginSource(plugin="memory", form="instructions"),
    PluginSource(
        plugin="ctx",
        form="snapshot",
        sections=(ContextSnapshotSection(name="git", text="clean"),),
    ),
    PluginSource(plugin="ctx", form="notice", summary="compacted 3 turns"),
    PluginSource(plugin="ctx", form="some-future-form"),
    ModelSource(provider="deepseek", model="deepseek-chat"),
    ModelSource(provider="anthropic", model="claude", replay_state=ENVELOPE),
    ToolSource(),
    ToolSource(tool="search"),
]

FINISH_REASONS: list[FinishReason] = [
    FinishStop(),
    FinishToolCalls(),
    FinishMaxTokens(),
    FinishAborted(failure=LlmFailure(message="aborted", code=ErrorCode.ABORTED)),
    FinishError(failure=FAILURE),
]

CHUNKS: list[StreamChunk] = [
    BlockStart(index=0, block_type="text"),
    BlockStart(index=3, block_type="audio"),
    TextDelta(index=0, text="hi"),
    ReasoningDelta(index=1, text="hmm"),
    ToolCallDelta(index=2),
    ToolCallDelta(index=2, id="call_1", name="search", arguments_delta='{"q":'),
    *(BlockEnd(index=i, block=block) for i, block in enumerate(CONTENT_BLOCKS)),
    UsageChunk(usage=TokenUsage(input_tokens=0, output_tokens=0)),
    UsageChunk(usage=USAGE),
    *(Finish(reason=reason) for reason in FINISH_REASONS),
    Finish(reason=FinishStop(), replay_state=ENVELOPE),
    Finish(reason=FinishStop(), replay_state=ReplayEnvelope()),
]

MESSAGE = Message(
    id="msg_1",
    role="assistant",
    content=tuple(CONTENT_BLOCKS),
    source=ModelSource(provider="p", model="m", replay_state=ENVELOPE),
)

TOOL = ToolSchema(
    name="search",
    description="Search the web",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)

FULL_OPTIONS = GenerateOptions(
    provider="deepseek",
    model="deepseek-reasoner",
    messages=(
        llmrt.system_message("be brief", id="msg_s"),
        llmrt.user_message("hi", id="msg_u"),
        MESSAGE,
        llmrt.tool_result_message("call_1", "42", is_error=False, tool="search", id="msg_t"),
    ),
    reasoning_effort="high",
    system="You are terse.",
    tools=(TOOL,),
    temperature=0.7,
    max_tokens=1024,
    stop=("\n\n", "END"),
    session_id="sess_1",
    purpose="compaction",
)

RESOLVED = ResolvedModelInfo(
    provider="deepseek",
    id="deepseek-reasoner",
    name="DeepSeek Reasoner",
    description="thinks first",
    input_modalities=("text", "image"),
    context=ModelContext(context_window=128_000),
    default_max_tokens=8192,
    reasoning=ModelReasoningInfo(
        efforts=(
            ReasoningEffortInfo(id="low", name="Low"),
            ReasoningEffortInfo(id="high", name="High", description="slower, better"),
        ),
        default_effort="high",
    ),
)

#: (value, type to decode as) for every wire type of the vocabulary.
ROUND_TRIP: list[tuple[Any, Any]] = [
    *((block, ContentBlock) for block in CONTENT_BLOCKS),
    *((source, MessageSource) for source in SOURCES),
    *((chunk, StreamChunk) for chunk in CHUNKS),
    *((reason, FinishReason) for reason in FINISH_REASONS),
    (MESSAGE, Message),
    (llmrt.user_message("plain", id="msg_2"), Message),
    (ENVELOPE, ReplayEnvelope),
    (ReplayEnvelope(response="opaque"), ReplayEnvelope),
    (USAGE, TokenUsage),
    (TokenUsage(input_tokens=1, output_tokens=2), TokenUsage),
    (FAILURE, LlmFailure),
    (LlmFailure(message="m", code="X"), LlmFailure),
    (FULL_OPTIONS, GenerateOptions),
    (GenerateOptions(provider="p", model="m", messages=()), GenerateOptions),
    (
        LlmCallConfig(
            provider="p",
            model="m",
            reasoning_effort="low",
            temperature=0.0,
            max_tokens=10,
            stop=("x",),
        ),
        LlmCallConfig,
    ),
    (LlmCallConfig(provider="p", model="m"), LlmCallConfig),
    (CallConfigDefaults(reasoning_effort=True, max_tokens=True), CallConfigDefaults),
    (CallConfigDefaults(), CallConfigDefaults),
    (TOOL, ToolSchema),
    (ProviderInfo(id="deepseek", name="DeepSeek"), ProviderInfo),
    (
        ModelInfo(
            provider="p", id="m", name="M", description="d", input_modalities=("text", "image")
        ),
        ModelInfo,
    ),
    (ModelInfo(provider="p", id="m", name="M"), ModelInfo),
    (RESOLVED, ResolvedModelInfo),
    (ResolvedModelInfo(provider="p", id="m", name="m"), ResolvedModelInfo),
    (
        ConfigurableProvider(
            provider="vllm",
            display_name="vLLM",
            settings_ns="providers",
            settings_path=("vllm", "local"),
            declared=True,
        ),
        ConfigurableProvider,
    ),
    (ConfigurableProvider(provider="p", display_name="P", settings_ns="ns"), ConfigurableProvider),
    (
        ModelDiscoveryRequest(
            provider="vllm", base_url="http://127.0.0.1:8000/v1", api="openai-chat", api_key="k"
        ),
        ModelDiscoveryRequest,
    ),
    (ModelDiscoveryRequest(), ModelDiscoveryRequest),
    (DiscoveredModel(id="m", name="M", context_window=32_000, max_tokens=4096), DiscoveredModel),
    (DiscoveredModel(id="m"), DiscoveredModel),
    (NormalRetryPolicy(), NormalRetryPolicy),
    (
        NormalRetryPolicy(
            retryable_codes=("RATE_LIMIT",),
            initial_delay_ms=0.0,
            max_delay_ms=0.0,
            jitter_ratio=0.0,
            max_retries=0,
        ),
        ResolvedRetryPolicy,
    ),
    (AlwaysRetryPolicy(), AlwaysRetryPolicy),
    (
        AlwaysRetryPolicy(initial_delay_ms=5.0, max_delay_ms=10.0, jitter_ratio=1.0),
        ResolvedRetryPolicy,
    ),
    (AppIdentity(product="llmrt", version="1.2.3", url="https://example.com"), AppIdentity),
]


def _id(value: object) -> str:
    return type(value).__name__


@pytest.mark.parametrize(("value", "typ"), ROUND_TRIP, ids=[_id(v) for v, _ in ROUND_TRIP])
def test_round_trip(value: Any, typ: Any) -> None:
    data = llmrt.encode(value)
    decoded = llmrt.decode(data, typ)
    assert decoded == value
    assert type(decoded) is type(value)
    # Encoding is deterministic: the decoded value encodes to the same bytes.
    assert llmrt.encode(decoded) == data
    # A str input decodes the same as bytes.
    assert llmrt.decode(data.decode(), typ) == value


@pytest.mark.parametrize("chunk", CHUNKS, ids=[_id(c) for c in CHUNKS])
def test_decode_chunk_round_trip(chunk: StreamChunk) -> None:
    assert llmrt.decode_chunk(llmrt.encode(chunk)) == chunk


@pytest.mark.parametrize("message", [MESSAGE, *FULL_OPTIONS.messages], ids=lambda m: m.role)
def test_decode_message_round_trip(message: Message) -> None:
    assert llmrt.decode_message(llmrt.encode(message)) == message


def test_decode_request_round_trip() -> None:
    assert llmrt.decode_request(llmrt.encode(FULL_OPTIONS)) == FULL_OPTIONS


def test_every_content_block_type_is_covered() -> None:
    tags = {block.__struct_config__.tag for block in CONTENT_BLOCKS}
    assert tags == llmrt.vocabulary.CONTENT_BLOCK_TYPES


def test_every_chunk_and_finish_variant_is_covered() -> None:
    chunk_tags = {chunk.__struct_config__.tag for chunk in CHUNKS}
    assert chunk_tags == {
        "block-start",
        "text-delta",
        "reasoning-delta",
        "tool-call-delta",
        "block-end",
        "usage",
        "finish",
    }
    kinds = {reason.__struct_config__.tag for reason in FINISH_REASONS}
    assert kinds == {"stop", "tool-calls", "max-tokens", "aborted", "error"}


# -- names on the wire ------------------------------------------------------


def _wire(value: object) -> Any:
    return json.loads(llmrt.encode(value))


def test_camel_case_names_on_the_wire() -> None:
    assert _wire(BlockStart(index=0, block_type="text")) == {
        "type": "block-start",
        "index": 0,
        "blockType": "text",
    }
    assert _wire(ToolCallDelta(index=1, id="c", name="n", arguments_delta="{")) == {
        "type": "tool-call-delta",
        "index": 1,
        "id": "c",
        "name": "n",
        "argumentsDelta": "{",
    }
    assert _wire(ToolResultBlock(tool_call_id="c", content=(), is_error=True)) == {
        "type": "tool-result",
        "toolCallId": "c",
        "content": [],
        "isError": True,
    }
    assert _wire(USAGE) == {
        "inputTokens": 10,
        "outputTokens": 20,
        "cacheReadTokens": 5,
        "cacheWriteTokens": 2,
        "reasoningTokens": 7,
    }
    finish = _wire(Finish(reason=FinishError(failure=FAILURE), replay_state=ENVELOPE))
    assert set(finish) == {"type", "reason", "replayState"}
    assert finish["reason"]["failure"] == {
        "message": "slow down",
        "code": "RATE_LIMIT",
        "status": 429,
        "providerRetryAfterMs": 1500,
        "requestId": "req_1",
    }
    options = _wire(FULL_OPTIONS)
    assert {"maxTokens", "reasoningEffort", "sessionId"} <= set(options)
    assert "max_tokens" not in options
    assert _wire(ImageBlock(media_type="image/png", url="u")) == {
        "type": "image",
        "mediaType": "image/png",
        "url": "u",
    }
    assert _wire(ModelDiscoveryRequest(base_url="http://h", api_key="k")) == {
        "baseURL": "http://h",
        "apiKey": "k",
    }
    assert "defaultEffort" in _wire(RESOLVED)["reasoning"]
    assert "contextWindow" in _wire(RESOLVED)["context"]
    assert _wire(NormalRetryPolicy())["mode"] == "normal"
    assert set(_wire(NormalRetryPolicy(max_retries=1))) == {"mode", "maxRetries"}
    assert _wire(AlwaysRetryPolicy()) == {"mode": "always"}


def test_tags_on_the_wire() -> None:
    assert _wire(PluginSource(plugin="p", form="notice", summary="s")) == {
        "kind": "plugin",
        "plugin": "p",
        "form": "notice",
        "summary": "s",
    }
    assert _wire(ModelSource(provider="p", model="m"))["kind"] == "model"
    assert _wire(UserSource()) == {"kind": "user"}
    assert _wire(ToolSource()) == {"kind": "tool"}
    assert _wire(Finish(reason=FinishToolCalls())) == {
        "type": "finish",
        "reason": {"kind": "tool-calls"},
    }
    assert _wire(Finish(reason=FinishMaxTokens()))["reason"] == {"kind": "max-tokens"}


# -- immutability ------------------------------------------------------------

FROZEN: list[tuple[object, str, object]] = [
    (FULL_OPTIONS, "model", "other"),
    (FULL_OPTIONS, "messages", ()),
    (MESSAGE, "content", ()),
    (MESSAGE, "id", "x"),
    *((chunk, next(iter(chunk.__struct_fields__)), None) for chunk in CHUNKS),
    (TextBlock(text="a"), "text", "b"),
    (USAGE, "input_tokens", 0),
    (NormalRetryPolicy(), "max_retries", 9),
]


@pytest.mark.parametrize(("value", "field", "new"), FROZEN, ids=[_id(v) for v, _, _ in FROZEN])
def test_fields_cannot_be_assigned(value: object, field: str, new: object) -> None:
    with pytest.raises(AttributeError):
        setattr(value, field, new)


def test_sequences_are_tuples_even_after_decoding_json_lists() -> None:
    decoded = llmrt.decode_request(llmrt.encode(FULL_OPTIONS))
    assert type(decoded.messages) is tuple
    assert type(decoded.tools) is tuple
    assert type(decoded.stop) is tuple
    message = decoded.messages[2]
    assert type(message.content) is tuple
    result = llmrt.decode(llmrt.encode(NESTED_RESULT), ToolResultBlock)
    assert type(result.content) is tuple
    inner = result.content[2]
    assert isinstance(inner, ToolResultBlock)
    assert type(inner.content) is tuple
    assert isinstance(message.source, ModelSource)
    assert message.source.replay_state is not None
    assert type(message.source.replay_state.blocks) is tuple
    resolved = llmrt.decode(llmrt.encode(RESOLVED), ResolvedModelInfo)
    assert type(resolved.input_modalities) is tuple
    assert resolved.reasoning is not None
    assert type(resolved.reasoning.efforts) is tuple


def test_message_constructors() -> None:
    user = llmrt.user_message("hi")
    assert user.role == "user"
    assert user.content == (TextBlock(text="hi"),)
    assert user.source == UserSource()
    assert user.id.startswith("msg_")
    assert user.id != llmrt.user_message("hi").id
    assert llmrt.user_message([TextBlock(text="a"), TextBlock(text="b")]).content == (
        TextBlock(text="a"),
        TextBlock(text="b"),
    )
    system = llmrt.system_message(ReasoningBlock(text="r"), plugin="ctx")
    assert system.role == "system"
    assert system.content == (ReasoningBlock(text="r"),)
    assert system.source == PluginSource(plugin="ctx")
    tool = llmrt.tool_result_message("call_9", "boom", is_error=True, tool="sh")
    assert tool.role == "user"
    assert tool.source == ToolSource(tool="sh")
    assert tool.content == (
        ToolResultBlock(tool_call_id="call_9", content=(TextBlock(text="boom"),), is_error=True),
    )


# -- validation at construction and at decode ---------------------------------

INVALID_SOURCES: list[tuple[dict[str, Any], str]] = [
    ({"plugin": "p", "form": "snapshot"}, "sections"),
    ({"plugin": "p", "form": "notice"}, "summary"),
    ({"plugin": "p", "form": "notice", "sections": ()}, "sections"),
    ({"plugin": "p", "summary": "s"}, "summary"),
]


@pytest.mark.parametrize(("fields", "needle"), INVALID_SOURCES)
def test_plugin_source_form_rules_at_construction(fields: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        PluginSource(**fields)


@pytest.mark.parametrize(("fields", "needle"), INVALID_SOURCES)
def test_plugin_source_form_rules_at_decode(fields: dict[str, Any], needle: str) -> None:
    wire = {
        "kind": "plugin",
        **{k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()},
    }
    message = {"id": "m", "role": "system", "content": [], "source": wire}
    with pytest.raises(DecodeError, match=needle) as info:
        llmrt.decode_message(json.dumps(message))
    assert "$.source" in str(info.value)
    with pytest.raises(DecodeError, match=needle) as info:
        llmrt.decode(json.dumps(wire), MessageSource)
    assert "`$`" in str(info.value)


@pytest.mark.parametrize("fields", [{}, {"data": "AA==", "url": "https://x"}])
def test_image_block_needs_exactly_one_of_data_and_url(fields: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ImageBlock(media_type="image/png", **fields)
    wire = json.dumps(
        {
            "type": "tool-result",
            "toolCallId": "c",
            "content": [{"type": "image", "mediaType": "image/png", **fields}],
        }
    )
    with pytest.raises(DecodeError, match=r"exactly one.*\$\.content\[0\]"):
        llmrt.decode(wire, ContentBlock)


#: (constructor fields, the same on the wire as JSON object members)
BAD_POLICIES: list[tuple[dict[str, Any], str]] = [
    ({"initial_delay_ms": -1.0}, '"initialDelayMs":-1'),
    ({"max_delay_ms": -1.0}, '"maxDelayMs":-1'),
    ({"initial_delay_ms": 10.0, "max_delay_ms": 5.0}, '"initialDelayMs":10,"maxDelayMs":5'),
    ({"max_delay_ms": float("inf")}, '"maxDelayMs":1e999'),
    ({"jitter_ratio": -0.1}, '"jitterRatio":-0.1'),
    ({"jitter_ratio": 1.5}, '"jitterRatio":1.5'),
]


@pytest.mark.parametrize("policy_type", [NormalRetryPolicy, AlwaysRetryPolicy])
@pytest.mark.parametrize(("fields", "members"), BAD_POLICIES, ids=[m for _, m in BAD_POLICIES])
def test_retry_policy_rejects_bad_delays_and_jitter(
    policy_type: type[ResolvedRetryPolicy], fields: dict[str, Any], members: str
) -> None:
    with pytest.raises(ValueError):
        policy_type(**fields)
    data = f'{{"mode":"{policy_type.__struct_config__.tag}",{members}}}'
    with pytest.raises(DecodeError, match=r"- at `\$"):
        llmrt.decode(data, ResolvedRetryPolicy)
    with pytest.raises(DecodeError, match=r"- at `\$"):
        llmrt.decode(data, policy_type)


def test_normal_retry_policy_rejects_negative_max_retries() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        NormalRetryPolicy(max_retries=-1)
    with pytest.raises(DecodeError, match=r"\$\.maxRetries"):
        llmrt.decode(b'{"mode":"normal","maxRetries":-1}', NormalRetryPolicy)


def test_retry_policy_defaults() -> None:
    policy = llmrt.default_retry_policy()
    assert policy == NormalRetryPolicy()
    assert policy.max_retries == 3
    assert set(policy.retryable_codes) == set(llmrt.DEFAULT_RETRYABLE_CODES)
    assert ErrorCode.RATE_LIMIT in policy.retryable_codes
    assert ErrorCode.AUTH not in policy.retryable_codes
    assert 0 <= policy.initial_delay_ms <= policy.max_delay_ms
