"""Misuse of `llmrt.aio` is refused at once, with a stable code and the fix."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import trio

import llmrt
import llmrt.aio
from llmrt import Finish, FinishStop, GenerateOptions, StreamChunk, TextDelta, user_message

pytestmark = pytest.mark.timeout(30)


def _options() -> GenerateOptions:
    return GenerateOptions(provider="p", model="m", messages=(user_message("hi"),))


class Slow(llmrt.Adapter):
    """One text chunk, then a wait the test ends by aborting."""

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        yield TextDelta(index=0, text="hi")
        await trio.sleep_forever()
        yield Finish(reason=FinishStop())  # pragma: no cover


async def test_the_asyncio_api_under_trio_is_refused_and_points_at_the_trio_api() -> None:
    with pytest.raises(llmrt.aio.NotInAsyncioError) as refused:
        async with llmrt.aio.open_runtime():
            pass  # pragma: no cover
    assert refused.value.code == "NOT_IN_ASYNCIO"
    assert "llmrt.open_runtime()" in str(refused.value)
    assert isinstance(refused.value, RuntimeError)


def test_the_asyncio_api_outside_any_loop_is_refused() -> None:
    opened = llmrt.aio.open_runtime()
    with pytest.raises(llmrt.aio.NotInAsyncioError, match="running asyncio loop"):
        opened.__aenter__().send(None)


def test_the_trio_api_under_asyncio_points_at_llmrt_aio() -> None:
    async def main() -> None:
        async with llmrt.open_runtime():
            pass  # pragma: no cover

    with pytest.raises(llmrt.NotInTrioError, match=r"llmrt\.aio"):
        asyncio.run(main())


def test_one_call_read_by_two_tasks_at_once_is_refused() -> None:
    async def main() -> tuple[BaseException | None, list[StreamChunk]]:
        async with llmrt.aio.open_runtime() as rt:
            await rt.register_adapter(["p"], Slow())
            async with rt.stream(_options()) as call:
                first = await call.__anext__()
                reader = asyncio.create_task(call.__anext__())
                await asyncio.sleep(0)  # the reader now waits on the call
                error: BaseException | None = None
                try:
                    await call.__anext__()
                except llmrt.aio.ConcurrentIterationError as exc:
                    error = exc
                call.abort("done")
                rest = [await reader]
                rest.extend([chunk async for chunk in call])
        return error, [first, *rest]

    error, chunks = asyncio.run(main())
    assert isinstance(error, llmrt.aio.ConcurrentIterationError)
    assert error.code == "CONCURRENT_ITERATION"
    # The refused reader took nothing: the call still ends with its one finish.
    assert [type(c) for c in chunks] == [TextDelta, Finish]


def test_iterating_without_async_with_is_refused_as_in_trio() -> None:
    async def main() -> None:
        async with llmrt.aio.open_runtime() as rt:
            await rt.register_adapter(["p"], Slow())
            with pytest.raises(llmrt.CallNotEnteredError, match="async with"):
                async for _ in rt.stream(_options()):
                    pass  # pragma: no cover

    asyncio.run(main())


def test_a_trio_abort_signal_is_refused_with_the_asyncio_one_named() -> None:
    async def main() -> None:
        async with llmrt.aio.open_runtime() as rt:
            with pytest.raises(TypeError, match=r"llmrt\.aio\.AbortSignal"):
                rt.stream(_options(), signal=llmrt.AbortController().signal)  # type: ignore[arg-type]

    asyncio.run(main())


def test_bad_arguments_raise_as_the_trio_runtime_raises_them() -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="channel_size"):
            async with llmrt.aio.open_runtime(channel_size=0):
                pass  # pragma: no cover
        with pytest.raises(ValueError, match="trio_host"):
            async with llmrt.aio.open_runtime(trio_host="process"):  # type: ignore[arg-type]
                pass  # pragma: no cover

    asyncio.run(main())


def test_several_runtimes_in_one_loop_each_have_their_own_trio_run() -> None:
    from llmrt.adapters.demo import DemoAdapter

    async def one(name: str, host: llmrt.aio.HostMode | None) -> tuple[str, str, int]:
        async with llmrt.aio.open_runtime(trio_host=host) as rt:
            await rt.register_adapter(["demo"], DemoAdapter())
            request = GenerateOptions(
                provider="demo", model="demo-1", messages=(user_message(name),)
            )
            done = await asyncio.gather(*(rt.complete(request) for _ in range(5)))
            token = await rt._host.run(_token)
            quoted = sum(1 for d in done if name in d.text)
            return rt.trio_host, token, quoted + rt.statistics().calls_started

    async def main() -> list[tuple[str, str, int]]:
        first = await asyncio.gather(one("a", None), one("b", None), one("c", "thread"))
        # The loop hosts one guest run at a time: asking for a second one explicitly is refused.
        async with llmrt.aio.open_runtime(trio_host="guest"):
            with pytest.raises(RuntimeError, match="trio_host='thread'"):
                async with llmrt.aio.open_runtime(trio_host="guest"):
                    pass  # pragma: no cover
        return first

    results = asyncio.run(main())
    assert [count for _, _, count in results] == [10, 10, 10]
    assert sorted(host for host, _, _ in results) == ["guest", "thread", "thread"]
    assert len({token for _, token, _ in results}) == 3  # three trio runs


async def _token() -> str:
    return repr(trio.lowlevel.current_trio_token())
