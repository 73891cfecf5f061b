"""Deep freezing: a request's free-form JSON (tool schemas, replay state) cannot be changed."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

import llmrt
from llmrt import (
    FinishStop,
    GenerateOptions,
    ModelSource,
    ReplayEnvelope,
    StreamChunk,
    ToolSchema,
    user_message,
)
from llmrt._freeze import FrozenDict, FrozenList, deep_freeze
from llmrt.adapters.scripted import ScriptedAdapter, text_script

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Oslo", "Lima"]}},
    "required": ["city"],
}


def schema() -> dict[str, Any]:
    return json.loads(json.dumps(SCHEMA))


def mutations(params: Any) -> list[Any]:
    """Every way a caller might try to change a schema in place."""
    return [
        lambda: params.__setitem__("x", 1),
        lambda: params.__delitem__("type"),
        lambda: params.update(x=1),
        lambda: params.pop("type"),
        lambda: params.popitem(),
        lambda: params.setdefault("x", 1),
        lambda: params.clear(),
        lambda: params["properties"].__setitem__("y", {}),
        lambda: params["properties"]["city"].__setitem__("type", "integer"),
        lambda: params["required"].append("x"),
        lambda: params["properties"]["city"]["enum"].append("Rome"),
    ]


def test_a_tool_schema_is_deep_frozen() -> None:
    tool = ToolSchema(name="weather", description="", parameters=schema())
    for mutate in mutations(tool.parameters):
        with pytest.raises(TypeError):
            mutate()
        tool_after = tool.parameters
        assert tool_after == SCHEMA  # unchanged, whatever was tried


def test_the_callers_dict_is_not_the_frozen_one() -> None:
    mine = schema()
    tool = ToolSchema(name="weather", description="", parameters=mine)
    mine["properties"]["city"]["type"] = "integer"  # the caller's own object stays theirs
    assert tool.parameters["properties"]["city"]["type"] == "string"


def test_freezing_changes_nothing_on_the_wire() -> None:
    tool = ToolSchema(name="weather", description="d", parameters=schema())
    encoded = llmrt.encode(tool)
    assert json.loads(encoded)["parameters"] == SCHEMA
    decoded = msgspec.json.decode(encoded, type=ToolSchema)
    assert type(decoded.parameters) is FrozenDict
    assert decoded == tool
    assert json.dumps(tool.parameters, sort_keys=True) == json.dumps(SCHEMA, sort_keys=True)
    assert isinstance(tool.parameters, dict)
    assert type(decoded.parameters["required"]) is FrozenList


def test_replay_state_is_deep_frozen_when_built_and_when_decoded() -> None:
    envelope = ReplayEnvelope(response={"id": "r1", "items": [1, 2]}, blocks=[{"sig": "s"}, None])
    assert envelope.response == {"id": "r1", "items": [1, 2]}
    with pytest.raises(TypeError):
        envelope.response["id"] = "other"
    with pytest.raises(TypeError):
        envelope.blocks[0]["sig"] = "forged"  # type: ignore[index]
    source = ModelSource(provider="p", model="m", replay_state=envelope)
    again = msgspec.json.decode(llmrt.encode(source), type=ModelSource)
    assert again == source
    assert again.replay_state is not None
    with pytest.raises(TypeError):
        again.replay_state.response["id"] = "other"


def test_copies_and_pickles_stay_frozen_and_equal() -> None:
    frozen = deep_freeze({"a": [{"b": 1}], "c": "d"})
    assert copy.copy(frozen) is frozen
    assert copy.deepcopy(frozen) is frozen
    back = pickle.loads(pickle.dumps(frozen))
    assert back == frozen
    assert type(back) is FrozenDict
    with pytest.raises(TypeError):
        back["a"][0]["b"] = 2
    assert deep_freeze(frozen) is frozen  # freezing twice costs nothing


async def test_a_middleware_cannot_change_the_callers_tools() -> None:
    refused: list[BaseException] = []

    async def add_a_key(
        request: GenerateOptions, nxt: llmrt.actors.Next
    ) -> AsyncIterator[StreamChunk]:
        assert request.tools is not None
        try:
            request.tools[0].parameters["additionalProperties"] = False
        except TypeError as exc:
            refused.append(exc)
        async for chunk in nxt(request):
            yield chunk

    request = GenerateOptions(
        provider="p",
        model="m",
        messages=(user_message("hi"),),
        tools=(ToolSchema(name="weather", description="", parameters=schema()),),
    )
    async with llmrt.open_runtime() as rt:
        rt.use(add_a_key)
        adapter = ScriptedAdapter(text_script(["ok"]))
        await rt.register_adapter(["p"], adapter)
        assembler = llmrt.BlockAssembler()
        async with rt.stream(request) as call:
            async for chunk in call:
                assembler.push(chunk)
    assert len(refused) == 1
    assert assembler.finish == FinishStop()
    assert request.tools is not None and request.tools[0].parameters == SCHEMA
    assert adapter.requests[0].tools == request.tools
