"""Ctrl-C in ``llmrt call`` at every moment, with the CLI as a real process (issue 10, finding 3).

The upstream or gateway runs in the test; the CLI gets a real SIGINT. The
``fail_after`` bounds are real seconds, far above what a working abort
takes: before the fix the call ignored Ctrl-C until its idle timeout (300 s).
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import attrs
import trio
from _cli_process import kill, spawn_cli

import llmrt
from llmrt import GenerateOptions, StreamChunk
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.adapters.demo import DemoAdapter
from llmrt.adapters.scripted import ScriptedAdapter
from llmrt.testing import SSEScript, open_upstream, openai_events

#: Far above any working abort; well below the idle timeout a broken one waits for.
BOUND = 30


def stalled_config(tmp_path: pathlib.Path, base_url: str) -> pathlib.Path:
    path = tmp_path / "stalled.toml"
    path.write_text(
        '[[provider]]\nroute = "stalled"\nadapter = "openai_chat"\n'
        f'preset = "openai-compatible"\nbase_url = "{base_url}"\n'
    )
    return path


async def test_ctrl_c_before_the_first_chunk_aborts_the_call(tmp_path: pathlib.Path) -> None:
    # The upstream takes the request and never sends a byte of the response.
    stalled = SSEScript(events=openai_events(["never"]), first_byte_delay=math.inf)
    async with open_upstream(stalled) as upstream:
        config = stalled_config(tmp_path, upstream.base_url)
        cli = await spawn_cli(
            "call", "hi", "--config", str(config), "-p", "stalled", "-m", "m", "--no-color"
        )
        try:
            with trio.fail_after(BOUND):
                await upstream.wait_request()  # the call now waits for its first chunk
                cli.interrupt()
                code, out, err = await cli.finish()
                closed = await upstream.wait_connection_closed()
        finally:
            await kill(cli)
    assert code == 130, (out, err)
    assert "^C: aborting the call to stalled/m (waiting for the first chunk)" in err
    assert "aborted: the call was aborted (abort -> finish" in err
    assert closed.closed_by == "client"


@attrs.define(eq=False)
class _SlowToClose(ScriptedAdapter):
    """Never answers, and takes seconds to close once aborted (a stuck upstream)."""

    started: trio.Event = attrs.field(factory=trio.Event, init=False)

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        self.started.set()
        try:
            await trio.sleep_forever()
        finally:
            # Twice the CLI's 0.5 s abort bound: the call's finish cannot come
            # before this close does, so the CLI's bound always runs out first.
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
        for chunk in ():  # never reached: makes this an async generator
            yield chunk


@asynccontextmanager
async def gateway_of(adapter: llmrt.Adapter) -> AsyncIterator[GatewayServer]:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with trio.open_nursery() as nursery:
            limits = Limits(shutdown_grace=0.1, close_timeout=1.0)
            server = await nursery.start(partial(serve_gateway, rt, limits=limits))
            try:
                yield server
            finally:
                nursery.cancel_scope.cancel()


async def test_an_abort_that_does_not_finish_is_stopped_within_its_bound() -> None:
    adapter = _SlowToClose([])
    async with gateway_of(adapter) as server:
        cli = await spawn_cli("call", "hi", "--via", server.url, "-p", "p", "-m", "m")
        try:
            with trio.fail_after(BOUND):
                await adapter.started.wait()  # the call reached the adapter
                cli.interrupt()
                code, out, err = await cli.finish()
        finally:
            await kill(cli)
    assert code == 130, (out, err)
    assert "^C: aborting the call to p/m (waiting for the first chunk)" in err
    assert (
        "aborted the call to p/m while waiting for the first chunk: no finish within 0.5 s" in err
    )
    assert "abort took" in err


async def test_a_second_ctrl_c_exits_at_once() -> None:
    adapter = _SlowToClose([])
    async with gateway_of(adapter) as server:
        cli = await spawn_cli("call", "hi", "--via", server.url, "-p", "p", "-m", "m")
        try:
            with trio.fail_after(BOUND):
                await adapter.started.wait()
                cli.interrupt()
                await cli.read_err_until("^C: aborting")
                cli.interrupt()  # the first abort is still waiting for its finish
                code, out, err = await cli.finish()
        finally:
            await kill(cli)
    assert code == 130, (out, err)
    assert "interrupted again: exiting now" in err


async def test_ctrl_c_while_streaming_through_a_gateway_reports_one_aborted() -> None:
    # Issue 10, finding 12: the finish read "aborted: aborted: the client aborted the call".
    async with gateway_of(DemoAdapter(tokens_per_second=20)) as server:
        cli = await spawn_cli(
            "call", "a long story", "--via", server.url, "-p", "p", "-m", "demo-1", "--no-color"
        )
        try:
            with trio.fail_after(BOUND):
                await cli.read_err_until("thinking: ")  # streaming has started
                cli.interrupt()
                code, out, err = await cli.finish()
        finally:
            await kill(cli)
    assert code == 130, (out, err)
    assert "^C: aborting the call to p/demo-1 (streaming)" in err
    assert "aborted: the client aborted the call (abort -> finish" in err
    assert "aborted: aborted" not in err
