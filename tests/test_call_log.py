"""The call log (issue 25, item 1): what each adapter received and sent, rebuilt from the log.

For every adapter's wire transcripts and the demo, the request in the record is
the one the adapter was handed (a spy subclass sees it), replaying it through
a fresh adapter sends the upstream the same bytes, and the record's chunks
assemble to what the consumer assembled. Defaults, image projection and the
replay gate each show in the logged request. A stuck or full sink drops and
counts records while the streams take no time of their own waiting on it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import pathlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from test_secrets import ECHOES, ENV, KEY, TOKEN

import llmrt
from llmrt import (
    BlockAssembler,
    Finish,
    FinishStop,
    GenerateOptions,
    ImageBlock,
    ReplayEnvelope,
    ResolvedModelInfo,
    StreamChunk,
    TextBlock,
    TextDelta,
    user_message,
)
from llmrt.actors._statistics import GatewayStatistics, RuntimeStatistics
from llmrt.actors.call_log import (
    CallLogSettings,
    CallRecord,
    JsonLinesSink,
    RetryRecord,
    RoutedRecord,
    assemble,
    decode_record,
    find_record,
    log_files,
    read_records,
    request_digest,
)
from llmrt.actors.gateway._metrics import Figures, metric_families
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.demo import DemoAdapter
from llmrt.adapters.gemini import GeminiAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.adapters.openai_responses import OpenAIResponsesAdapter
from llmrt.adapters.scripted import Delay, ScriptedAdapter, text_script
from llmrt.testing import ErrorScript, SSEScript, open_upstream, sse_data

WIRE = pathlib.Path(__file__).parent / "wire"
#: Every transcript with the adapter kind that reads it.
TRANSCRIPTS: dict[str, tuple[pathlib.Path, str]] = {
    **{
        name: (WIRE / name, case["provider"])
        for name, case in json.loads((WIRE / "expected.json").read_text()).items()
    },
    **{
        name: (WIRE / "written" / name, case["provider"])
        for name, case in json.loads((WIRE / "written" / "expected.json").read_text()).items()
    },
    # The shapes real providers send, each through its preset (groq, openrouter, vllm, ...).
    **{
        f"shapes/{name}": (WIRE / "shapes" / name, case["provider"])
        for name, case in json.loads((WIRE / "shapes" / "expected.json").read_text()).items()
    },
}


def make_adapter(kind: str, base_url: str) -> llmrt.Adapter:
    key = {"api_key_env": "ECHO_KEY", "environ": ENV, "base_url": base_url}
    if kind == "anthropic":
        return AnthropicAdapter(**key)
    if kind == "gemini":
        return GeminiAdapter(**key)
    if kind == "responses":
        return OpenAIResponsesAdapter(**key)
    presets = {"deepseek": "deepseek-official", "openai": "openai-compatible"}
    return OpenAIChatAdapter(preset=presets.get(kind, kind), **key)


def spied(adapter: llmrt.Adapter) -> list[GenerateOptions]:
    """Make ``adapter`` keep every request its ``stream`` is handed; the list of them."""
    seen: list[GenerateOptions] = []
    base = type(adapter)

    class Spy(base):  # type: ignore[valid-type,misc]
        __slots__ = ()

        async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
            seen.append(options)
            async for chunk in super().stream(options):
                yield chunk

    adapter.__class__ = Spy
    return seen


def request(provider: str = "p", **kw: Any) -> GenerateOptions:
    kw.setdefault("messages", (user_message("hello"),))
    return GenerateOptions(provider=provider, model="m", **kw)


async def stream(rt: llmrt.LlmRuntime, options: GenerateOptions) -> tuple[list[StreamChunk], str]:
    async with rt.stream(options) as call:
        chunks = [chunk async for chunk in call]
    assert call.log_id is not None
    return chunks, call.log_id


def assembled(chunks: Sequence[StreamChunk]) -> BlockAssembler:
    assembler = BlockAssembler()
    for chunk in chunks:
        assembler.push(chunk)
    return assembler


def the_call(directory: pathlib.Path, record_id: str) -> CallRecord:
    record = find_record(directory, record_id)
    assert isinstance(record, CallRecord), record
    return record


def check_rebuilt(record: CallRecord, chunks: list[StreamChunk]) -> None:
    """The record's chunks and finish are what the consumer received and assembled."""
    raw = list(record.chunks)
    if raw and type(raw[-1]) is Finish:
        raw.pop()  # the adapter's own finish; the consumer got the call's (the same, or corrected)
    assert raw == chunks[:-1]
    assert record.finish == chunks[-1]
    offsets = list(record.offsets)
    assert len(offsets) == len(record.chunks) and offsets == sorted(offsets) and offsets[0] >= 0
    consumer, rebuilt = assembled(chunks), assemble(record)
    assert rebuilt.blocks() == consumer.blocks()
    assert rebuilt.usage == consumer.usage == record.usage
    assert rebuilt.finish == consumer.finish
    assert record.digest == request_digest(record.request)


# ---- every adapter's transcripts, and the demo --------------------------------------------------


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
async def test_a_transcript_call_is_rebuilt_from_the_log(name: str, tmp_path: pathlib.Path) -> None:
    path, kind = TRANSCRIPTS[name]
    options = request(system="be brief", temperature=0.5)
    with trio.fail_after(30):
        async with open_upstream(SSEScript.from_transcript(path), script_paths=None) as upstream:
            adapter = make_adapter(kind, upstream.base_url)
            seen = spied(adapter)
            async with llmrt.open_runtime(call_log=tmp_path) as rt:
                await rt.register_adapter(["p"], adapter)
                chunks, record_id = await stream(rt, options)
            record = the_call(tmp_path, record_id)
            # What the adapter was handed, exactly; and who served it.
            assert seen == [record.request]
            assert (record.provider, record.model, record.adapter) == ("p", "m", "Spy")
            check_rebuilt(record, chunks)
            # The logged request sends the upstream the same bytes again.
            async with llmrt.open_runtime() as rt:
                await rt.register_adapter(["p"], make_adapter(kind, upstream.base_url))
                async with rt.stream(record.request) as call:
                    async for _ in call:
                        pass
            first, again = upstream.requests
            assert (again.path, again.body) == (first.path, first.body)


async def test_a_demo_call_is_rebuilt_from_the_log(tmp_path: pathlib.Path) -> None:
    tool = llmrt.ToolSchema(
        name="lookup", description="find", parameters={"type": "object", "properties": {}}
    )
    options = GenerateOptions(
        provider="demo",
        model="demo-fast",
        messages=(user_message("what is the tide?"),),
        tools=(tool,),
        reasoning_effort="high",
    )
    adapter = DemoAdapter()
    seen = spied(adapter)
    with trio.fail_after(30):
        async with llmrt.open_runtime(call_log=tmp_path) as rt:
            await rt.register_adapter(["demo"], adapter)
            chunks, record_id = await stream(rt, options)
    record = the_call(tmp_path, record_id)
    assert seen == [record.request]
    check_rebuilt(record, chunks)
    assert any(type(b).__name__ == "ToolCallBlock" for b in assemble(record).blocks())


async def test_chunk_times_are_the_call_clock_and_offsets_count_from_its_start(
    tmp_path: pathlib.Path,
) -> None:
    # Real time (the log's writer is a thread, which a mock clock would jump past).
    script = [Delay(0.02), *text_script(["a"])[:2], Delay(0.04), *text_script(["a"])[2:]]
    options = GenerateOptions(provider="p", model="m", messages=(user_message("hi"),))
    with trio.fail_after(30):
        async with llmrt.open_runtime(call_log=tmp_path) as rt:
            await rt.register_adapter(["p"], ScriptedAdapter(script))
            began = trio.current_time()
            chunks, record_id = await stream(rt, options)
            ended = trio.current_time()
    record = the_call(tmp_path, record_id)
    check_rebuilt(record, chunks)
    assert record.v == 2 and began <= record.start <= record.times[0] <= ended
    assert len(record.times) == len(record.chunks) == 5
    assert record.offsets == tuple(t - record.start for t in record.times)
    first, _, third, _, last = record.offsets
    # ``duration`` is rounded to the microsecond.
    assert first >= 0.02 and first + 0.04 <= third <= last <= record.duration + 1e-6


def test_a_version_1_record_reads_without_chunk_times() -> None:
    line = json.dumps(
        {
            "kind": "call", "v": 1, "id": "ab-1", "at": 1.0, "provider": "p",
            "registration": 1, "adapter": "A", "model": "m", "digest": "sha256:00",
            "request": {"provider": "p", "model": "m", "messages": []},
            "chunks": [], "offsets": [0.5],
        }
    )  # fmt: skip
    record = decode_record(line)
    assert isinstance(record, CallRecord)
    assert record.v == 1 and record.times == () and record.offsets == ()


# ---- where the logged request differs from the caller's ----------------------------------------


async def test_a_materialized_default_shows_in_the_logged_request(tmp_path: pathlib.Path) -> None:
    info = {"m": ResolvedModelInfo(provider="p", id="m", name="m", default_max_tokens=77)}
    adapter = ScriptedAdapter(text_script(["ok"]), model_info=info)
    asked = request()
    with trio.fail_after(10):
        async with llmrt.open_runtime(call_log=tmp_path) as rt:
            await rt.register_adapter(["p"], adapter)
            _, record_id = await stream(rt, asked)
    record = the_call(tmp_path, record_id)
    assert asked.max_tokens is None
    assert record.request.max_tokens == 77 == adapter.requests[0].max_tokens
    assert record.request == msgspec.structs.replace(asked, max_tokens=77)


async def test_an_image_projection_shows_in_the_logged_request(tmp_path: pathlib.Path) -> None:
    info = {"m": ResolvedModelInfo(provider="p", id="m", name="m", input_modalities=("text",))}
    adapter = ScriptedAdapter(text_script(["ok"]), model_info=info)
    image = ImageBlock(media_type="image/png", data="aGVsbG8=")
    options = request(messages=(user_message((TextBlock(text="look"), image)),))
    with trio.fail_after(10):
        async with llmrt.open_runtime(call_log=tmp_path) as rt:
            await rt.register_adapter(["p"], adapter)
            _, record_id = await stream(rt, options)
    record = the_call(tmp_path, record_id)
    (sent,) = adapter.requests
    assert record.request == sent != options
    blocks = record.request.messages[0].content
    assert image in options.messages[0].content and image not in blocks
    assert all(type(block) is TextBlock for block in blocks)


async def test_the_replay_gate_shows_in_the_logged_request(tmp_path: pathlib.Path) -> None:
    state = ReplayEnvelope(response={"id": "resp_1"})
    answer = llmrt.Message(
        id="msg_1",
        role="assistant",
        content=(TextBlock(text="earlier"),),
        source=llmrt.ModelSource(provider="elsewhere", model="m", replay_state=state),
    )
    options = request(messages=(user_message("hi"), answer, user_message("again")))
    adapter = ScriptedAdapter(text_script(["ok"]))
    with trio.fail_after(10):
        async with llmrt.open_runtime(call_log=tmp_path) as rt:
            await rt.register_adapter(["p"], adapter)
            _, record_id = await stream(rt, options)
    record = the_call(tmp_path, record_id)
    assert record.request == adapter.requests[0] != options
    logged = record.request.messages[1].source
    assert isinstance(logged, llmrt.ModelSource) and logged.replay_state is None
    assert options.messages[1].source == answer.source  # the caller's request is untouched


# ---- attempts: retries, routing, middleware -----------------------------------------------------


async def test_a_retried_call_links_its_attempts(tmp_path: pathlib.Path) -> None:
    failure = llmrt.LlmFailure(message="busy", code=llmrt.ErrorCode.OVERLOADED)
    failed = [Finish(reason=llmrt.FinishError(failure=failure))]
    plays = iter([failed, text_script(["fine"])])
    adapter = ScriptedAdapter(lambda _options: next(plays))
    policy = llmrt.NormalRetryPolicy(max_retries=2, initial_delay_ms=1, jitter_ratio=0)
    with trio.fail_after(10):
        async with llmrt.open_runtime(call_log=tmp_path) as rt:
            await rt.register_adapter(["p"], adapter)
            async with rt.stream_with_retry(request(), policy=policy) as call:
                events = [event async for event in call]
            retry_id = call.log_id
    assert retry_id is not None
    record = find_record(tmp_path, retry_id)
    assert isinstance(record, RetryRecord)
    first, second = record.attempts
    assert (first.attempt, first.code, first.delay_ms) == (1, "OVERLOADED", 1.0)
    assert (second.attempt, second.code) == (2, None)
    assert record.finish == events[-1].chunk
    assert first.call is not None and second.call is not None
    assert the_call(tmp_path, first.call).finish == failed[0]
    assert assemble(the_call(tmp_path, second.call)).blocks() == (TextBlock(text="fine"),)


async def test_a_routed_call_links_the_deployments_it_tried(tmp_path: pathlib.Path) -> None:
    from llmrt.actors.routing import Deployment, Group

    failure = llmrt.LlmFailure(message="slow down", code=llmrt.ErrorCode.RATE_LIMIT)
    busy = ScriptedAdapter([Finish(reason=llmrt.FinishError(failure=failure))])
    serving = ScriptedAdapter(text_script(["routed"]))
    group = Group(
        name="chat",
        strategy="ordered",
        deployments=(Deployment(route="a", model="m"), Deployment(route="b", model="m")),
    )
    with trio.fail_after(10):
        async with llmrt.open_runtime(call_log=tmp_path) as rt:
            await rt.register_adapter(["a"], busy)
            await rt.register_adapter(["b"], serving)
            await rt.register_groups([group])
            chunks, routed_id = await stream(rt, request("chat"))
    record = find_record(tmp_path, routed_id)
    assert isinstance(record, RoutedRecord)
    assert record.group == "chat" and record.finish == chunks[-1]
    assert record.routing is not None and [a.code for a in record.routing.attempts] == [
        "RATE_LIMIT",
        None,
    ]
    tried, served = (the_call(tmp_path, i) for i in record.calls)
    assert (tried.provider, served.provider) == ("a", "b")
    assert assemble(served).blocks() == assembled(chunks).blocks()


async def test_under_middleware_the_log_keeps_the_adapters_own_chunks(
    tmp_path: pathlib.Path,
) -> None:
    async def shout(options: GenerateOptions, nxt: llmrt.actors.Next) -> AsyncIterator[StreamChunk]:
        async for chunk in nxt(options):
            if type(chunk) is TextDelta:
                chunk = msgspec.structs.replace(chunk, text=chunk.text.upper())
            yield chunk

    with trio.fail_after(10):
        async with llmrt.open_runtime(call_log=tmp_path) as rt:
            rt.use(shout)
            await rt.register_adapter(["p"], ScriptedAdapter(text_script(["quiet"])))
            chunks, record_id = await stream(rt, request())
    record = the_call(tmp_path, record_id)
    assert [c.text for c in chunks if type(c) is TextDelta] == ["QUIET"]
    assert [c.text for c in record.chunks if type(c) is TextDelta] == ["quiet"]


# ---- never blocking: a stuck sink, a full disk --------------------------------------------------


class StuckSink:
    """A sink whose first write never returns."""

    def __init__(self) -> None:
        self.writes = 0

    async def write(self, lines: Sequence[bytes]) -> None:
        self.writes += 1
        await trio.sleep_forever()

    async def aclose(self) -> None:
        pass


class FullDisk:
    """A sink on a full disk: every write raises ``ENOSPC``."""

    def __init__(self) -> None:
        self.writes = 0

    async def write(self, lines: Sequence[bytes]) -> None:
        self.writes += 1
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    async def aclose(self) -> None:
        pass


CALLS, PARTS = 60, 200


async def run_many(rt: llmrt.LlmRuntime) -> list[list[StreamChunk]]:
    await rt.register_adapter(["p"], ScriptedAdapter(text_script([f"t{i}" for i in range(PARTS)])))
    results: list[list[StreamChunk]] = []

    async def one() -> None:
        async with rt.stream(request()) as call:
            results.append([chunk async for chunk in call])

    async with trio.open_nursery() as nursery:
        for _ in range(CALLS):
            nursery.start_soon(one)
    return results


async def test_a_stuck_sink_drops_and_counts_while_streams_run_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sink = StuckSink()
    async with llmrt.open_runtime(call_log=sink, shutdown_grace=0.1) as rt:
        rt._core.call_log.queue_size = 8  # type: ignore[union-attr]
        started = trio.current_time()
        with trio.fail_after(60):
            results = await run_many(rt)
        # No stream waited on the log: no time passed, though the sink never returns.
        assert trio.current_time() == started
        stats = rt.statistics().call_log
    assert len(results) == CALLS and all(len(r) == PARTS + 4 for r in results)
    assert stats is not None and stats.written == 0 and sink.writes <= 1
    assert stats.dropped > 0
    assert stats.recorded == CALLS == stats.dropped + stats.queued


async def test_a_full_disk_fails_records_and_counts_them(caplog: pytest.LogCaptureFixture) -> None:
    sink = FullDisk()
    with trio.fail_after(30):
        async with llmrt.open_runtime(call_log=sink) as rt:
            results = await run_many(rt)
            for _ in range(100):  # the writer's thread has the batches
                await trio.sleep(0.01)
                if rt.statistics().call_log.queued == 0:  # type: ignore[union-attr]
                    break
            stats = rt.statistics().call_log
    assert all(type(r[-1].reason) is FinishStop for r in results)  # type: ignore[union-attr]
    assert stats is not None and stats.recorded == CALLS
    assert stats.failed == CALLS and stats.written == 0 and sink.writes >= 1
    warnings = [r for r in caplog.records if "sink failed" in r.getMessage()]
    assert len(warnings) == 1  # once, not per batch


async def test_the_figures_reach_metrics(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(10):
        async with llmrt.open_runtime(call_log=tmp_path) as rt:
            await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
            await stream(rt, request())
        stats = rt.statistics()
    assert stats.call_log is not None and stats.call_log.written == 1
    figures = Figures(version="x", runtime=stats, gateway=GatewayStatistics())
    families = {f.name: f for f in metric_families(figures)}
    records = {s.labels["outcome"]: s.value for s in families["llmrt_call_log_records"].samples}
    assert records["written"] == 1 and records["dropped"] == 0
    assert llmrt.decode(llmrt.encode(stats), RuntimeStatistics) == stats
    off = Figures(version="x", runtime=RuntimeStatistics(), gateway=GatewayStatistics())
    assert not any(f.name.startswith("llmrt_call_log") for f in metric_families(off))


# ---- the files: rotation and the total cap -------------------------------------------------------


async def test_files_rotate_by_size_and_the_oldest_go_past_the_cap(tmp_path: pathlib.Path) -> None:
    sink = JsonLinesSink(tmp_path, max_file_bytes=4096, max_total_bytes=12288)
    line = b'{"x":"' + b"y" * 1000 + b'"}\n'
    with trio.fail_after(10):
        for i in range(40):
            await sink.write([line.replace(b"y", str(i % 10).encode(), 1)])
        await sink.aclose()
    files = log_files(tmp_path)
    sizes = [path.stat().st_size for path in files]
    assert all(size <= 4096 for size in sizes) and sum(sizes) <= 12288
    assert len(files) >= 3 and files[0].name != "calls-000001.jsonl"  # the oldest were deleted
    # A new run continues after the newest file, never into it.
    again = JsonLinesSink(tmp_path)
    await again.write([line])
    await again.aclose()
    assert log_files(tmp_path)[-1].name > files[-1].name


async def test_settings_give_the_directory_and_bounds(tmp_path: pathlib.Path) -> None:
    settings = CallLogSettings(directory=str(tmp_path / "new"), queue=3)
    with trio.fail_after(10):
        async with llmrt.open_runtime(call_log=settings) as rt:
            assert rt._core.call_log.queue_size == 3  # type: ignore[union-attr]
            await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
            await stream(rt, request())
    assert len(list(read_records(tmp_path / "new"))) == 1
    with pytest.raises(ValueError, match="directory"):
        async with llmrt.open_runtime(call_log=CallLogSettings()):
            pass
    with pytest.raises(TypeError, match="call_log"):
        async with llmrt.open_runtime(call_log=3):  # type: ignore[arg-type]
            pass


async def test_off_by_default() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
        async with rt.stream(request()) as call:
            async for _ in call:
                pass
    assert call.log_id is None and rt.statistics().call_log is None


# ---- secrets (the secrets test set) --------------------------------------------------------------


def no_secret_in(directory: pathlib.Path) -> str:
    text = "".join(path.read_text() for path in log_files(directory))
    assert KEY not in text and TOKEN not in text
    assert KEY[:12] not in text and TOKEN[:12] not in text
    return text


@pytest.mark.parametrize("echo", sorted(ECHOES))
async def test_no_echoed_key_in_any_record(echo: str, tmp_path: pathlib.Path) -> None:
    with trio.fail_after(30):
        async with open_upstream(ErrorScript(401, body=ECHOES[echo]), script_paths=None) as up:
            async with llmrt.open_runtime(call_log=tmp_path) as rt:
                for kind in ("openai", "anthropic", "gemini", "responses"):
                    await rt.register_adapter([kind], make_adapter(kind, up.base_url))
                    await stream(rt, request(kind))
    records = list(read_records(tmp_path))
    assert len(records) == 4
    assert REDACTED_IN(no_secret_in(tmp_path))


def REDACTED_IN(text: str) -> bool:
    return llmrt.adapter.REDACTED in text


async def test_no_key_or_token_in_a_record_whatever_quotes_them(tmp_path: pathlib.Path) -> None:
    # The model quotes the key in its text and its error; the caller's request holds the
    # gateway's token; the upstream's in-band error echoes the key too.
    events = [
        sse_data({"choices": [{"index": 0, "delta": {"content": f"the key is {KEY}"}}]}),
        sse_data({"error": {"message": f"Bearer {KEY} was revoked"}}),
    ]
    with trio.fail_after(30):
        async with open_upstream(SSEScript(events=events)) as up:
            async with llmrt.open_runtime(call_log=tmp_path) as rt:
                await rt.register_adapter(["openai"], make_adapter("openai", up.base_url))
                with rt.redacting([TOKEN]):
                    await stream(rt, request("openai", system=f"token {TOKEN} is ours"))
    (record,) = read_records(tmp_path)
    assert isinstance(record, CallRecord)
    assert REDACTED_IN(no_secret_in(tmp_path))


async def test_a_secret_held_later_is_removed_too(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    adapter = ScriptedAdapter(text_script([f"quoting {TOKEN}"]))
    with trio.fail_after(10):
        async with llmrt.open_runtime(call_log=tmp_path) as rt:
            await rt.register_adapter(["p"], adapter)
            with rt.redacting([TOKEN]):
                await stream(rt, request())
    no_secret_in(tmp_path)
    assert TOKEN not in caplog.text


async def test_a_key_no_one_holds_is_removed_from_the_adapters_failure(
    tmp_path: pathlib.Path,
) -> None:
    # Not a value any redactor holds: only the phrasing gives it away, as on the call path.
    stranger = "sk-proj-Unkn0wnKey9a8b7c6d5e4f3g2h1"
    events = [sse_data({"error": {"message": f"x-api-key: {stranger} is not valid"}})]
    with trio.fail_after(30):
        async with open_upstream(SSEScript(events=events)) as up:
            async with llmrt.open_runtime(call_log=tmp_path) as rt:
                await rt.register_adapter(["openai"], make_adapter("openai", up.base_url))
                chunks, record_id = await stream(rt, request("openai"))
    record = the_call(tmp_path, record_id)
    text = "".join(path.read_text() for path in log_files(tmp_path))
    assert stranger not in text and stranger[:10] not in text
    assert record.finish == chunks[-1]
    raw = record.chunks[-1]
    assert type(raw) is Finish and REDACTED_IN(llmrt.encode(raw).decode())


def test_workers_sum_the_call_log_figures() -> None:
    from llmrt.actors._statistics import CallLogStatistics
    from llmrt.actors.app.workers._sum import merge_values, retired

    one = RuntimeStatistics(call_log=CallLogStatistics(recorded=5, written=3, dropped=2, queued=1))
    two = RuntimeStatistics(call_log=CallLogStatistics(recorded=4, failed=4, bytes_written=10))
    off = RuntimeStatistics()
    summed = merge_values([one, two, off]).call_log
    assert summed == CallLogStatistics(
        recorded=9, written=3, dropped=2, failed=4, queued=1, bytes_written=10
    )
    assert merge_values([off, off]).call_log is None
    gone = retired(one).call_log
    assert gone is not None and gone.queued == 0 and gone.written == 3
