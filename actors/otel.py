"""OpenTelemetry for llmrt calls: one GenAI client span per call, and the client metrics.

Needs the extra: ``pip install "llmrt[otel]"`` (the OpenTelemetry *API*; the
application installs and configures the SDK and its exporters, or runs under
``opentelemetry-instrument``). Nothing else in llmrt imports this module, so
``import llmrt`` works without the extra.

    from llmrt.actors.otel import otel_middleware

    rt.use(otel_middleware())  # first, so it is the outermost middleware

Each call gets a span named ``chat {model}`` (kind CLIENT) with the attributes
of the OpenTelemetry GenAI semantic conventions (``gen_ai.*``, ``error.type``
= the llmrt failure code), a ``llmrt.first_chunk`` event at the first chunk,
and records ``gen_ai.client.operation.duration``,
``gen_ai.client.operation.time_to_first_chunk`` and
``gen_ai.client.token.usage``. docs/operations.md ("Tracing") lists them all.

Parent of the span: the ``traceparent`` a gateway call frame carried (see
`llmrt.actors._tracecontext`), else the OpenTelemetry context current where
the call was started (the call task copies its starter's context). The span
is made current in the call task, so spans opened below it (an instrumented
HTTP client in the adapter) become its children.

Per chunk the middleware compares the chunk's class a few times and passes
it on; everything else happens once per call (bench/bench_scaleout.py
measures both).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from llmrt import (
    ErrorCode,
    Finish,
    FinishAborted,
    FinishError,
    FinishMaxTokens,
    FinishStop,
    FinishToolCalls,
    GenerateOptions,
    StreamChunk,
    TokenUsage,
    UsageChunk,
    __version__,
)

from ._call import Call, Next, current_call
from ._tracecontext import TRACEPARENT

__all__ = ["OtelMiddleware", "otel_middleware", "current_traceparent"]

#: The instrumentation scope of the tracer and the meter.
SCOPE = "llmrt"

# Attribute names (GenAI semantic conventions; docs/operations.md says which version).
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
REQUEST_STOP_SEQUENCES: Final = "gen_ai.request.stop_sequences"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
TOKEN_TYPE: Final = "gen_ai.token.type"
ERROR_TYPE: Final = "error.type"
#: llmrt's own finish kind (``stop``, ``tool-calls``, ``max-tokens``, ``error``,
#: ``aborted``, ``consumer-left``): what the runtime's statistics count.
FINISH_KIND: Final = "llmrt.finish.kind"

OPERATION: Final = "chat"
#: The conventions define no first-chunk event: it is named in llmrt's namespace.
FIRST_CHUNK_EVENT: Final = "llmrt.first_chunk"

OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"
TOKEN_USAGE: Final = "gen_ai.client.token.usage"

# The bucket boundaries the conventions advise for these histograms.
_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
_TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip

#: llmrt's finish kinds that are a model's answer, under the names the
#: conventions use for finish reasons.
_FINISH_REASONS: Mapping[type, str] = {
    FinishStop: "stop",
    FinishToolCalls: "tool_calls",
    FinishMaxTokens: "length",
}
_KIND: Mapping[type, str] = {
    FinishStop: "stop",
    FinishToolCalls: "tool-calls",
    FinishMaxTokens: "max-tokens",
    FinishError: "error",
    FinishAborted: "aborted",
}

_PROPAGATOR = TraceContextTextMapPropagator()

#: Bounds on what callers choose (a gateway client sends any model name or
#: stop list up to the frame size): strings recorded are cut at this many
#: characters, and at most `MAX_STOPS` stop sequences are recorded.
MAX_TEXT = 256
MAX_STOPS = 8


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "\u2026"


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span (None when no span is recording).

    What to hand a gateway client so the gateway's span continues this trace:
    ``client.stream(options, traceparent=current_traceparent())``.
    """
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


class OtelMiddleware:
    """The middleware `otel_middleware` returns: ``rt.use(OtelMiddleware())`` works too.

    ``provider_names`` maps llmrt provider routes to ``gen_ai.provider.name``
    values (the conventions name providers ``openai``, ``anthropic``, ...);
    an unmapped route is used as it is. Providers default to the global
    tracer and meter providers.
    """

    __slots__ = (
        "_duration",
        "_first_chunk",
        "_provider_names",
        "_tokens",
        "_tracer",
    )

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        provider_names: Mapping[str, str] | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(SCOPE, __version__, tracer_provider)
        meter = metrics.get_meter(SCOPE, __version__, meter_provider)
        self._duration = meter.create_histogram(
            OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._first_chunk = meter.create_histogram(
            TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time from the start of a call to its first chunk.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._tokens = meter.create_histogram(
            TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self._provider_names = dict(provider_names or {})

    def __call__(self, request: GenerateOptions, nxt: Next) -> AsyncIterator[StreamChunk]:
        return self._traced(request, nxt)

    async def _traced(self, request: GenerateOptions, nxt: Next) -> AsyncIterator[StreamChunk]:
        call = current_call()
        traceparent = TRACEPARENT.get()
        parent = None if traceparent is None else _PROPAGATOR.extract({"traceparent": traceparent})
        provider = _bounded(self._provider_names.get(request.provider, request.provider))
        model = _bounded(request.model)
        attributes: dict[str, AttributeValue] = {
            OPERATION_NAME: OPERATION,
            PROVIDER_NAME: provider,
            REQUEST_MODEL: model,
        }
        if request.max_tokens is not None:
            attributes[REQUEST_MAX_TOKENS] = request.max_tokens
        if request.temperature is not None:
            attributes[REQUEST_TEMPERATURE] = request.temperature
        if request.stop:
            attributes[REQUEST_STOP_SEQUENCES] = [_bounded(s) for s in request.stop[:MAX_STOPS]]
        span = self._tracer.start_span(f"{OPERATION} {model}", parent, SpanKind.CLIENT, attributes)
        if call is not None:
            # The call task's context is its own copy and ends with the task, so
            # the span stays current for everything below without a detach
            # (which could not be paired across this generator's yields anyway).
            otel_context.attach(trace.set_span_in_context(span, parent))
        started = time.monotonic()
        first_chunk: float | None = None
        usage: TokenUsage | None = None
        content = False
        ended = False
        source = nxt(request)
        try:
            async for chunk in source:
                cls = chunk.__class__
                if cls is Finish:
                    if not ended:
                        ended = True
                        self._end(
                            span, call, request, provider, started, first_chunk, usage,
                            _finish_outcome(chunk, content),  # type: ignore[arg-type]
                        )  # fmt: skip
                else:
                    if cls is UsageChunk:
                        usage = chunk.usage  # type: ignore[union-attr]
                    elif not content:
                        content = True
                    if first_chunk is None:
                        first_chunk = time.monotonic() - started
                        span.add_event(
                            FIRST_CHUNK_EVENT, {RESPONSE_TIME_TO_FIRST_CHUNK: first_chunk}
                        )
                yield chunk
            if not ended:  # the runtime ends such a call with a PROTOCOL error
                ended = True
                self._end(
                    span, call, request, provider, started, first_chunk, usage,
                    ("error", None, ErrorCode.PROTOCOL.value),
                )  # fmt: skip
        except BaseException as exc:
            if not ended:
                ended = True
                self._end(
                    span, call, request, provider, started, first_chunk, usage,
                    _stopped_outcome(call, exc),
                )  # fmt: skip
            raise
        finally:
            if not ended:  # closed at a yield before the finish: GeneratorExit
                self._end(
                    span, call, request, provider, started, first_chunk, usage,
                    _stopped_outcome(call, None),
                )  # fmt: skip
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()

    def _end(
        self,
        span: trace.Span,
        call: Call | None,
        request: GenerateOptions,
        provider: str,
        started: float,
        first_chunk: float | None,
        usage: TokenUsage | None,
        outcome: tuple[str, str | None, str | None],
    ) -> None:
        """Finish the span and record the metrics, once per call. Never raises."""
        kind, reason, error = outcome
        duration = time.monotonic() - started
        # One set_attributes call: the SDK takes its span lock once.
        attributes: dict[str, AttributeValue] = {FINISH_KIND: kind}
        if reason is not None:
            attributes[RESPONSE_FINISH_REASONS] = [reason]
            # llmrt serves exactly the model asked for (no aliasing on the wire).
            attributes[RESPONSE_MODEL] = _bounded(request.model)
        if first_chunk is not None:
            attributes[RESPONSE_TIME_TO_FIRST_CHUNK] = first_chunk
        tokens: tuple[int, int] | None = None
        if usage is not None:
            cache_read = usage.cache_read_tokens or 0
            cache_write = usage.cache_write_tokens or 0
            # The conventions count cached input inside the input tokens; llmrt
            # keeps the three disjoint (see TokenUsage), so add them up.
            tokens = (usage.input_tokens + cache_read + cache_write, usage.output_tokens)
            attributes[USAGE_INPUT_TOKENS] = tokens[0]
            attributes[USAGE_OUTPUT_TOKENS] = tokens[1]
            if usage.cache_read_tokens is not None:
                attributes[USAGE_CACHE_READ_INPUT_TOKENS] = usage.cache_read_tokens
            if usage.cache_write_tokens is not None:
                attributes[USAGE_CACHE_CREATION_INPUT_TOKENS] = usage.cache_write_tokens
            if usage.reasoning_tokens is not None:
                attributes[USAGE_REASONING_OUTPUT_TOKENS] = usage.reasoning_tokens
        if error is not None:
            attributes[ERROR_TYPE] = error
            # The code only: a failure's message quotes the provider (redacted, but its text).
            span.set_status(Status(StatusCode.ERROR, error))
        span.set_attributes(attributes)
        span.end()

        # Metric attributes: the call's bounded labels (unknown providers and
        # models folded, as on /metrics), so callers cannot grow the series.
        route, model = call.labels if call is not None else (request.provider, request.model)
        route, model = _bounded(route), _bounded(model)
        labels: dict[str, AttributeValue] = {
            OPERATION_NAME: OPERATION,
            PROVIDER_NAME: self._provider_names.get(route, route),
            REQUEST_MODEL: model,
        }
        if reason is not None:
            labels[RESPONSE_MODEL] = model
        if first_chunk is not None:
            self._first_chunk.record(first_chunk, labels)
        if tokens is not None:
            self._tokens.record(tokens[0], {**labels, TOKEN_TYPE: "input"})
            self._tokens.record(tokens[1], {**labels, TOKEN_TYPE: "output"})
        if error is not None:
            labels[ERROR_TYPE] = error
        self._duration.record(duration, labels)


def _finish_outcome(finish: Finish, content: bool) -> tuple[str, str | None, str | None]:
    """(llmrt finish kind, finish reason, error type) of a finish the call delivered.

    Mirrors the runtime's one correction: a ``stop`` without content reaches
    the consumer as an ``EMPTY_RESPONSE`` error.
    """
    reason = finish.reason
    cls = type(reason)
    if cls is FinishError or cls is FinishAborted:
        return _KIND[cls], None, str(reason.failure.code)  # type: ignore[union-attr]
    if cls is FinishStop and not content:
        return "error", None, ErrorCode.EMPTY_RESPONSE.value
    return _KIND[cls], _FINISH_REASONS[cls], None


def _stopped_outcome(
    call: Call | None, exc: BaseException | None
) -> tuple[str, str | None, str | None]:
    """The outcome of a call whose stream ended without a finish."""
    stopped_by = call.stopped_by if call is not None else None
    if stopped_by is not None:  # an abort, the idle watchdog or shutdown
        return _finish_outcome(stopped_by, True)
    if exc is not None and isinstance(exc, Exception):
        # A middleware below this one raised: the consumer gets that exception.
        return "error", None, type(exc).__qualname__
    # Cancelled or closed with no cause: the consumer stopped reading.
    return "consumer-left", None, ErrorCode.ABORTED.value


def otel_middleware(
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    provider_names: Mapping[str, str] | None = None,
) -> Callable[[GenerateOptions, Next], AsyncIterator[StreamChunk]]:
    """A middleware that traces every call (see the module docstring and `OtelMiddleware`)."""
    return OtelMiddleware(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        provider_names=provider_names,
    )
