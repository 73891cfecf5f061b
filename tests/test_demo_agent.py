"""The demo model drives an agent loop: schema-shaped tool arguments, an answer after a
tool result, the loop's end (issue 22, item 7). Still no key and no network."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from conftest import collect, finish_reason

import llmrt
from llmrt import (
    BlockAssembler,
    FinishStop,
    FinishToolCalls,
    GenerateOptions,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolCallDelta,
    ToolSchema,
)
from llmrt.adapters._schema_sample import MAX_ITEMS, sample_arguments
from llmrt.adapters.demo import DemoAdapter

WEATHER = ToolSchema(
    name="get_weather",
    description="The weather in a city",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
)


async def turn(messages: tuple[Message, ...], tools: tuple[ToolSchema, ...]) -> BlockAssembler:
    """One demo call of the conversation so far, assembled."""
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        options = GenerateOptions(provider="demo", model="demo-1", messages=messages, tools=tools)
        chunks = await collect(rt.stream(options))
    finish_reason(chunks)  # exactly one finish, last
    assembler = BlockAssembler()
    for chunk in chunks:
        assembler.push(chunk)
    return assembler


async def test_the_arguments_fill_the_schemas_required_properties() -> None:
    assembler = await turn((llmrt.user_message("Weather in Paris?"),), (WEATHER,))
    assert isinstance(assembler.finish, FinishToolCalls)
    call = assembler.blocks()[-1]
    assert isinstance(call, ToolCallBlock) and call.name == "get_weather"
    # Only what is required (`unit` is optional), not the old {"input": ...}.
    assert json.loads(call.arguments) == {"city": "Weather in Paris?"}


def test_every_json_schema_type_gets_a_deterministic_value() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "properties": {
            "name": {"type": "string", "maxLength": 4},
            "code": {"type": "string", "minLength": 3},
            "count": {"type": "integer", "minimum": 3},
            "ratio": {"type": "number", "exclusiveMinimum": 0},
            "top": {"type": "integer", "maximum": -2},
            "on": {"type": "boolean"},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "kind": {"const": "fixed"},
            "page": {"type": "integer", "default": 7},
            "tags": {"type": "array", "items": {"type": "string"}},
            "pair": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
            "many": {"type": "array", "items": {"type": "boolean"}, "minItems": 10_000},
            "where": {
                "type": "object",
                "properties": {"lat": {"type": "number"}, "note": {"type": "string"}},
                "required": ["lat"],
            },
            "maybe": {"type": ["string", "null"]},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "both": {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
                ]
            },
            "at": {"$ref": "#/$defs/point"},
            "optional": {"type": "string"},
        },
        "required": [
            "name", "code", "count", "ratio", "top", "on", "unit", "kind", "page", "tags",
            "pair", "many", "where", "maybe", "either", "both", "at",
        ],
    }  # fmt: skip
    arguments = sample_arguments(schema, "hi there")
    assert arguments == {
        "name": "hi t",
        "code": "hi there",
        "count": 3,
        "ratio": 1.0,
        "top": -2,
        "on": True,
        "unit": "celsius",
        "kind": "fixed",
        "page": 7,
        "tags": [],
        "pair": [1, 1],
        "many": [True] * MAX_ITEMS,
        "where": {"lat": 1.0},
        "maybe": "hi there",
        "either": 1,
        "both": {"a": True, "b": 1},
        "at": {},
    }
    assert sample_arguments(schema, "hi there") == arguments  # the same every time
    assert sample_arguments({"type": "object", "properties": {"c": {"type": "string"}},
                             "required": ["c"]}, "ab")["c"] == "ab"  # fmt: skip
    assert sample_arguments({"type": "object", "properties": {"c": {"minLength": 2,
                             "type": "string"}}, "required": ["c"]}, "")["c"] == "demo"  # fmt: skip


def test_a_schema_without_shape_takes_the_words_and_nothing_else_is_invented() -> None:
    assert sample_arguments({"type": "object"}, "find it") == {"input": "find it"}
    assert sample_arguments({}, "x" * 500) == {"input": "x" * 200}
    # Properties but none required: the least object that fits.
    assert sample_arguments({"type": "object", "properties": {"q": {"type": "string"}}}, "x") == {}
    assert sample_arguments({"type": "object", "required": ["q"]}, "x") == {"q": None}


@pytest.mark.timeout(10)
def test_hostile_schemas_are_bounded() -> None:
    cycle = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
    assert sample_arguments(cycle, "x") == {}
    # Ten required properties, each naming a definition with ten more, 16 deep:
    # 10**16 values if walked; the walk stops at its budget instead.
    fan = {
        "type": "object",
        "$defs": {
            "n": {
                "type": "object",
                "properties": {f"p{i}": {"$ref": "#/$defs/n"} for i in range(10)},
                "required": [f"p{i}" for i in range(10)],
            }
        },
        "properties": {f"p{i}": {"$ref": "#/$defs/n"} for i in range(10)},
        "required": [f"p{i}" for i in range(10)],
    }
    arguments = sample_arguments(fan, "x")
    assert set(arguments) == {f"p{i}" for i in range(10)}
    assert len(json.dumps(arguments)) < 100_000
    # References outside the schema, and junk where a schema belongs, give null.
    odd = {
        "type": "object",
        "properties": {"a": {"$ref": "https://example.com/s.json"}, "b": 5, "c": {"$ref": 1}},
        "required": ["a", "b", "c", 7],
    }
    assert sample_arguments(odd, "x") == {"a": None, "b": None, "c": None}


def result_message(call: ToolCallBlock, text: str, *, is_error: bool = False) -> Message:
    return llmrt.tool_result_message(call.id, text, is_error=is_error, tool=call.name)


async def test_an_agent_loop_ends_with_a_text_answer_after_the_tool_result() -> None:
    messages: tuple[Message, ...] = (llmrt.user_message("Weather in Paris?"),)
    calls = 0
    with trio.fail_after(10):
        while True:  # what an agent does: call, run the tools asked for, send results back
            assembler = await turn(messages, (WEATHER,))
            calls += 1
            messages += (assembler.message(),)
            asked = [b for b in assembler.blocks() if isinstance(b, ToolCallBlock)]
            if not asked:
                break
            assert calls < 5, "the demo called a tool again after its result"
            messages += tuple(result_message(call, "18 degrees and sunny") for call in asked)
    assert calls == 2
    assert isinstance(assembler.finish, FinishStop)
    reasoning, text = assembler.blocks()
    assert isinstance(reasoning, ReasoningBlock)
    assert reasoning.text.startswith("The tool get_weather answered with 4 words.")
    assert isinstance(text, TextBlock)
    assert text.text.startswith('The tool get_weather answered: "18 degrees and sunny". ')
    usage = assembler.usage
    # Input counts the words of every text: the prompt, the first answer, the tool result.
    first_answer = messages[1].content[1]
    assert isinstance(first_answer, TextBlock)
    assert usage is not None and usage.input_tokens == 3 + len(first_answer.text.split()) + 4


async def test_a_failed_tool_is_answered_as_a_failure() -> None:
    first = await turn((llmrt.user_message("Weather in Atlantis?"),), (WEATHER,))
    (call,) = [b for b in first.blocks() if isinstance(b, ToolCallBlock)]
    messages = (
        llmrt.user_message("Weather in Atlantis?"),
        first.message(),
        result_message(call, "no such city", is_error=True),
    )
    second = await turn(messages, (WEATHER,))
    assert isinstance(second.finish, FinishStop)
    text = second.blocks()[-1]
    assert isinstance(text, TextBlock)
    assert text.text.startswith('The tool get_weather failed: "no such city". ')


@pytest.mark.parametrize(
    ("prompt", "words"), [("hello", "1 word."), ("hello there", "2 words."), ("", "0 words.")]
)
async def test_the_word_count_has_the_right_plural(prompt: str, words: str) -> None:
    assembler = await turn((llmrt.user_message(prompt),), ())
    reasoning = assembler.blocks()[0]
    assert isinstance(reasoning, ReasoningBlock)
    assert reasoning.text.startswith(f"The user wrote {words} ")


async def test_every_tool_call_fragment_joins_to_the_arguments() -> None:
    messages = (llmrt.user_message("Weather in a city with a long name, please"),)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        options = GenerateOptions(
            provider="demo", model="demo-1", messages=messages, tools=(WEATHER,)
        )
        chunks = await collect(rt.stream(options))
    fragments = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert len(fragments) > 1
    joined = "".join(f.arguments_delta for f in fragments)
    assert json.loads(joined) == {"city": "Weather in a city with a long name, please"}
