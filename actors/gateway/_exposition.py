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

import re
from collections.abc import Callable, Iterable, Sequence

import attrs
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

__all__ = ["write_exposition", "write_with_prometheus_client"]

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


class _Unusual(Exception):
    """A family outside the fast writer's shape."""


def _label_name(name: str) -> str:
    if _LABEL_NAME.fullmatch(name) is None or name.startswith("__"):
        raise _Unusual
    return name


def _family(
    metric: Metric, out: list[str], values: dict[str, str], texts: dict[float, str]
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


def write_exposition(families: Sequence[Metric]) -> bytes:
    """The Prometheus text exposition of ``families``, as ``generate_latest`` writes it."""
    out: list[str] = []
    values: dict[str, str] = {}
    texts: dict[float, str] = {}
    try:
        for metric in families:
            _family(metric, out, values, texts)
    except _Unusual:
        return write_with_prometheus_client(families)
    return "".join(out).encode("utf-8")
