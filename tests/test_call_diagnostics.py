"""What a call keeps for diagnostics: the exact exception its adapter raised."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import llmrt
from llmrt import ErrorCode, FinishError, GenerateOptions, LlmError, StreamChunk, user_message
from llmrt.adapters.scripted import Raise, ScriptedAdapter, text_script


class QuotaExceeded(Exception):
    def __init__(self, remaining: int) -> None:
        super().__init__(f"{remaining} left")
        self.remaining = remaining


def request() -> GenerateOptions:
    return GenerateOptions(provider="p", model="m", messages=(user_message("hi"),))


async def spy(request: GenerateOptions, nxt: llmrt.actors.Next) -> AsyncIterator[StreamChunk]:
    async for chunk in nxt(request):
        yield chunk


@pytest.mark.parametrize("middleware", [False, True], ids=["direct", "through-middleware"])
async def test_the_adapters_exception_is_kept_as_raised(middleware: bool) -> None:
    exc = QuotaExceeded(3)
    async with llmrt.open_runtime() as rt:
        if middleware:
            rt.use(spy)
        await rt.register_adapter(["p"], ScriptedAdapter([Raise(exc)]))
        async with rt.stream(request()) as call:
            chunks = [chunk async for chunk in call]
    finish = chunks[-1]
    assert isinstance(finish, llmrt.Finish) and isinstance(finish.reason, FinishError)
    assert finish.reason.failure.code == ErrorCode.INTERNAL
    assert call.adapter_error is exc
    assert call.adapter_error.__traceback__ is not None  # where it was raised, kept


async def test_an_exception_from_resolve_model_is_kept() -> None:
    exc = LlmError(ErrorCode.AUTH, "key revoked")

    def resolve(provider: str, model: str) -> llmrt.ResolvedModelInfo:
        raise exc

    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["x"]), model_info=resolve))
        async with rt.stream(request()) as call:
            chunks = [chunk async for chunk in call]
    assert isinstance(chunks[-1], llmrt.Finish)
    assert isinstance(chunks[-1].reason, FinishError)
    assert chunks[-1].reason.failure.code == ErrorCode.AUTH
    assert call.adapter_error is exc


async def test_no_exception_no_adapter_error() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["ok"])))
        async with rt.stream(request()) as call:
            assert call.adapter_error is None
            [chunk async for chunk in call]
    assert call.adapter_error is None
    # Refusals by the runtime itself are not the adapter's exceptions.
    async with llmrt.open_runtime() as rt:
        async with rt.stream(request()) as call:
            [chunk async for chunk in call]
    assert call.adapter_error is None
