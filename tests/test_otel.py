"""The OpenTelemetry middleware: GenAI spans and client metrics, read from the SDK's
in-memory exporters; the ``traceparent`` hop through the gateway."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from test_gateway import gateway, raw

import llmrt
from llmrt import (
    BlockStart,
    ErrorCode,
    Finish,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    GenerateOptions,
    LlmError,
    NormalRetryPolicy,
    StreamChunk,
    TextDelta,
    TokenUsage,
    UsageChunk,
)
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.actors.otel import current_traceparent, otel_middleware
from llmrt.adapters.scripted import Raise, ScriptedAdapter, Stall, text_script

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
SECRET = "sk-live-DO-NOT-LEAK-1234567890"


@attrs.define
class Telemetry:
    tracer_provider: TracerProvider
    spans_out: InMemorySpanExporter
    meter_provider: MeterProvider
    reader: InMemoryMetricReader

    def middleware(self, **kw: Any) -> llmrt.Middleware:
        return otel_middleware(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **kw
        )

    def spans(self, name_prefix: str = "chat ") -> list[ReadableSpan]:
        return [s for s in self.spans_out.get_finished_spans() if s.name.startswith(name_prefix)]

    def span(self) -> ReadableSpan:
        (only,) = self.spans()
        return only

    def points(self, metric: str) -> list[HistogramDataPoint]:
        data = self.reader.get_metrics_data()
        found: list[HistogramDataPoint] = []
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found += m.data.data_points  # type: ignore[arg-type]
        return found


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Telemetry(tracer_provider, exporter, meter_provider, reader)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def options(provider: str = "p", **kw: Any) -> GenerateOptions:
    return GenerateOptions(
        provider=provider, model="m-1", messages=(llmrt.user_message("hi"),), **kw
    )


async def collect(rt: llmrt.LlmRuntime, opts: GenerateOptions) -> list[StreamChunk]:
    async with rt.stream(opts) as call:
        return [chunk async for chunk in call]


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


# ---- spans -------------------------------------------------------------------------------------


async def test_a_finished_call_has_one_client_span_with_the_genai_attributes(
    telemetry: Telemetry,
) -> None:
    usage = TokenUsage(
        input_tokens=10, output_tokens=7, cache_read_tokens=30, cache_write_tokens=5,
        reasoning_tokens=4,
    )  # fmt: skip
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware(provider_names={"p": "openai"}))
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a", "b"], usage=usage)))
        chunks = await collect(rt, options(max_tokens=64, temperature=0.5, stop=("END",)))
    assert chunks[-1] == Finish(reason=FinishStop())
    span = telemetry.span()
    assert span.name == "chat m-1"
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    assert attrs_of(span) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "m-1",
        "gen_ai.request.max_tokens": 64,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.stop_sequences": ("END",),
        "gen_ai.response.model": "m-1",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.response.time_to_first_chunk": pytest.approx(
            attrs_of(span)["gen_ai.response.time_to_first_chunk"]
        ),
        # The conventions count cached input inside the input tokens.
        "gen_ai.usage.input_tokens": 45,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 30,
        "gen_ai.usage.cache_creation.input_tokens": 5,
        "gen_ai.usage.reasoning.output_tokens": 4,
        "llmrt.finish.kind": "stop",
    }
    assert attrs_of(span)["gen_ai.response.time_to_first_chunk"] >= 0
    (event,) = span.events
    assert event.name == "llmrt.first_chunk"
    assert span.start_time is not None and span.end_time is not None
    assert span.start_time <= event.timestamp <= span.end_time
    assert event.attributes == {
        "gen_ai.response.time_to_first_chunk": attrs_of(span)["gen_ai.response.time_to_first_chunk"]
    }


@pytest.mark.parametrize(
    ("finish", "reason", "kind"),
    [(FinishToolCalls(), "tool_calls", "tool-calls"), (FinishMaxTokens(), "length", "max-tokens")],
)
async def test_finish_reasons_use_the_conventions_names(
    telemetry: Telemetry, finish: Any, reason: str, kind: str
) -> None:
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["x"], finish=finish)))
        await collect(rt, options())
    span = telemetry.span()
    assert attrs_of(span)["gen_ai.response.finish_reasons"] == (reason,)
    assert attrs_of(span)["llmrt.finish.kind"] == kind
    assert attrs_of(span)["gen_ai.provider.name"] == "p"  # unmapped routes pass through
    assert "error.type" not in attrs_of(span)


async def test_an_error_finish_sets_error_type_to_the_code_and_never_the_message(
    telemetry: Telemetry,
) -> None:
    failing = [Raise(LlmError(ErrorCode.RATE_LIMIT, f"slow down, key {SECRET}"))]
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        await rt.register_adapter(["p"], ScriptedAdapter(failing))
        chunks = await collect(rt, options())
    assert isinstance(chunks[-1], Finish)
    span = telemetry.span()
    attributes = attrs_of(span)
    assert attributes["error.type"] == "RATE_LIMIT"
    assert attributes["llmrt.finish.kind"] == "error"
    assert "gen_ai.response.finish_reasons" not in attributes
    assert "gen_ai.response.model" not in attributes
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "RATE_LIMIT"
    assert not span.events  # no chunk ever came
    assert SECRET not in repr(attributes) + repr(span.status) + repr(span.events)
    (point,) = telemetry.points("gen_ai.client.operation.duration")
    assert point.attributes is not None and point.attributes["error.type"] == "RATE_LIMIT"
    assert not telemetry.points("gen_ai.client.token.usage")
    assert not telemetry.points("gen_ai.client.operation.time_to_first_chunk")


async def test_an_unknown_provider_ends_with_no_adapter(telemetry: Telemetry) -> None:
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        await collect(rt, options("nowhere"))
    span = telemetry.span()
    assert attrs_of(span)["error.type"] == "NO_ADAPTER"
    assert attrs_of(span)["gen_ai.provider.name"] == "nowhere"  # the span: the real value
    (point,) = telemetry.points("gen_ai.client.operation.duration")
    # The metric: the runtime's bounded label, so callers cannot grow the series.
    assert point.attributes is not None
    assert point.attributes["gen_ai.provider.name"] == "(other)"
    assert point.attributes["gen_ai.request.model"] == "(other)"


async def test_a_stop_without_content_is_recorded_as_the_empty_response_it_becomes(
    telemetry: Telemetry,
) -> None:
    script = [
        UsageChunk(usage=TokenUsage(input_tokens=3, output_tokens=0)),
        Finish(reason=FinishStop()),
    ]
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        await rt.register_adapter(["p"], ScriptedAdapter(script))
        chunks = await collect(rt, options())
    assert chunks[-1].reason.failure.code == ErrorCode.EMPTY_RESPONSE  # type: ignore[union-attr]
    assert attrs_of(telemetry.span())["error.type"] == "EMPTY_RESPONSE"


async def test_an_abort_ends_the_span_with_the_abort_code(telemetry: Telemetry) -> None:
    script = [BlockStart(index=0, block_type="text"), TextDelta(index=0, text="a"), Stall()]
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        await rt.register_adapter(["p"], ScriptedAdapter(script))
        async with rt.stream(options()) as call:
            async for chunk in call:
                if isinstance(chunk, TextDelta):
                    call.abort("user pressed stop")
        assert isinstance(chunk, Finish)
    span = telemetry.span()
    assert attrs_of(span)["error.type"] == "ABORTED"
    assert attrs_of(span)["llmrt.finish.kind"] == "aborted"
    assert [e.name for e in span.events] == ["llmrt.first_chunk"]
    assert span.status.status_code is StatusCode.ERROR


async def test_an_idle_timeout_ends_the_span_with_timeout(
    telemetry: Telemetry, autojump_clock: trio.testing.MockClock
) -> None:
    script = [BlockStart(index=0, block_type="text"), Stall()]
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        await rt.register_adapter(["p"], ScriptedAdapter(script), stream_idle_timeout=2.0)
        chunks = await collect(rt, options())
    assert chunks[-1].reason.failure.code == ErrorCode.TIMEOUT  # type: ignore[union-attr]
    assert attrs_of(telemetry.span())["error.type"] == "TIMEOUT"
    assert attrs_of(telemetry.span())["llmrt.finish.kind"] == "error"


async def test_a_consumer_that_leaves_early_still_ends_the_span(telemetry: Telemetry) -> None:
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        script = [BlockStart(index=0, block_type="text"), Stall()]
        await rt.register_adapter(["p"], ScriptedAdapter(script))
        async with rt.stream(options()) as call:
            async for _chunk in call:
                break
    span = telemetry.span()
    assert attrs_of(span)["llmrt.finish.kind"] == "consumer-left"
    assert attrs_of(span)["error.type"] == "ABORTED"


async def test_an_inner_middleware_exception_is_the_error_type_and_still_raised(
    telemetry: Telemetry,
) -> None:
    class Broken(Exception):
        pass

    async def broken(
        request: GenerateOptions, nxt: llmrt.actors.Next
    ) -> AsyncIterator[StreamChunk]:
        async for chunk in nxt(request):
            yield chunk
            raise Broken

    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        rt.use(broken)
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
        with pytest.raises(Broken):
            await collect(rt, options())
    assert attrs_of(telemetry.span())["error.type"].endswith("Broken")


async def test_the_span_continues_the_callers_trace_and_parents_what_runs_below(
    telemetry: Telemetry,
) -> None:
    tracer = telemetry.tracer_provider.get_tracer("test")
    below: list[trace.Span] = []

    async def inner(request: GenerateOptions, nxt: llmrt.actors.Next) -> AsyncIterator[StreamChunk]:
        # Stands for an instrumented HTTP client in the adapter: it opens its
        # span in whatever context is current.
        span = tracer.start_span("http request")
        below.append(span)
        try:
            async for chunk in nxt(request):
                yield chunk
        finally:
            span.end()

    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        rt.use(inner)
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
        with tracer.start_as_current_span("agent turn") as turn:
            await collect(rt, options())
            # The call's context stayed in the call task.
            assert trace.get_current_span() is turn
    call_span = telemetry.span()
    assert call_span.parent is not None
    assert call_span.parent.span_id == turn.get_span_context().span_id
    assert call_span.context is not None
    assert call_span.context.trace_id == turn.get_span_context().trace_id
    (http,) = telemetry.spans("http")
    assert http.parent is not None and http.parent.span_id == call_span.context.span_id


async def test_current_traceparent_is_the_current_span_in_w3c_form(telemetry: Telemetry) -> None:
    assert current_traceparent() is None  # no span: nothing to continue
    tracer = telemetry.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("turn") as turn:
        context = turn.get_span_context()
        assert (
            current_traceparent()
            == f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
        )


async def test_what_callers_choose_is_recorded_within_bounds(telemetry: Telemetry) -> None:
    huge = "m" * 5000
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
        opts = GenerateOptions(
            provider="p",
            model=huge,
            messages=(llmrt.user_message("hi"),),
            stop=tuple(f"stop-{i}-" + "x" * 1000 for i in range(50)),
        )
        await collect(rt, opts)
    span = telemetry.span()
    attributes = attrs_of(span)
    assert len(span.name) <= 5 + 256
    assert len(attributes["gen_ai.request.model"]) == 256
    assert attributes["gen_ai.request.model"].startswith("mmm")
    assert len(attributes["gen_ai.response.model"]) == 256
    stops = attributes["gen_ai.request.stop_sequences"]
    assert len(stops) == 8 and all(len(stop) <= 256 for stop in stops)
    assert stops[0].startswith("stop-0-")


async def test_a_middleware_sees_its_call_and_nothing_outside_one() -> None:
    from llmrt.actors._call import current_call

    seen: list[object] = []

    async def look(request: GenerateOptions, nxt: llmrt.actors.Next) -> AsyncIterator[StreamChunk]:
        seen.append(current_call())
        async for chunk in nxt(request):
            yield chunk

    assert current_call() is None
    async with llmrt.open_runtime() as rt:
        rt.use(look)
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
        async with rt.stream(options()) as call:
            async for _ in call:
                pass
        assert seen == [call]
        assert call.labels == ("p", "m-1")
        assert call.stopped_by is None  # it finished by itself
    assert current_call() is None


# ---- metrics -----------------------------------------------------------------------------------


async def test_client_metrics_follow_the_conventions(telemetry: Telemetry) -> None:
    usage = TokenUsage(input_tokens=100, output_tokens=20, cache_read_tokens=50)
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware(provider_names={"p": "anthropic"}))
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"], usage=usage)))
        for _ in range(3):
            await collect(rt, options())
    (duration,) = telemetry.points("gen_ai.client.operation.duration")
    assert duration.count == 3
    assert dict(duration.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "m-1",
        "gen_ai.response.model": "m-1",
    }
    # The advised buckets of the conventions.
    assert tuple(duration.explicit_bounds)[:3] == (0.01, 0.02, 0.04)
    tokens = {
        (p.attributes or {})["gen_ai.token.type"]: p
        for p in telemetry.points("gen_ai.client.token.usage")
    }
    assert set(tokens) == {"input", "output"}
    assert (tokens["input"].count, tokens["input"].sum) == (3, 3 * 150)
    assert (tokens["output"].count, tokens["output"].sum) == (3, 3 * 20)
    assert tuple(tokens["input"].explicit_bounds)[:3] == (1, 4, 16)
    (first,) = telemetry.points("gen_ai.client.operation.time_to_first_chunk")
    assert first.count == 3


async def test_metric_instruments_have_the_conventions_units(telemetry: Telemetry) -> None:
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
        await collect(rt, options())
    data = telemetry.reader.get_metrics_data()
    assert data is not None
    units = {
        m.name: m.unit
        for r in data.resource_metrics
        for s in r.scope_metrics
        if s.scope.name == "llmrt"
        for m in s.metrics
    }
    assert units == {
        "gen_ai.client.operation.duration": "s",
        "gen_ai.client.operation.time_to_first_chunk": "s",
        "gen_ai.client.token.usage": "{token}",
    }


# ---- the traceparent hop through the gateway ---------------------------------------------------


async def test_a_client_traceparent_parents_the_gateway_runtimes_span(
    telemetry: Telemetry,
) -> None:
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
        async with gateway(rt) as server, open_gateway_client(server.url) as client:
            async with client.stream(options(), traceparent=TRACEPARENT) as call:
                chunks = [chunk async for chunk in call]
            async with client.stream(options()) as call:  # none: a new trace
                more = [chunk async for chunk in call]
    assert chunks[-1] == Finish(reason=FinishStop()) == more[-1]
    traced, untraced = telemetry.spans()
    assert traced.context is not None and traced.parent is not None
    assert f"{traced.context.trace_id:032x}" == TRACE_ID
    assert f"{traced.parent.span_id:016x}" == PARENT_ID
    assert traced.parent.is_remote
    assert untraced.parent is None
    assert untraced.context is not None and f"{untraced.context.trace_id:032x}" != TRACE_ID


async def test_a_traceparent_reaches_every_attempt_of_a_retried_call(
    telemetry: Telemetry,
) -> None:
    attempts = 0

    def script(request: GenerateOptions) -> list[Any]:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            return [Raise(LlmError(ErrorCode.OVERLOADED, "busy"))]
        return text_script(["ok"])

    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        fast = NormalRetryPolicy(initial_delay_ms=5, max_delay_ms=5, jitter_ratio=0)
        await rt.register_adapter(["p"], ScriptedAdapter(script, retry_policy=fast))
        async with gateway(rt) as server, open_gateway_client(server.url) as client:
            async with client.stream_with_retry(options(), traceparent=TRACEPARENT) as call:
                _events = [event async for event in call]
    first, second = telemetry.spans()
    assert attrs_of(first)["error.type"] == "OVERLOADED"
    assert "error.type" not in attrs_of(second)
    for span in (first, second):
        assert span.context is not None and f"{span.context.trace_id:032x}" == TRACE_ID
        assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT_ID


@pytest.mark.parametrize(
    "bad",
    [
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # 00 has 4 fields
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
        "01-" + "a" * 300,  # past the length bound
    ],
)
async def test_a_malformed_traceparent_is_refused_with_bad_frame(
    telemetry: Telemetry, bad: str
) -> None:
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        adapter = ScriptedAdapter(text_script(["a"]))
        await rt.register_adapter(["p"], adapter)
        async with gateway(rt) as server, raw(server) as r:
            request = json.loads(llmrt.encode(options()))
            await r.send({"type": "call", "id": "c1", "request": request, "traceparent": bad})
            error = await r.until(lambda f: f["type"] == "error")
            assert (error["code"], error["id"]) == ("BAD_FRAME", "c1")
            assert "traceparent" in error["message"]
            # The connection serves on, and the refused call never started.
            await r.send({"type": "call", "id": "c2", "request": request})
            chunks = await r.chunks_of("c2")
            assert chunks[-1] == {"type": "finish", "reason": {"kind": "stop"}}
    assert len(adapter.requests) == 1
    assert len(telemetry.spans()) == 1


async def test_a_later_traceparent_version_with_more_fields_is_accepted(
    telemetry: Telemetry,
) -> None:
    later = f"01-{TRACE_ID}-{PARENT_ID}-01-what-comes-next"
    async with llmrt.open_runtime() as rt:
        rt.use(telemetry.middleware())
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
        async with gateway(rt) as server, raw(server) as r:
            request = json.loads(llmrt.encode(options()))
            await r.send({"type": "call", "id": "c1", "request": request, "traceparent": later})
            chunks = await r.chunks_of("c1")
    assert chunks[-1]["type"] == "finish"
    span = telemetry.span()
    assert span.context is not None and f"{span.context.trace_id:032x}" == TRACE_ID


async def test_the_client_refuses_a_malformed_traceparent_before_sending() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
        async with gateway(rt) as server, open_gateway_client(server.url) as client:
            with pytest.raises(ValueError, match="traceparent"):
                client.stream(options(), traceparent="not-a-traceparent")
            with pytest.raises(ValueError, match="traceparent"):
                client.stream_with_retry(options(), traceparent="00-zz")


async def test_without_the_middleware_a_traceparent_changes_nothing() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter(text_script(["a"])))
        async with gateway(rt) as server, open_gateway_client(server.url) as client:
            async with client.stream(options(), traceparent=TRACEPARENT) as call:
                chunks = [chunk async for chunk in call]
    assert chunks[-1] == Finish(reason=FinishStop())


# ---- packaging ---------------------------------------------------------------------------------


def test_llmrt_imports_without_opentelemetry() -> None:
    # A process where importing opentelemetry fails, as without the extra.
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "import llmrt, llmrt.actors, llmrt.actors.gateway.client, llmrt.actors.gateway\n"
        "import llmrt.actors.app.cli\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry') and sys.modules[m]]\n"
        "try:\n"
        "    import llmrt.actors.otel\n"
        "except ImportError:\n"
        "    print('otel needs the extra')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "otel needs the extra"


_SERVE_OTEL = """
import io, os, signal, sys, trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import llmrt
from llmrt.actors.app.cli import parse_args
from llmrt.actors.app.cli.serve import serve
from llmrt.actors.app import config as configuration
from llmrt.actors.gateway.client import open_gateway_client

# What opentelemetry-instrument (or the application) does: global SDK providers.
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

async def main():
    args = parse_args(["serve", "--port", "0", "--otel"])
    out = io.StringIO()
    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve, args, configuration.load_config(None), out, {})
        async with open_gateway_client(server.url) as client:
            options = llmrt.GenerateOptions(
                provider="demo", model="demo-1", messages=(llmrt.user_message("hi"),)
            )
            async with client.stream(options, traceparent=sys.argv[1]) as call:
                async for _ in call:
                    pass
        os.kill(os.getpid(), signal.SIGINT)  # how serve is stopped: it drains and returns
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    print(f"{span.context.trace_id:032x} {span.parent.span_id:016x}", span.name)
    print([line for line in out.getvalue().splitlines() if line.startswith("tracing:")])

trio.run(main)
"""


def test_serve_otel_traces_calls_into_the_global_providers() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SERVE_OTEL, TRACEPARENT],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    spans, banner = done.stdout.splitlines()
    assert spans == f"{TRACE_ID} {PARENT_ID} chat demo-1"
    assert "OpenTelemetry" in banner


def test_serve_otel_without_the_extra_says_how_to_get_it() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from llmrt.actors.app.cli import main\n"
        "sys.exit(main(['serve', '--port', '0', '--otel'], environ={}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert 'pip install "llmrt[otel]"' in done.stderr
    assert "listening" not in done.stdout
