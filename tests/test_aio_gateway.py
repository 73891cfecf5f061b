"""`llmrt.aio.open_gateway_client`: the gateway's client from asyncio, the same calls."""

from __future__ import annotations

import asyncio
import threading
from functools import partial

import pytest
import trio

import llmrt
import llmrt.aio
from llmrt import Finish, FinishStop, GenerateOptions, TextDelta, user_message
from llmrt.actors.gateway import Limits, serve_gateway
from llmrt.adapters.demo import DemoAdapter

pytestmark = pytest.mark.timeout(60)

REQUEST = GenerateOptions(provider="demo", model="demo-1", messages=(user_message("Hi"),))


def _serve_gateway_in_a_thread() -> tuple[str, threading.Thread, list[object]]:
    """A gateway over the demo adapter in a trio run on its own thread."""
    ready = threading.Event()
    box: list[object] = []

    async def main() -> None:
        async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
            await rt.register_adapter(["demo"], DemoAdapter(tokens_per_second=200))
            server = await nursery.start(
                partial(serve_gateway, rt, limits=Limits(shutdown_grace=0.2))
            )
            stop = trio.Event()
            box.extend([server.url, trio.lowlevel.current_trio_token(), stop])
            ready.set()
            await stop.wait()
            nursery.cancel_scope.cancel()

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    assert ready.wait(30)
    return str(box[0]), thread, box


def test_the_gateway_client_streams_completes_and_aborts_from_asyncio() -> None:
    url, thread, box = _serve_gateway_in_a_thread()

    async def main() -> tuple[list[object], str, object, list[str]]:
        async with llmrt.aio.open_gateway_client(url) as client:
            providers = [p.id for p in await client.list_providers()]
            async with client.stream(REQUEST) as call:
                chunks = [chunk async for chunk in call]
            done = await client.complete(REQUEST)

            async def consume() -> None:
                async with client.stream(REQUEST) as call:
                    async for chunk in call:
                        if type(chunk) is TextDelta:
                            asyncio.current_task().cancel()  # type: ignore[union-attr]

            with pytest.raises(asyncio.CancelledError):
                await asyncio.create_task(consume())
            stats = await client.stats()
        return chunks, done.text, stats, providers

    try:
        chunks, text, stats, providers = asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        token, stop = box[1], box[2]
        trio.from_thread.run_sync(stop.set, trio_token=token)  # type: ignore[arg-type,attr-defined]
        thread.join(10)
    finishes = [c for c in chunks if type(c) is Finish]
    assert len(finishes) == 1 and type(finishes[0].reason) is FinishStop
    assert "Hi" in text
    assert providers == ["demo"]
    # The cancelled consumer's call was aborted at the gateway, not left running.
    assert stats.calls_finished.get("aborted") == 1  # type: ignore[attr-defined]
    assert stats.calls_in_flight == 0  # type: ignore[attr-defined]
