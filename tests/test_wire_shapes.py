"""Every transcript through every decoder: whole, in random 1-7 byte reads, and over loopback.

``tests/wire/expected.json`` holds the reference transcripts;
``tests/wire/shapes/expected.json`` the shapes real providers send that llmrt
once got wrong (each named by its ``finding``); ``tests/wire/shapes/errors.json``
each preset's documented error bodies, some of them sent with HTTP 200.
Provenance: ``tests/wire/shapes/README.md``.
"""

from __future__ import annotations

import json
import pathlib
import random
from typing import Any

import pytest

import llmrt
from llmrt import (
    BlockAssembler,
    Finish,
    FinishError,
    GenerateOptions,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
)
from llmrt.adapters._presets import PRESETS
from llmrt.adapters.anthropic import AnthropicAdapter, _AnthropicEvents
from llmrt.adapters.openai_chat import OpenAIChatAdapter, _OpenAIEvents
from llmrt.testing import ErrorScript, SSEScript, Upstream, open_upstream

WIRE = pathlib.Path(__file__).parent / "wire"
REFERENCE: dict[str, Any] = json.loads((WIRE / "expected.json").read_text())
SHAPE_DIR = WIRE / "shapes"
SHAPES: dict[str, Any] = json.loads((SHAPE_DIR / "expected.json").read_text())
ERRORS: list[dict[str, Any]] = json.loads((SHAPE_DIR / "errors.json").read_text())
KEY = "sk-test-shapes-0123456789"
ENV = {"TEST_KEY": KEY}
#: Reference cases name the wire kind; their presets.
_PRESET_OF = {"openai": "openai-compatible", "deepseek": "deepseek-official"}


def _expected(case: dict[str, Any]) -> dict[str, Any]:
    """A reference case in the shapes' form (blocks, usage, finish kind and code)."""
    finish = dict(case["finish"])
    if "failure" in finish:
        finish["code"] = finish.pop("failure")["code"]
    blocks = case["blocks"] if "blocks" in case else case.get("blocks_streamed")
    return {**case, "blocks": blocks, "finish": finish}


CASES: dict[str, dict[str, Any]] = {
    **{name: _expected(case) for name, case in REFERENCE.items()},
    **{f"shapes/{name}": case for name, case in SHAPES.items()},
}


def preset_of(provider: str) -> str:
    return _PRESET_OF.get(provider, provider)


def feed_for(provider: str) -> Any:
    if provider == "anthropic":
        return _AnthropicEvents()
    return _OpenAIEvents(PRESETS[preset_of(provider)].dialect)


def decode(provider: str, reads: list[bytes]) -> list[StreamChunk]:
    feed = feed_for(provider)
    chunks: list[StreamChunk] = []
    for read in reads:
        chunks += feed.feed(read)
        if feed.finished:
            return chunks
    return chunks + feed.end()


def random_reads(body: bytes, rng: random.Random) -> list[bytes]:
    reads, at = [], 0
    while at < len(body):
        size = rng.randint(1, 7)
        reads.append(body[at : at + size])
        at += size
    return reads


def check(case: dict[str, Any], chunks: list[StreamChunk]) -> None:
    finishes = [c for c in chunks if type(c) is Finish]
    assert len(finishes) == 1 and chunks[-1] is finishes[0]
    seen: dict[int, str] = {}
    for c in chunks:
        if type(c) is ToolCallDelta:
            # The stream contract: the call id on every fragment, the same id.
            assert c.id, c
            assert seen.setdefault(c.index, c.id) == c.id
    assembler = BlockAssembler()
    for c in chunks:
        assembler.push(c)
    got = json.loads(llmrt.encode(assembler.finish))
    assert got["kind"] == case["finish"]["kind"], got
    if "code" in case["finish"]:
        assert got["failure"]["code"] == case["finish"]["code"]
    if case["blocks"] is not None:
        want = llmrt.decode(json.dumps(case["blocks"]), tuple[llmrt.ContentBlock, ...])
        assert assembler.blocks() == want
    if case.get("usage") is not None:
        assert assembler.usage == llmrt.decode(json.dumps(case["usage"]), llmrt.TokenUsage)
        usage = assembler.usage
        assert usage is not None
        assert usage.output_tokens >= (usage.reasoning_tokens or 0), "output includes reasoning"
    if "never" in case:
        assert all(case["never"] not in getattr(c, "text", "") for c in chunks)


@pytest.mark.parametrize("name", sorted(CASES))
def test_transcript_whole_and_in_random_small_reads(name: str) -> None:
    case = CASES[name]
    body = (WIRE / name).read_bytes()
    whole = decode(case["provider"], [body])
    check(case, whole)
    for seed in range(8):
        assert decode(case["provider"], random_reads(body, random.Random(seed))) == whole


def adapter_for(provider: str, upstream: Upstream) -> llmrt.Adapter:
    if provider == "anthropic":
        return AnthropicAdapter(base_url=upstream.base_url, api_key_env="TEST_KEY", environ=ENV)
    return OpenAIChatAdapter(
        preset=preset_of(provider), base_url=upstream.base_url, api_key_env="TEST_KEY", environ=ENV
    )


async def run_call(provider: str, upstream: Upstream) -> list[StreamChunk]:
    options = GenerateOptions(provider="p", model="m", messages=(llmrt.user_message("hello"),))
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter_for(provider, upstream))
        async with rt.stream(options) as call:
            return [chunk async for chunk in call]


@pytest.mark.parametrize("name", sorted(SHAPES))
async def test_shape_over_loopback_through_its_preset(name: str) -> None:
    case = SHAPES[name]
    async with open_upstream(SSEScript.from_transcript(SHAPE_DIR / name)) as upstream:
        chunks = await run_call(case["provider"], upstream)
        await upstream.wait_all_closed()
    check(case, chunks)
    (sent,) = upstream.requests
    assert sent.headers["user-agent"] == llmrt.adapter.attribution_headers()["User-Agent"]
    if case["provider"] == "anthropic":
        assert sent.headers["x-api-key"] == KEY
    else:
        assert sent.headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("case", ERRORS, ids=[c["id"] for c in ERRORS])
async def test_documented_error_bodies_give_their_codes(case: dict[str, Any]) -> None:
    script = ErrorScript(
        status=case["http_status"], headers=case["headers"], body=case["body"].encode()
    )
    async with open_upstream(script) as upstream:
        chunks = await run_call(case["provider"], upstream)
    (finish,) = chunks
    assert type(finish) is Finish and type(finish.reason) is FinishError
    failure = finish.reason.failure
    assert failure.code == case["expected_code"], failure
    assert failure.status == case["http_status"]
    assert failure.provider_retry_after_ms == case["expected_retry_after_ms"]
    assert KEY not in failure.message


def test_text_deltas_are_never_empty_in_any_transcript() -> None:
    for name, case in CASES.items():
        chunks = decode(case["provider"], [(WIRE / name).read_bytes()])
        assert all(c.text for c in chunks if type(c) is TextDelta), name


# ---- the rules behind the shapes, one by one ---------------------------------------------------


def _anthropic(*events: tuple[str, dict[str, Any]]) -> list[StreamChunk]:
    from llmrt.adapters._anthropic_wire import AnthropicStreamDecoder

    decoder = AnthropicStreamDecoder()
    chunks: list[StreamChunk] = []
    for name, payload in events:
        chunks += decoder.push(name, json.dumps({"type": name, **payload}).encode())
    return chunks + decoder.end()


def _blocks(chunks: list[StreamChunk]) -> tuple[llmrt.ContentBlock, ...]:
    assembler = BlockAssembler()
    for c in chunks:
        assembler.push(c)
    return assembler.blocks()


def test_fragments_after_a_whole_tool_input_are_not_appended() -> None:
    tool = {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}
    chunks = _anthropic(
        ("message_start", {"message": {"id": "m", "content": []}}),
        ("content_block_start", {"index": 0, "content_block": tool}),
        (
            "content_block_delta",
            {"index": 0, "delta": {"type": "input_json_delta", "partial_json": "{"}},
        ),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": "tool_use"}}),
        ("message_stop", {}),
    )
    assert _blocks(chunks) == (
        llmrt.ToolCallBlock(id="t1", name="f", arguments='{"a": 1}'),
    )  # raw, as sent


def test_thinking_inside_message_start_keeps_its_signature_for_replay() -> None:
    content = [
        {"type": "thinking", "thinking": "Hmm.", "signature": "sig-1"},
        {"type": "text", "text": "Hi"},
    ]
    chunks = _anthropic(
        ("message_start", {"message": {"id": "m", "content": content, "stop_reason": "end_turn"}}),
        ("message_stop", {}),
    )
    assert _blocks(chunks) == (llmrt.ReasoningBlock(text="Hmm."), llmrt.TextBlock(text="Hi"))
    finish = chunks[-1]
    assert type(finish) is Finish and finish.replay_state is not None
    assert finish.replay_state.blocks == ({"signature": "sig-1"}, None)
    assert finish.replay_state.response["stopReason"] == "end_turn"


def _openai(preset: str, *deltas: dict[str, Any], usage: dict[str, Any] | None = None) -> Any:
    from llmrt.adapters._openai_wire import OpenAIStreamDecoder

    decoder = OpenAIStreamDecoder(dialect=PRESETS[preset].dialect)
    chunks: list[StreamChunk] = []
    for delta in deltas:
        chunks += decoder.push(json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode())
    if usage is not None:
        chunks += decoder.push(json.dumps({"choices": [], "usage": usage}).encode())
    chunks += decoder.push(b"[DONE]")
    assembler = BlockAssembler()
    for c in chunks:
        assembler.push(c)
    return assembler


def test_reasoning_mirrored_in_two_fields_counts_once() -> None:
    both = {"reasoning": "Think.", "reasoning_content": "Think."}
    got = _openai("openai-compatible", both, {"content": "Done."})
    assert got.blocks() == (llmrt.ReasoningBlock(text="Think."), llmrt.TextBlock(text="Done."))
    # A dialect reads only the fields it declares, in its order.
    got = _openai("groq", {"reasoning_content": "ignored", "reasoning": "Read."}, {"content": "x"})
    assert got.blocks()[0] == llmrt.ReasoningBlock(text="Read.")


@pytest.mark.parametrize(
    ("preset", "usage", "output"),
    [
        # OpenAI's rule: completion includes reasoning.
        ("openai", {"prompt_tokens": 5, "completion_tokens": 30, "total_tokens": 35}, 30),
        # xAI, by total: reasoning outside completion is added ...
        ("xai", {"prompt_tokens": 5, "completion_tokens": 30, "total_tokens": 55}, 50),
        # ... and inside it (total = prompt + completion) it is not.
        ("xai", {"prompt_tokens": 5, "completion_tokens": 30, "total_tokens": 35}, 30),
        # Any dialect: an output below its own reasoning cannot include it.
        ("openai", {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}, 27),
    ],
)
def test_output_tokens_always_include_reasoning(
    preset: str, usage: dict[str, Any], output: int
) -> None:
    usage = {**usage, "completion_tokens_details": {"reasoning_tokens": 20}}
    got = _openai(preset, {"content": "x"}, usage=usage)
    assert got.usage.output_tokens == output
    assert got.usage.reasoning_tokens == 20
