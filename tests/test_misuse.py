"""Misuse fails fast, with the right form in the message (issue 22, item 4).

A call iterated without ``async with`` used to wait forever; the trio API
awaited from asyncio failed with trio's internal ``AttributeError``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest
import trio
from conftest import make_options

import llmrt
from llmrt import CallNotEnteredError, NotInTrioError
from llmrt.adapters.scripted import ScriptedAdapter, text_script

STREAM_FORM = "async with rt.stream(request) as call: async for chunk in call"


async def test_iterating_a_call_without_async_with_raises_at_once(
    runtime: llmrt.LlmRuntime,
) -> None:
    adapter = ScriptedAdapter(text_script("ok"))
    await runtime.register_adapter(["p"], adapter)
    # A bound far above "at once": before the fix this waited forever.
    with trio.fail_after(5):
        with pytest.raises(CallNotEnteredError) as info:
            async for _ in runtime.stream(make_options()):
                pass
        assert isinstance(info.value, RuntimeError)
        assert STREAM_FORM in str(info.value)
        call = runtime.stream(make_options())
        with pytest.raises(CallNotEnteredError):
            await call.__anext__()  # by hand, without the block
        with pytest.raises(CallNotEnteredError) as retry:
            async for _ in runtime.stream_with_retry(make_options()):
                pass
        assert "async with rt.stream_with_retry(request) as call" in str(retry.value)
    assert adapter.requests == []
    assert runtime.statistics().calls_started == 0
    # Entered, the same call streams as always.
    async with call:
        chunks = [chunk async for chunk in call]
    assert type(chunks[-1]) is llmrt.Finish


def test_open_runtime_under_asyncio_points_at_llmrt_aio() -> None:
    async def main() -> None:
        async with llmrt.open_runtime():
            raise AssertionError("unreachable: the runtime needs trio")

    with pytest.raises(NotInTrioError) as info:
        asyncio.run(main())
    message = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert "llmrt.open_runtime()" in message and "asyncio" in message
    assert "llmrt.aio" in message
    assert "RunContext" not in message and info.value.__cause__ is None


async def test_entering_a_call_from_asyncio_points_at_llmrt_aio(runtime: llmrt.LlmRuntime) -> None:
    adapter = ScriptedAdapter(text_script("ok"))
    await runtime.register_adapter(["p"], adapter)
    call = runtime.stream(make_options())

    async def enter() -> None:
        async with call:
            raise AssertionError("unreachable: the call needs trio")

    def in_asyncio() -> BaseException | None:
        try:
            asyncio.run(enter())
        except BaseException as exc:
            return exc
        return None

    with trio.fail_after(10):
        caught = await trio.to_thread.run_sync(in_asyncio)
    assert isinstance(caught, NotInTrioError), caught
    assert "rt.stream()" in str(caught) and "llmrt.aio" in str(caught)
    assert adapter.requests == [] and runtime.statistics().calls_started == 0


def test_the_readme_example_under_asyncio_run_names_the_fix_in_its_last_line() -> None:
    """What a new user sees: the traceback's last line, in a fresh process."""
    program = textwrap.dedent(
        """
        import asyncio
        import llmrt

        async def main():
            async with llmrt.open_runtime() as rt:
                pass

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("llmrt.NotInTrioError: "), done.stderr
    assert "llmrt.aio" in last
    assert "AttributeError" not in done.stderr
