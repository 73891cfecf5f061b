"""`llmrt.adapter.close_on_stop`: a stopped call closes what the adapter registered, at the stop."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
import trio

import llmrt
from llmrt import (
    Adapter,
    BlockStart,
    Finish,
    FinishAborted,
    FinishStop,
    GenerateOptions,
    StreamChunk,
    TextDelta,
    user_message,
)
from llmrt.adapter import close_on_stop
from llmrt.testing import SSEScript, open_upstream, openai_events

pytestmark = pytest.mark.timeout(20)


class Holding(Adapter):
    """Registers a closer, sends one chunk, then waits forever (or finishes, if told to)."""

    def __init__(self, *, finish: bool = False) -> None:
        self.finish = finish
        self.closed = 0
        #: Whether the closer had run when the adapter's own cleanup ran.
        self.closed_before_cleanup: bool | None = None

    def _close(self) -> None:
        self.closed += 1

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        close_on_stop(self._close)
        try:
            yield BlockStart(index=0, block_type="text")
            yield TextDelta(index=0, text="hi")
            if self.finish:
                yield Finish(reason=FinishStop())
                return
            await trio.sleep_forever()
        finally:
            self.closed_before_cleanup = self.closed > 0


def _options() -> GenerateOptions:
    return GenerateOptions(provider="p", model="m", messages=(user_message("hi"),))


async def test_abort_runs_the_closer_before_the_call_task_runs_again() -> None:
    adapter = Holding()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(_options()) as call:
            async for chunk in call:
                if type(chunk) is TextDelta:
                    call.abort("enough")
                    # Synchronously: no checkpoint has passed since abort().
                    assert adapter.closed == 1
                elif type(chunk) is Finish:
                    assert type(chunk.reason) is FinishAborted
    assert adapter.closed_before_cleanup is True


async def test_leaving_early_runs_the_closer_before_the_adapter_cleans_up() -> None:
    adapter = Holding()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(_options()) as call:
            async for chunk in call:
                if type(chunk) is TextDelta:
                    break
        assert adapter.closed == 1
    assert adapter.closed_before_cleanup is True


async def test_a_call_that_ends_normally_never_runs_its_closer() -> None:
    adapter = Holding(finish=True)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(_options()) as call:
            chunks = [chunk async for chunk in call]
    assert type(chunks[-1]) is Finish and type(chunks[-1].reason) is FinishStop
    assert adapter.closed == 0


async def test_outside_a_runtime_call_registering_does_nothing() -> None:
    adapter = Holding(finish=True)
    chunks = [chunk async for chunk in adapter.stream(_options())]
    assert type(chunks[-1]) is Finish and adapter.closed == 0


async def test_a_failing_closer_is_logged_and_the_call_still_ends_aborted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Failing(Holding):
        def _close(self) -> None:
            raise RuntimeError("cannot close")

    adapter = Failing()
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        with caplog.at_level(logging.ERROR):
            async with rt.stream(_options()) as call:
                async for chunk in call:
                    if type(chunk) is TextDelta:
                        call.abort()
                    last = chunk
    assert type(last) is Finish and type(last.reason) is FinishAborted
    assert "close_on_stop callback failed" in caplog.text


async def test_an_aborted_http_stream_is_closed_before_the_call_task_runs() -> None:
    from llmrt.adapters.openai_chat import OpenAIChatAdapter

    script = SSEScript(events=openai_events([f"t{i} " for i in range(100)]), delay=0.05)
    async with open_upstream(script) as upstream, llmrt.open_runtime() as rt:
        adapter = OpenAIChatAdapter(
            base_url=upstream.base_url, api_key_env="K", environ={"K": "sk-close-0000"}
        )
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(_options()) as call:
            async for chunk in call:
                if type(chunk) is TextDelta:
                    call.abort()
                    # The client's socket is closed already: the pool holds it no more.
                    assert adapter.connection_counts() == (0, 0)
                    break
        with trio.fail_after(5):
            await upstream.wait_all_closed()
        assert upstream.connections[0].closed_by == "client"
        await adapter.aclose()


async def test_no_call_is_left_registered_once_calls_end() -> None:
    """The call is found through its own task's context: nothing outlives the call task."""
    from llmrt._stop_hooks import CURRENT_CALL

    stray: list[int] = []
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], Holding(finish=True))
        async with rt.stream(_options()) as call:
            chunks = [chunk async for chunk in call]
        assert type(chunks[-1]) is Finish
        await rt.register_adapter(["q"], Holding())
        async with rt.stream(
            GenerateOptions(provider="q", model="m", messages=(user_message("hi"),))
        ) as call:
            async for chunk in call:
                if type(chunk) is TextDelta:
                    assert len(call._closers or ()) == 1  # the stalled call's closer, while it runs
                    call.abort()
        # Outside any call task nothing is registered: a closer here is never kept.
        close_on_stop(lambda: stray.append(1))
    assert CURRENT_CALL.get(None) is None
    assert call._closers is None
    assert stray == []


@pytest.mark.parametrize("how", ["abort", "leave"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["native", "wrapped"])
async def test_a_stopped_http_read_ends_the_body_with_no_error_to_translate(
    monkeypatch: pytest.MonkeyPatch, how: str, wrapped: bool
) -> None:
    """The read parked on the socket the stop closed ends the stream: nothing is translated."""
    import httpx

    from llmrt.adapters import _http
    from llmrt.adapters._transport import TrioTransport
    from llmrt.adapters.openai_chat import OpenAIChatAdapter

    translated: list[BaseException] = []
    real = _http.translate_http_error

    def noting(exc: httpx.HTTPError, endpoint: str | None = None) -> llmrt.LlmError:
        translated.append(exc)
        return real(exc, endpoint)

    monkeypatch.setattr(_http, "translate_http_error", noting)
    script = SSEScript(events=openai_events(["a", "b", "c"]), stall_after=3)
    async with open_upstream(script) as upstream, llmrt.open_runtime() as rt:
        transport = httpx.AsyncHTTPTransport() if wrapped else TrioTransport()
        adapter = OpenAIChatAdapter(
            base_url=upstream.base_url,
            api_key_env="K",
            environ={"K": "sk-close-0000"},
            transport=transport,
        )

        await rt.register_adapter(["p"], adapter)
        with trio.fail_after(10):
            async with rt.stream(_options()) as call:
                async for chunk in call:
                    if type(chunk) is TextDelta:
                        if how == "abort":
                            call.abort()
                        else:
                            break
                    last = chunk
            if how == "abort":
                assert isinstance(last, Finish) and isinstance(last.reason, FinishAborted)
            if not wrapped:
                await upstream.wait_all_closed()
                assert upstream.connections[0].closed_by == "client"
        await adapter.aclose()
    assert translated == []


class EndingOnStop(Adapter):
    """Fills a two-chunk box, then waits until its closer runs and ends its stream
    normally, as an HTTP stream whose socket the stop closed does."""

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        stopped = trio.Event()
        close_on_stop(stopped.set)
        yield BlockStart(index=0, block_type="text")
        yield TextDelta(index=0, text="hi")
        await stopped.wait()


async def test_an_aborted_call_with_a_full_box_waits_outside_its_scope_then_ends_once() -> None:
    """A stopped call leaves its cancelled scope after its unwinding step, but a finish
    that must wait for room waits outside it (inside, the wait would be cancelled):
    the buffered chunks, then one aborted finish, then the lease is released."""
    async with llmrt.open_runtime(channel_size=2) as rt:
        await rt.register_adapter(["p"], EndingOnStop())
        with trio.fail_after(10):
            async with rt.stream(_options()) as call:
                await trio.testing.wait_all_tasks_blocked()  # the box is full
                registration = call._registration
                assert registration is not None and registration.in_flight == 1
                call.abort()
                await trio.testing.wait_all_tasks_blocked()  # the finish waits for room
                assert not call._task_done
                chunks = [chunk async for chunk in call]
            assert [type(chunk) for chunk in chunks] == [BlockStart, TextDelta, Finish]
            finish = chunks[-1]
            assert isinstance(finish, Finish) and isinstance(finish.reason, FinishAborted)
            assert registration.in_flight == 0
