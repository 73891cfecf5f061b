"""The Prometheus text exposition of ``/metrics``, written fast. No I/O.

prometheus-client's ``generate_latest`` validates and escapes every metric
and label name of every sample, which is most of a render: at the label
bound (5 routes x 101 models, about 18,000 samples, 1.6 MB) it took over
100 ms of CPU, holding the interpreter lock against the event loop for all
of it. llmrt's own families use a few fixed names, so `write_exposition`
checks each name once per family, escapes each distinct label value once,
and writes the same bytes as ``generate_latest`` (the tests compare the two
on the same families). Anything outside that shape (a name that needs
escaping, a timestamp, an OpenMetrics-only sample, another family type)
goes to ``generate_latest`` whole.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
from prometheus_client import generate_latest
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from .._statistics import HistogramSnapshot, ModelHistogram

__all__ = [
    "ModelHistograms",
    "Pace",
    "Pacer",
    "bucket_list",
    "le_label",
    "no_pace",
    "write_exposition",
    "write_with_prometheus_client",
]

#: Called once per unit of work (a sample, a series) by writers that run in a
#: worker thread; see `Pacer`.
Pace = Callable[[], None]

#: Go's float formatting, as prometheus-client writes sample values (untyped there).
_float_text: Callable[[float], str] = floatToGoString
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: Sample suffixes prometheus-client moves into gauges of their own.
_OPENMETRICS_ONLY = ("_created", "_gsum", "_gcount")


@attrs.define(eq=False)
class _Families:
    """A collector that exports a fixed list of families (one per exposition)."""

    families: Sequence[Metric]

    def collect(self) -> Iterable[Metric]:
        return self.families


def write_with_prometheus_client(families: Sequence[Metric]) -> bytes:
    """``generate_latest`` over ``families``: the reference `write_exposition` matches."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


@attrs.define(eq=False)
class Pacer:
    """Lets the event loop take the interpreter lock while a worker thread writes.

    A thread that computes holds the lock until the interpreter forces a
    switch (every 5 ms), and the event loop's thread waits that long each
    time it wants the lock back, which it does after every system call:
    a 40 ms render in a thread held the loop up to tens of milliseconds.
    Resting briefly every millisecond hands the lock over at once instead.
    """

    every: float = 0.001
    rest: float = 0.0002
    _count: int = attrs.field(default=0, init=False)
    _since: float = attrs.field(factory=time.perf_counter, init=False)

    def __call__(self) -> None:
        self._count += 1
        if self._count % 64:
            return  # reading the clock for every sample would cost more than it saves
        now = time.perf_counter()
        if now - self._since >= self.every:
            time.sleep(self.rest)
            self._since = time.perf_counter()


def no_pace() -> None:
    """The `Pace` of a writer in the event loop's own thread: it never rests."""


class ModelHistograms(HistogramMetricFamily):
    """A histogram family by ``provider`` and ``model`` whose samples are made only if asked.

    `write_exposition` writes it straight from the snapshots, as text. At the
    label bound its samples were 36,000 objects the collector tracks (a
    dict and a tuple per sample), made on every render: enough for the
    collector to run full collections, each holding the interpreter lock
    (and so the event loop) for over 15 ms. prometheus-client, and anything
    else reading ``samples``, gets the usual samples.
    """

    def __init__(self, name: str, documentation: str, series: Sequence[ModelHistogram]) -> None:
        self.series = series
        self._samples: list[Any] | None = None
        super().__init__(name, documentation, labels=["provider", "model"], unit="seconds")

    @property
    def samples(self) -> list[Any]:
        if self._samples is None:
            self._samples = []
            for entry in self.series:
                histogram = entry.histogram
                self.add_metric(
                    [entry.provider, entry.model], bucket_list(histogram), histogram.sum
                )
        return self._samples

    @samples.setter
    def samples(self, value: list[Any]) -> None:
        self._samples = value or None  # Metric.__init__ sets [] : made when asked


def le_label(bound: float) -> str:
    """A bucket's ``le`` label value."""
    return "+Inf" if bound == float("inf") else repr(float(bound))


def bucket_list(snapshot: HistogramSnapshot) -> list[tuple[str, float]]:
    """prometheus-client's bucket list: cumulative counts by upper bound."""
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip((*snapshot.bounds, math.inf), snapshot.counts, strict=True):
        running += count
        out.append((le_label(bound), running))
    return out


def _model_histograms(
    family: ModelHistograms, out: list[str], values: dict[str, str], pace: Pace
) -> None:
    name = family.name
    if _METRIC_NAME.fullmatch(name) is None:
        raise _Unusual
    doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
    out.append(f"# HELP {name} {doc}\n# TYPE {name} histogram\n")
    les: dict[float, str] = {}
    for entry in family.series:
        snapshot = entry.histogram
        escaped = []
        for raw in (entry.model, entry.provider):
            text = values.get(raw)
            if text is None:
                text = values[raw] = (
                    raw.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
                )
            escaped.append(text)
        tail = f'model="{escaped[0]}",provider="{escaped[1]}"'
        running = 0
        for bound, count in zip((*snapshot.bounds, math.inf), snapshot.counts, strict=True):
            pace()
            running += count
            le = les.get(bound)
            if le is None:
                le = les[bound] = le_label(bound)
            out.append(f'{name}_bucket{{le="{le}",{tail}}} {_float_text(running)}\n')
        if snapshot.bounds and snapshot.bounds[0] < 0:
            continue  # as prometheus-client: no count and sum with negative buckets
        out.append(f"{name}_count{{{tail}}} {_float_text(running)}\n")
        out.append(f"{name}_sum{{{tail}}} {_float_text(snapshot.sum)}\n")


class _Unusual(Exception):
    """A family outside the fast writer's shape."""


def _label_name(name: str) -> str:
    if _LABEL_NAME.fullmatch(name) is None or name.startswith("__"):
        raise _Unusual
    return name


def _family(
    metric: Metric, out: list[str], values: dict[str, str], texts: dict[float, str], pace: Pace
) -> None:
    name, kind = metric.name, metric.type
    if kind == "counter":
        shown = name + "_total"
    elif kind in ("gauge", "histogram"):
        shown = name
    else:
        raise _Unusual
    if _METRIC_NAME.fullmatch(shown) is None:
        raise _Unusual
    doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
    out.append(f"# HELP {shown} {doc}\n# TYPE {shown} {kind}\n")
    sample_names: dict[str, str] = {}
    orders: dict[tuple[str, ...], tuple[str, ...]] = {}
    for sample in metric.samples:
        pace()
        if sample.timestamp is not None:
            raise _Unusual
        sample_name = sample_names.get(sample.name)
        if sample_name is None:
            if any(sample.name == name + suffix for suffix in _OPENMETRICS_ONLY):
                raise _Unusual
            if _METRIC_NAME.fullmatch(sample.name) is None:
                raise _Unusual
            sample_name = sample_names[sample.name] = sample.name
        value = texts.get(sample.value)
        if value is None:
            value = _float_text(sample.value)
            if sample.value != 0:  # 0 and -0.0 are one key but two texts
                texts[sample.value] = value
        labels = sample.labels
        if not labels:
            out.append(f"{sample_name} {value}\n")
            continue
        keys = tuple(labels)
        order = orders.get(keys)
        if order is None:
            order = orders[keys] = tuple(sorted(_label_name(key) for key in keys))
        parts = []
        for key in order:
            raw = labels[key]
            escaped = values.get(raw)
            if escaped is None:
                escaped = values[raw] = (
                    raw.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
                )
            parts.append(f'{key}="{escaped}"')
        out.append(f"{sample_name}{{{','.join(parts)}}} {value}\n")


def write_exposition(families: Sequence[Metric], pace: Pace = no_pace) -> bytes:
    """The Prometheus text exposition of ``families``, as ``generate_latest`` writes it.

    ``pace``: called once per sample (a `Pacer` in a worker thread).
    """
    out: list[str] = []
    values: dict[str, str] = {}
    texts: dict[float, str] = {}
    try:
        for metric in families:
            if type(metric) is ModelHistograms:
                _model_histograms(metric, out, values, pace)
            else:
                _family(metric, out, values, texts, pace)
    except _Unusual:
        return write_with_prometheus_client(families)
    return "".join(out).encode("utf-8")
