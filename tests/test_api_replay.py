"""A provider's replay state through a client's own history, end to end.

A recorded provider stream (``tests/wire``) is served by the local upstream
to llmrt's adapter; the runtime's chunks go through the API's encoder to the
official SDK, as a client would read them; the client sends the answer back
in its next request's history; the decoder and the adapter put the
provider's own state on the wire again. Also: failures before any output
become the API's HTTP error answer, as the handler will send it.
"""

from __future__ import annotations

import pathlib
from typing import Any

import msgspec
from _api_support import anthropic_client, encode_all, openai_client, sse_response

import llmrt
import llmrt.adapters.demo
from llmrt import ErrorCode, Finish, FinishError, StreamChunk
from llmrt.actors.gateway.api import decode_chat, decode_messages, decode_responses, openai_error
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.adapters.openai_responses import OpenAIResponsesAdapter
from llmrt.testing import SSEScript, anthropic_events, open_upstream, openai_events, sse_data

WIRE = pathlib.Path(__file__).parent / "wire"
SIGNATURE = (
    "bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB1L9RIvNEVUxTveLruM0rfj0WAK1jHDhaXXzOI8d4VFmtvBtMkA/"
    "+SNV1tdpcY4BAEl9l2w/j4kSUt26phkV9mGCE/tCLl4r019GWp0RqhrWACeY2thHbFiEbZamq3/KcXlLZxQjFAjRzRNj"
    "AetkcvWBor8df9ikvBioJyjgcieced7mprp4wsNvbb1EKJk753ngVAde2uSronrBZxat0PbZ1humPrSfaC5lovAOaHvNM"
    "k5ubjlI6i++J1HhgjF7PbKNYdY9tJ+bPRScpN5d6dI/Yg5HbZ5ztp9x78fAF7oeb7q13mUz1czQewXtYu/frNNJxHJk8H"
    "ZdrEosxiNwYKa"
)
ENV = {"TEST_KEY": "sk-test-0123456789"}


async def run(rt: llmrt.LlmRuntime, options: llmrt.GenerateOptions) -> list[StreamChunk]:
    async with rt.stream(options) as call:
        return [chunk async for chunk in call]


async def test_an_anthropic_signature_goes_back_to_anthropic() -> None:
    scripts = [
        SSEScript.from_transcript(WIRE / "anthropic_thinking_tool.sse"),
        SSEScript(events=anthropic_events(["It is sunny."])),
    ]
    question = {"role": "user", "content": "Weather in Paris?"}
    first = {
        "model": "anthropic/claude-sonnet-4-5",
        "max_tokens": 4000,
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": [question],
    }
    async with open_upstream(scripts) as upstream:
        adapter = AnthropicAdapter(base_url=upstream.base_url, api_key_env="TEST_KEY", environ=ENV)
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["anthropic"], adapter)
            call = decode_messages(msgspec.json.encode(first))
            sent = encode_all(call.encoder(), await run(rt, call.options))
            client = anthropic_client(lambda request: sse_response(sent))
            with client.messages.stream(**{k: v for k, v in first.items() if k != "stream"}) as s:
                answer = s.get_final_message()
            assistant = [block.model_dump(exclude_none=True) for block in answer.content]
            tool_use = assistant[-1]
            result = {"type": "tool_result", "tool_use_id": tool_use["id"], "content": "18 C"}
            second = {**first, "messages": [question, {"role": "assistant", "content": assistant},
                                            {"role": "user", "content": [result]}]}  # fmt: skip
            call = decode_messages(msgspec.json.encode(second))
            await run(rt, call.options)
    assert answer.content[0].type == "thinking"
    assert answer.content[0].signature == SIGNATURE  # the provider's own, as Anthropic sends it
    replayed = upstream.requests[1].json["messages"][1]["content"]
    assert replayed[0] == {
        "type": "thinking",
        "thinking": answer.content[0].thinking,
        "signature": SIGNATURE,
    }
    assert replayed[-1]["type"] == "tool_use" and replayed[-1]["id"] == tool_use["id"]


async def test_encrypted_reasoning_goes_back_to_the_responses_api() -> None:
    done = {"type": "response.completed", "response": {"id": "r2", "status": "completed"}}
    scripts = [
        SSEScript.from_transcript(WIRE / "written" / "responses_reasoning_text.sse"),
        SSEScript(events=[sse_data(done)]),
    ]
    first = {"model": "openai-responses/o4-mini", "stream": True, "input": "Think, then answer."}
    async with open_upstream(scripts, script_paths={"/v1/responses"}) as upstream:
        adapter = OpenAIResponsesAdapter(
            base_url=upstream.base_url + "/v1", api_key_env="TEST_KEY", environ=ENV
        )
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["openai-responses"], adapter)
            call = decode_responses(msgspec.json.encode(first))
            sent = encode_all(call.encoder(), await run(rt, call.options))
            client = openai_client(lambda request: sse_response(sent))
            with client.responses.stream(model=first["model"], input=first["input"]) as s:
                answer = s.get_final_response()
            history: list[Any] = [{"role": "user", "content": first["input"]}]
            history += [item.model_dump(exclude_none=True) for item in answer.output]
            history.append({"role": "user", "content": "And then?"})
            call = decode_responses(msgspec.json.encode({**first, "input": history}))
            await run(rt, call.options)
    sent_items = upstream.requests[1].json["input"]
    reasoning = [item for item in sent_items if item["type"] == "reasoning"]
    assert len(reasoning) == 1
    # The provider's own item id and encrypted content, whatever the client saw.
    assert reasoning[0]["id"] == "rs_6a1f0c2e11"
    assert reasoning[0]["encrypted_content"] == "gAAAAABpENCRYPTEDreasoningBLOB_0123=="


async def test_chat_reasoning_content_goes_back_to_deepseek_on_a_tool_turn() -> None:
    request = {
        "model": "deepseek/deepseek-chat",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "I should call get_weather.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
        ],
    }
    async with open_upstream(SSEScript(events=openai_events(["ok"]))) as upstream:
        adapter = OpenAIChatAdapter(
            preset="deepseek-official",
            base_url=upstream.base_url,
            api_key_env="TEST_KEY",
            environ=ENV,
        )
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["deepseek"], adapter)
            await run(rt, decode_chat(msgspec.json.encode(request)).options)
    assistant = upstream.requests[0].json["messages"][1]
    assert assistant["reasoning_content"] == "I should call get_weather."


async def test_a_failure_before_any_output_is_the_apis_http_error() -> None:
    # What the handler sends when the first chunk is already an error finish.
    async with llmrt.open_runtime() as rt:
        unknown = decode_chat(
            b'{"model": "nowhere/m", "messages": [{"role": "user", "content": "x"}]}'
        )
        [finish] = await run(rt, unknown.options)
        assert isinstance(finish, Finish) and isinstance(finish.reason, FinishError)
        assert finish.reason.failure.code == ErrorCode.NO_ADAPTER
        answer = unknown.error(finish.reason.failure)
        assert answer.status == 404
        assert msgspec.json.decode(answer.body)["error"]["code"] == "model_not_found"
        # A feature the route's adapter lacks: the demo has no structured output.
        body = {"model": "demo/demo-1", "messages": [{"role": "user", "content": "x"}],
                "response_format": {"type": "json_object"}}  # fmt: skip
        await rt.register_adapter(["demo"], llmrt.adapters.demo.DemoAdapter())
        refused = decode_chat(msgspec.json.encode(body))
        [finish] = await run(rt, refused.options)
        assert isinstance(finish, Finish) and isinstance(finish.reason, FinishError)
        answer = openai_error(finish.reason.failure)
        assert answer.status == 400
        assert "json-object" in msgspec.json.decode(answer.body)["error"]["message"]
