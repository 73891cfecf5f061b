"""Merge-extensible vocabularies: registered blocks, sources and finish reasons (issue 12, item 4).

Codec round trips, the assembler's pass-through, registration checks, the
closed chunk union, open ``form`` values, and the HTTP adapters' refusal of
kinds they cannot send.
"""

from __future__ import annotations

import json
import typing
from typing import Any

import msgspec
import pytest
from _vocab_kinds import AUDIO, AgentSource, AudioBlock, FinishContentFilter, QuoteBlock

import llmrt
from llmrt import (
    BlockAssembler,
    BlockEnd,
    BlockStart,
    DecodeError,
    ErrorCode,
    Finish,
    GenerateOptions,
    LlmError,
    Message,
    ModelSource,
    PluginSource,
    ReplayEnvelope,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolResultBlock,
    UsageChunk,
)
from llmrt.actors.gateway._protocol import JSON, MSGPACK, ChunkFrame
from llmrt.adapters._anthropic_wire import build_anthropic_body
from llmrt.adapters._openai_wire import build_openai_body
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import SSEScript, open_upstream, openai_events
from llmrt.vocabulary import Wire

QUOTE = QuoteBlock(author="ada", content=(TextBlock(text="said"), AUDIO))


def message_with_extensions() -> Message:
    return Message(
        id="msg_1",
        role="user",
        content=(
            TextBlock(text="listen"),
            AUDIO,
            QUOTE,
            ToolResultBlock(tool_call_id="c1", content=(AUDIO,)),
        ),
        source=AgentSource(agent="planner"),
    )


# ---- codec ------------------------------------------------------------------------------------


def test_registered_block_and_source_round_trip_through_the_codec() -> None:
    message = message_with_extensions()
    data = llmrt.encode(message)
    wire = json.loads(data)
    assert wire["content"][1] == {
        "type": "audio",
        "mediaType": "audio/wav",
        "data": "UklGRiQAAABXQVZF",
        "transcript": "hi",
    }
    assert wire["source"] == {"kind": "agent", "agent": "planner"}
    for decoded in (llmrt.decode_message(data), llmrt.decode(data, Message)):
        assert decoded == message
        assert type(decoded) is Message
        assert type(decoded.content[1]) is AudioBlock
        assert type(decoded.content[2]) is QuoteBlock
        assert type(decoded.content[2].content[1]) is AudioBlock  # type: ignore[union-attr]
        assert type(decoded.content[3]) is ToolResultBlock
        assert type(decoded.content[3].content[0]) is AudioBlock  # type: ignore[union-attr]
        assert type(decoded.source) is AgentSource
    assert llmrt.decode(llmrt.encode(AUDIO), llmrt.ContentBlock) == AUDIO
    assert llmrt.decode(llmrt.encode(AgentSource(agent="a")), llmrt.MessageSource) == AgentSource(
        agent="a"
    )


def test_registered_finish_reason_round_trips_through_the_codec() -> None:
    finish = Finish(reason=FinishContentFilter(category="violence"))
    data = llmrt.encode(finish)
    assert json.loads(data) == {
        "type": "finish",
        "reason": {"kind": "content-filter", "category": "violence"},
    }
    decoded = llmrt.decode_chunk(data)
    assert decoded == finish
    assert type(decoded) is Finish and type(decoded.reason) is FinishContentFilter
    assert llmrt.decode(data, StreamChunk) == finish
    assert llmrt.decode(llmrt.encode(finish.reason), llmrt.FinishReason) == finish.reason


def test_block_end_and_request_carrying_extensions_round_trip() -> None:
    chunk = BlockEnd(index=2, block=QUOTE)
    assert llmrt.decode_chunk(llmrt.encode(chunk)) == chunk
    request = GenerateOptions(provider="p", model="m", messages=(message_with_extensions(),))
    decoded = llmrt.decode_request(llmrt.encode(request))
    assert decoded == request and type(decoded.messages[0].content[1]) is AudioBlock


def test_gateway_codecs_decode_extensions_in_both_encodings() -> None:
    message = message_with_extensions()
    request = GenerateOptions(provider="p", model="m", messages=(message,))
    frame = ChunkFrame(id="c", chunk=BlockEnd(index=0, block=AUDIO))
    for codec in (JSON, MSGPACK):
        encoded = codec.encode(frame)
        assert isinstance(encoded, bytes if codec is MSGPACK else str)
        decoded = codec.decode_server(encoded)
        assert decoded == frame and type(decoded.chunk.block) is AudioBlock  # type: ignore[union-attr]
        assert codec.decode_request(codec.raw(request)) == request


def test_bad_extension_values_still_fail_with_a_path() -> None:
    good = json.loads(llmrt.encode(message_with_extensions()))
    bad = json.loads(json.dumps(good))
    del bad["content"][1]["mediaType"]
    with pytest.raises(DecodeError, match=r"mediaType.*\$\.content\[1\]"):
        llmrt.decode_message(json.dumps(bad))
    unknown = json.loads(json.dumps(good))
    unknown["content"][1]["type"] = "video"
    with pytest.raises(DecodeError, match=r"'video' - at `\$\.content\[1\]\.type`"):
        llmrt.decode_message(json.dumps(unknown))
    with pytest.raises(DecodeError, match="malformed JSON"):
        llmrt.decode_message(b'{"content": [')


def test_unknown_forms_of_plugin_sources_decode_as_before() -> None:
    data = (
        b'{"id":"m","role":"user","content":[{"type":"audio","mediaType":"a","data":"b"}],'
        b'"source":{"kind":"plugin","plugin":"memory","form":"dream-journal"}}'
    )
    decoded = llmrt.decode_message(data)
    assert decoded.source == PluginSource(plugin="memory", form="dream-journal")
    plain = llmrt.decode_message(data.replace(b'{"type":"audio","mediaType":"a","data":"b"}', b""))
    assert plain.source == PluginSource(plugin="memory", form="dream-journal")
    # The known forms' rules still hold on the slow path (the real class checks them).
    with pytest.raises(DecodeError, match="`snapshot` form needs `sections`"):
        llmrt.decode_message(data.replace(b"dream-journal", b"snapshot"))


def test_the_chunk_union_stays_closed() -> None:
    assert typing.get_args(StreamChunk) == (
        BlockStart,
        TextDelta,
        llmrt.ReasoningDelta,
        llmrt.ToolCallDelta,
        BlockEnd,
        UsageChunk,
        Finish,
    )
    # A registered block's tag is no chunk type.
    with pytest.raises(DecodeError, match="'audio'"):
        llmrt.decode_chunk(llmrt.encode(AUDIO))
    with pytest.raises(ValueError, match="stream chunk"):
        llmrt.vocabulary.register_content_block(
            TextDelta
        )  # its tag field is `type`, but it is a chunk
    assert TextDelta not in llmrt.vocabulary.registered_content_blocks()


# ---- registration ---------------------------------------------------------------------------


def test_registration_refuses_clashes_and_malformed_kinds() -> None:
    class Text2(Wire, frozen=True, tag_field="type", tag="text"):
        text: str

    class Audio2(Wire, frozen=True, tag_field="type", tag="audio"):
        data: str

    class WrongField(Wire, frozen=True, tag_field="kind", tag="video"):
        pass

    class Plain(msgspec.Struct, frozen=True, tag_field="type", tag="video"):
        pass

    class StopAgain(Wire, frozen=True, tag_field="kind", tag="stop"):
        pass

    with pytest.raises(ValueError, match=r"'text'.*already taken.*TextBlock"):
        llmrt.vocabulary.register_content_block(Text2)
    with pytest.raises(ValueError, match=r"'audio'.*already taken.*AudioBlock"):
        llmrt.vocabulary.register_content_block(Audio2)
    with pytest.raises(ValueError, match="tag_field='type'"):
        llmrt.vocabulary.register_content_block(WrongField)
    with pytest.raises(ValueError, match="already a message source"):
        llmrt.vocabulary.register_finish_reason(AgentSource)
    with pytest.raises(TypeError, match="Wire"):
        llmrt.vocabulary.register_content_block(Plain)  # type: ignore[type-var]
    with pytest.raises(ValueError, match=r"'stop'.*already taken"):
        llmrt.vocabulary.register_finish_reason(StopAgain)
    assert llmrt.vocabulary.register_content_block(AudioBlock) is AudioBlock  # again: no change
    assert llmrt.vocabulary.registered_content_blocks()[:2] == (AudioBlock, QuoteBlock)
    assert llmrt.vocabulary.registered_message_sources() == (AgentSource,)
    assert llmrt.vocabulary.registered_finish_reasons() == (FinishContentFilter,)


# ---- assembler ------------------------------------------------------------------------------


def test_assembler_passes_a_decoded_extension_block_through() -> None:
    stream = [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="here: "),
        BlockStart(index=1, block_type="audio"),
        BlockEnd(index=1, block=AUDIO),
        BlockEnd(index=2, block=QUOTE),  # no block-start: the block-end opens it
        Finish(
            reason=FinishContentFilter(category="x"),
            replay_state=ReplayEnvelope(blocks=("t", "a", "q")),
        ),
    ]
    a = BlockAssembler()
    for chunk in stream:
        a.push(llmrt.decode_chunk(llmrt.encode(chunk)))  # as a gateway client would get it
    assert a.blocks() == (TextBlock(text="here: "), AUDIO, QUOTE)
    assert type(a.blocks()[1]) is AudioBlock
    assert a.finish == FinishContentFilter(category="x")
    assert a.replay_state == ReplayEnvelope(blocks=("t", "a", "q"))
    source = ModelSource(provider="p", model="m", replay_state=a.replay_state)
    message = a.message(source)
    assert message.content == (TextBlock(text="here: "), AUDIO, QUOTE)
    assert llmrt.decode_message(llmrt.encode(message)) == message


# ---- HTTP adapters --------------------------------------------------------------------------


def request_with(*blocks: Any, role: str = "user") -> GenerateOptions:
    message = Message(id="m", role=role, content=blocks, source=llmrt.UserSource())  # type: ignore[arg-type]
    return GenerateOptions(provider="my-route", model="m", messages=(message,))


@pytest.mark.parametrize(
    "options",
    [
        request_with(TextBlock(text="x"), AUDIO),
        request_with(ToolResultBlock(tool_call_id="c", content=(AUDIO,))),
        request_with(AUDIO, role="assistant"),
        request_with(AUDIO, role="system"),
    ],
)
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_wire_bodies_refuse_block_kinds_they_cannot_send(
    kind: str, options: GenerateOptions
) -> None:
    with pytest.raises(LlmError) as info:
        if kind == "openai":
            build_openai_body(options, image_input=True)
        else:
            build_anthropic_body(options, image_input=True, default_max_tokens=100)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert "'audio'" in str(info.value) and "'my-route'" in str(info.value)


def test_require_block_types_accepts_the_builtin_blocks_and_a_wider_set() -> None:
    plain = request_with(TextBlock(text="x"), ToolResultBlock(tool_call_id="c", content=()))
    llmrt.vocabulary.require_block_types(plain.messages, route="r")
    extended = request_with(AUDIO)
    llmrt.vocabulary.require_block_types(
        extended.messages, llmrt.vocabulary.BUILTIN_BLOCK_TYPES | {AudioBlock}, route="r"
    )
    with pytest.raises(LlmError, match="'audio'"):
        llmrt.vocabulary.require_block_types(extended.messages, route="r")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_http_adapter_fails_the_call_before_any_io(kind: str) -> None:
    environ = {"TEST_KEY": "sk-test-0123456789abcdef"}
    options = request_with(TextBlock(text="transcribe this"), AUDIO)
    async with open_upstream(SSEScript(events=openai_events(["never sent"]))) as upstream:
        adapter: llmrt.Adapter
        if kind == "anthropic":
            adapter = AnthropicAdapter(
                base_url=upstream.base_url, api_key_env="TEST_KEY", environ=environ
            )
        else:
            adapter = OpenAIChatAdapter(
                preset="openai-compatible",
                base_url=upstream.base_url,
                api_key_env="TEST_KEY",
                environ=environ,
            )
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["my-route"], adapter)
            async with rt.stream(options) as call:
                chunks = [chunk async for chunk in call]
    assert upstream.connections == []
    last = chunks[-1]
    assert isinstance(last, Finish) and isinstance(last.reason, llmrt.FinishError)
    assert last.reason.failure.code == ErrorCode.INVALID_REQUEST
    assert "'audio'" in last.reason.failure.message


def test_a_kind_registered_late_reaches_decoders_built_earlier() -> None:
    class StickerBlock(Wire, frozen=True, tag_field="type", tag="x-late-sticker"):
        name: str

    message = Message(
        id="m",
        role="user",
        content=(TextBlock(text="look"), StickerBlock(name="cat")),  # type: ignore[arg-type]
        source=llmrt.UserSource(),
    )
    data = llmrt.encode(message)
    with pytest.raises(DecodeError, match=r"'x-late-sticker' - at `\$\.content\[1\]\.type`"):
        llmrt.decode_message(data)  # the module-level decoder, built at import
    llmrt.vocabulary.register_content_block(StickerBlock)
    assert llmrt.decode_message(data) == message
    assert llmrt.decode(
        llmrt.encode(BlockEnd(index=0, block=StickerBlock(name="cat"))), StreamChunk
    )
    assert StickerBlock in llmrt.vocabulary.registered_content_blocks()
