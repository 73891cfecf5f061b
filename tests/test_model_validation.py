"""A request is checked against its exact model before any I/O: context window, modalities."""

from __future__ import annotations

import msgspec
import pytest

import llmrt
from llmrt import (
    ErrorCode,
    FinishError,
    GenerateOptions,
    ImageBlock,
    LlmCallConfig,
    LlmError,
    Message,
    ResolvedModelInfo,
    TextBlock,
    ToolResultBlock,
    tool_result_message,
    user_message,
)
from llmrt.adapter import ModelContext
from llmrt.adapters.scripted import ScriptedAdapter, text_script
from llmrt.images import image_placeholder

PNG = ImageBlock(media_type="image/png", data="iVBORw0KGgo=")
OTHER_PNG = ImageBlock(media_type="image/png", data="iVBORw0KGgoAAAA=")
JPEG = ImageBlock(media_type="image/jpeg", url="https://example.com/cat.jpg")


def info(
    *, window: int | None = None, default: int | None = None, **kw: object
) -> ResolvedModelInfo:
    return ResolvedModelInfo(
        provider="p",
        id="m",
        name="m",
        context=None if window is None else ModelContext(context_window=window),
        default_max_tokens=default,
        **kw,  # type: ignore[arg-type]
    )


def request(*messages: Message, max_tokens: int | None = None) -> GenerateOptions:
    return GenerateOptions(
        provider="p",
        model="m",
        messages=messages or (user_message("hi"),),
        max_tokens=max_tokens,
    )


async def run(adapter: ScriptedAdapter, options: GenerateOptions) -> llmrt.BlockAssembler:
    assembler = llmrt.BlockAssembler()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(options) as call:
            async for chunk in call:
                assembler.push(chunk)
    return assembler


async def test_an_output_cap_beyond_the_context_window_is_refused_before_io() -> None:
    adapter = ScriptedAdapter(text_script(["never"]), model_info={"m": info(window=100)})
    assembler = await run(adapter, request(max_tokens=10_000))
    finish = assembler.finish
    assert isinstance(finish, FinishError)
    assert finish.failure.code == ErrorCode.CONTEXT_WINDOW_EXCEEDED
    assert "10000" in finish.failure.message and "100-token" in finish.failure.message
    assert adapter.requests == []  # refused before the adapter saw it


async def test_an_output_cap_within_the_window_passes() -> None:
    adapter = ScriptedAdapter(text_script(["ok"]), model_info={"m": info(window=100)})
    assembler = await run(adapter, request(max_tokens=99))
    assert assembler.finish == llmrt.FinishStop()
    assert adapter.requests[0].max_tokens == 99


async def test_a_materialized_default_is_checked_too() -> None:
    adapter = ScriptedAdapter(text_script(["x"]), model_info={"m": info(window=100, default=500)})
    assembler = await run(adapter, request())
    assert isinstance(assembler.finish, FinishError)
    assert assembler.finish.failure.code == ErrorCode.CONTEXT_WINDOW_EXCEEDED
    assert "default output cap" in assembler.finish.failure.message


async def test_prepared_calls_and_resolve_call_config_check_the_window() -> None:
    adapter = ScriptedAdapter(text_script(["x"]), model_info={"m": info(window=100)})
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        config = LlmCallConfig(provider="p", model="m", max_tokens=100)
        with pytest.raises(LlmError) as caught:
            await rt.prepare_call(config)
        assert caught.value.code == ErrorCode.CONTEXT_WINDOW_EXCEEDED
        with pytest.raises(LlmError):
            await rt.resolve_call_config(config)


def conversation() -> tuple[Message, ...]:
    return (
        user_message((TextBlock(text="look"), PNG, OTHER_PNG), id="u1"),
        tool_result_message("c1", (TextBlock(text="18 C"), JPEG), tool="weather", id="t1"),
    )


async def test_a_text_only_model_gets_per_image_placeholders_not_images() -> None:
    adapter = ScriptedAdapter(
        text_script(["ok"]), model_info={"m": info(input_modalities=("text",))}
    )
    options = request(*conversation())
    before = msgspec.json.encode(options)
    await run(adapter, options)
    sent = adapter.requests[0]
    user, tool = sent.messages
    assert user.content == (
        TextBlock(text="look"),
        TextBlock(text=image_placeholder(PNG)),
        TextBlock(text=image_placeholder(OTHER_PNG)),
    )
    nested = tool.content[0]
    assert isinstance(nested, ToolResultBlock)
    assert nested.content == (TextBlock(text="18 C"), TextBlock(text=image_placeholder(JPEG)))
    # Two images of one type get different placeholders; the same image the same one.
    assert image_placeholder(PNG) != image_placeholder(OTHER_PNG)
    assert image_placeholder(PNG) == image_placeholder(
        ImageBlock(media_type="image/png", data=PNG.data)
    )
    assert "image/png" in image_placeholder(PNG)
    # The caller's request, and so its history, is untouched.
    assert msgspec.json.encode(options) == before


async def test_a_prepared_call_to_a_text_only_model_projects_images_too() -> None:
    adapter = ScriptedAdapter(
        text_script(["ok"]), model_info={"m": info(input_modalities=("text",))}
    )
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        prepared = await rt.prepare_call(LlmCallConfig(provider="p", model="m"))
        async with prepared.stream(request(*conversation())) as call:
            async for _ in call:
                pass
    assert all(type(b) is TextBlock for b in adapter.requests[0].messages[0].content)


@pytest.mark.parametrize("modalities", [None, ("text", "image")])
async def test_image_models_and_unknown_models_get_the_images(
    modalities: tuple[str, ...] | None,
) -> None:
    adapter = ScriptedAdapter(
        text_script(["ok"]), model_info={"m": info(input_modalities=modalities)}
    )
    options = request(*conversation())
    await run(adapter, options)
    assert adapter.requests[0].messages == options.messages
