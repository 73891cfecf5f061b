"""The fast ``/metrics`` writer writes exactly what prometheus-client's ``generate_latest`` does.

prometheus-client is the oracle: the same families go through both writers
and the bytes must be equal, for llmrt's own families at the label bound,
for hostile label values (quotes, backslashes, newlines, any Unicode), for
awkward numbers, and for families outside the fast shape (which the fast
writer hands to prometheus-client whole).
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    SummaryMetricFamily,
)

import llmrt
from llmrt.actors._statistics import HistogramSnapshot, ModelHistogram
from llmrt.actors.gateway import Limits
from llmrt.actors.gateway._connection import GatewayState
from llmrt.actors.gateway._exposition import (
    ModelHistograms,
    write_exposition,
    write_with_prometheus_client,
)
from llmrt.actors.gateway._metrics import Figures, metric_families


def same(families: list[Metric]) -> bytes:
    fast = write_exposition(families)
    assert fast == write_with_prometheus_client(families)
    return fast


async def test_llmrt_families_at_the_label_bound() -> None:
    async with llmrt.open_runtime() as rt:
        stats = rt._core.stats
        for p in range(5):
            for m in range(101):
                series = stats.series(f"route-{p}", f'model "{m}"\\\n', routed=True)
                series.counters.started += m
                series.counters.finished["error", "RATE_LIMIT"] += 1
                series.first_chunk.observe(0.2 * m)
                series.duration.observe(1e9 * m)
        state = GatewayState(runtime=rt, limits=Limits(), version='1.0 "x"', token=None)
        body = same(metric_families(Figures.read(state)))
    assert body.count(b"\n") > 18_000


label_values = st.text(st.characters(codec="utf-8"), max_size=12)
numbers = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.tuples(label_values, label_values, numbers), max_size=8),
    doc=label_values,
)
def test_any_label_values_and_numbers(values: list[tuple[str, str, float]], doc: str) -> None:
    counter = CounterMetricFamily("c", doc, labels=["provider", "model"])
    gauge = GaugeMetricFamily("g", doc, labels=["z", "a"])
    for a, b, number in values:
        counter.add_metric([a, b], number)
        gauge.add_metric([a, b], number)
    histogram = HistogramMetricFamily("h", doc, labels=["model"], unit="seconds")
    for a, _, number in values:
        histogram.add_metric([a], [("0.5", 1), ("+Inf", 2)], float(number))
    models = ModelHistograms(
        "llmrt_x",
        doc,
        [
            ModelHistogram(
                provider=a,
                model=b,
                histogram=HistogramSnapshot(bounds=(0.5,), counts=(1, 2), sum=float(number)),
            )
            for a, b, number in values
        ],
    )
    same([counter, gauge, histogram, models, GaugeMetricFamily("plain", doc, value=3)])


def test_families_outside_the_fast_shape_go_to_prometheus_client() -> None:
    summary = SummaryMetricFamily("s", "a summary", count_value=2, sum_value=1.5)
    info = InfoMetricFamily("i", "info", value={"version": "1"})
    odd_name = GaugeMetricFamily("odd.name", "needs escaping", value=1)
    created = CounterMetricFamily("made", "with a created sample", value=1, created=12.5)
    for extra in (summary, info, odd_name, created):
        same([GaugeMetricFamily("before", "x", value=math.pi), extra])
