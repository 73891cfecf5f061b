"""Series out of the suites' JSON, and the PNG plots drawn from them.

Each plot draws what the JSON holds. A missing file, a missing section or a
client a run did not measure is drawn as "not measured" (in the legend, or
across an empty plot) instead of failing: the README is regenerated from
whatever runs exist. The same series feed the README's tables (``_readme``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The clients of the HTTP plots, in legend order.
CLIENTS = ("llmrt", "floor", "httpx", "openai", "litellm")
LABELS = {
    "llmrt": "llmrt",
    "floor": "raw-trio floor",
    "httpx": "raw httpx (trio)",
    "openai": "openai SDK (asyncio)",
    "litellm": "LiteLLM (asyncio)",
    "llmrt-served": "llmrt (served)",
}

#: One colour per client in every plot.
COLORS = {"llmrt": "C0", "floor": "C1", "httpx": "C2", "openai": "C3", "litellm": "C4"}

Series = dict[str, list[tuple[float, float]]]


def load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def results_name(name: str, quick: bool) -> str:
    """``http`` -> ``http.json`` or ``http-quick.json``."""
    return f"{name}-quick.json" if quick else f"{name}.json"


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# ---- series ------------------------------------------------------------------------------------


def _stream_runs(http: dict[str, Any]) -> list[tuple[int, str, dict[str, Any]]]:
    """(streams, client, summary) for every run of bench_http.py's scaling sweep.

    Only the sweep: the concurrency section runs at another pacing, and points
    of different pacing on one line would read as a trend that is not there.
    """
    out: list[tuple[int, str, dict[str, Any]]] = []
    for client, by_size in ((http.get("scaling") or {}).get("results") or {}).items():
        for size, summary in (by_size or {}).items():
            if isinstance(summary, dict):
                out.append((int(size), client, summary))
    return out


def sweep(http: dict[str, Any]) -> str:
    """The sweep's sizes and pacing, for captions: ``1,000 streams 200 ms apart, ...``."""
    sizes = (http.get("scaling") or {}).get("sizes") or []
    return ", ".join(
        f"{s['streams']:,} streams with events {s['delay_s'] * 1e3:g} ms apart" for s in sizes
    )


def cpu_per_chunk(http: dict[str, Any]) -> Series:
    """Client CPU µs per chunk vs concurrent streams; one stream is the per-event run.

    A run cut at its deadline (a client that cannot keep up) or with failed
    streams has no comparable figure and is left out.
    """
    series: Series = {}
    per_event = ((http.get("per-chunk") or {}).get("per-event") or {}).get("results") or {}
    for client, r in per_event.items():
        y = _num(r.get("median_us_per_chunk"))
        if y is not None:
            series.setdefault(client, []).append((1, y))
    for streams, client, summary in _stream_runs(http):
        if summary.get("errors") or not summary.get("finished", True):
            continue  # a run cut at its deadline or with failures has no comparable figure
        y = _num(summary.get("cpu_us_per_chunk"))
        if y is not None:
            series.setdefault(client, []).append((streams, y))
    return {k: sorted(v) for k, v in series.items()}


def rss_per_stream(http: dict[str, Any]) -> Series:
    """Peak RSS growth over the idle client, KiB per concurrent stream."""
    series: Series = {}
    for streams, client, summary in _stream_runs(http):
        peak, before = _num(summary.get("peak_rss_mib")), _num(summary.get("rss_before_mib"))
        if peak is None or before is None or summary.get("errors"):
            continue
        if not summary.get("finished", True):  # cut at its deadline: not all streams were open
            continue
        series.setdefault(client, []).append((streams, (peak - before) * 1024 / streams))
    return {k: sorted(v) for k, v in series.items()}


def cancel_close(http: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per client: the cancel -> upstream-saw-close samples (ms) and how many never closed."""
    out: dict[str, dict[str, Any]] = {}
    for client, r in ((http.get("abandon") or {}).get("results") or {}).items():
        out[client] = {
            "ms": sorted(float(v) for v in r.get("latencies_ms") or []),
            "streams": r.get("streams"),
            "not_closed": r.get("not_closed_in_window", 0),
            "window_s": r.get("window_s"),
        }
    return out


def abort_all(runtime: dict[str, Any]) -> list[dict[str, Any]]:
    """Abort-all-N rows: the runtime's time beside the bare-trio floor's, same run."""
    conc = runtime.get("concurrency") or {}
    rt = (conc.get("runtime") or {}).get("abort_all") or {}
    floor = (conc.get("floor") or {}).get("cancel_all") or {}
    rows = []
    for key, label, floor_key in (
        ("demo", "streaming demo calls", "gc-default"),
        ("gc-default", "calls stalled in the adapter", "gc-default"),
        ("gc-frozen", "stalled, in-flight objects frozen", "gc-frozen"),
    ):
        ms = _num((rt.get(key) or {}).get("abort_to_last_finish_ms"))
        fl = _num((floor.get(floor_key) or {}).get("cancel_all_to_last_resume_ms"))
        if ms is None and fl is None:
            continue
        rows.append(
            {
                "case": label,
                "calls": conc.get("calls"),
                "runtime_ms": ms,
                "floor_ms": fl,
                "ratio": ms / fl if ms is not None and fl else None,
            }
        )
    return rows


def gateway_rate(gateway: dict[str, Any]) -> Series:
    """Gateway chunks (frames) per second vs client calls, by how the clients connect."""
    series: Series = {}
    for row in gateway.get("throughput") or []:
        if row.get("path") == "gateway JSON" and _num(row.get("chunks_per_s")):
            series.setdefault("one websocket", []).append((1, float(row["chunks_per_s"])))
    mux = gateway.get("multiplexed") or {}
    if _num(mux.get("chunks_per_s")) and mux.get("calls"):
        series.setdefault("one websocket", []).append((mux["calls"], float(mux["chunks_per_s"])))
    for key, label in (
        ("clients", "a websocket per call, clients in the gateway's process"),
        ("clients_separate", "a websocket per call, clients in another process"),
    ):
        c = gateway.get(key) or {}
        if _num(c.get("chunks_per_s")) and c.get("clients"):
            series[label] = [(c["clients"], float(c["chunks_per_s"]))]
    return {k: sorted(v) for k, v in series.items()}


# ---- plots -------------------------------------------------------------------------------------


@dataclass
class Figure:
    key: str
    title: str
    caption: str
    path: Path
    source: str
    status: str = "not drawn"
    not_measured: list[str] = field(default_factory=list)

    @property
    def drawn(self) -> bool:
        return self.status == "drawn"


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    return plt


def _empty(ax: Any, why: str) -> None:
    ax.text(0.5, 0.5, f"not measured\n({why})", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _lines(
    ax: Any, series: Series, names: tuple[str, ...] | None, labels: dict[str, str]
) -> list[str]:
    missing = []
    for name in names if names is not None else tuple(series):
        points = series.get(name)
        label = labels.get(name, name)
        if not points:
            missing.append(label)
            ax.plot([], [], linestyle="none", label=f"{label}: not measured")
            continue
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, marker="o", label=label, color=COLORS.get(name))
    return missing


def _ticks_at_data(ax: Any, series: Series) -> None:
    """Label the x axis at the sizes measured (a log axis would skip 20, 50, 5,000)."""
    from matplotlib.ticker import NullLocator

    ax.set_xticks(sorted({x for points in series.values() for x, _ in points}))
    ax.xaxis.set_minor_locator(NullLocator())


def _plain_log(axis: Any, minor: bool = False) -> None:
    """A log axis labelled 1, 10, 100 ... rather than 10^0, 10^1 (``minor``: 20, 50 too)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:,g}")
    axis.set_major_formatter(plain)
    axis.set_minor_formatter(plain if minor else NullFormatter())


def draw_all(results: Path, plots: Path, quick: bool) -> list[Figure]:
    """Draw every plot the JSON in ``results`` allows; returns one `Figure` per plot."""
    http = load(results / results_name("http", quick))
    runtime = load(results / results_name("runtime", quick))
    gateway = load(results / results_name("gateway", quick))
    figures = [
        Figure(
            "cpu",
            "Client CPU per chunk vs concurrent streams",
            "Client process CPU µs per text chunk. One stream: a long stream with each event its "
            "own network read; more: 100-chunk streams ("
            + (sweep(http) if http else "no sweep")
            + "). The pacing differs between points, so compare clients at one point rather "
            "than reading a trend along a line; a client cut at the sweep's deadline is "
            "not drawn.",
            plots / "cpu_per_chunk.png",
            results_name("http", quick),
        ),
        Figure(
            "rss",
            "RSS per stream vs concurrent streams",
            "Peak RSS growth of the client process over its idle size, KiB per in-flight stream.",
            plots / "rss_per_stream.png",
            results_name("http", quick),
        ),
        Figure(
            "cancel",
            "Cancel -> upstream saw the close (CDF)",
            "The consumer leaves a stream; time until the upstream process sees the connection "
            "close. A client that never closed within the window is named in the legend.",
            plots / "cancel_close_cdf.png",
            results_name("http", quick),
        ),
        Figure(
            "abort",
            "Abort all N calls vs the bare-trio floor",
            "Time from the abort until the last call has finished, beside the same number of "
            "bare trio cancel scopes, same run.",
            plots / "abort_all.png",
            results_name("runtime", quick),
        ),
        Figure(
            "gateway",
            "Gateway frames/s vs clients",
            "Chunks (one frame each) per second through the websocket gateway.",
            plots / "gateway_rate.png",
            results_name("gateway", quick),
        ),
    ]
    plt = _pyplot()
    if plt is None:
        for fig in figures:
            fig.status = "matplotlib not installed (pip install '.[bench]')"
        return figures
    plots.mkdir(parents=True, exist_ok=True)
    drawers: dict[str, tuple[dict[str, Any] | None, Callable[[Any, dict[str, Any]], list[str]]]] = {
        "cpu": (http, lambda ax, d: _draw_xy(ax, cpu_per_chunk(d), "µs/chunk")),
        "rss": (http, lambda ax, d: _draw_xy(ax, rss_per_stream(d), "KiB per stream")),
        "cancel": (http, _draw_cdf),
        "abort": (runtime, _draw_abort),
        "gateway": (gateway, _draw_gateway),
    }
    for fig in figures:
        data, draw = drawers[fig.key]
        f, ax = plt.subplots(figsize=(7.5, 4.5), dpi=100)
        ax.set_title(fig.title)
        if data is None:
            _empty(ax, f"no {fig.source}")
            fig.not_measured = ["everything"]
        else:
            fig.not_measured = draw(ax, data)
        f.tight_layout()
        f.savefig(fig.path)
        plt.close(f)
        fig.status = "drawn"
    return figures


def _draw_xy(ax: Any, series: Series, ylabel: str) -> list[str]:
    if not series:
        _empty(ax, "no multi-stream runs in the JSON")
        return list(CLIENTS)
    missing = _lines(ax, series, CLIENTS, LABELS)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax.xaxis)
    _plain_log(ax.yaxis, minor=True)
    _ticks_at_data(ax, series)
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return missing


def _draw_cdf(ax: Any, http: dict[str, Any]) -> list[str]:
    data = cancel_close(http)
    if not data:
        _empty(ax, "no abandonment section")
        return list(CLIENTS)
    missing = []
    for client in CLIENTS:
        label = LABELS[client]
        d = data.get(client)
        if d is None:
            missing.append(label)
            ax.plot([], [], linestyle="none", label=f"{label}: not measured")
        elif not d["ms"]:
            ax.plot([], [], linestyle="none", label=f"{label}: never closed ({d['not_closed']})")
        else:
            ms = d["ms"]
            n = len(ms) + (d["not_closed"] or 0)
            fractions = [(i + 1) / n for i in range(len(ms))]
            ax.step(ms, fractions, where="post", label=label, color=COLORS[client])
    ax.set_xscale("log")
    _plain_log(ax.xaxis)
    ax.set_xlabel("ms from leaving the stream to the upstream seeing the close")
    ax.set_ylabel("fraction of streams")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return missing


def _draw_abort(ax: Any, runtime: dict[str, Any]) -> list[str]:
    rows = abort_all(runtime)
    if not rows:
        _empty(ax, "no concurrency section")
        return ["llmrt", "floor"]
    xs = range(len(rows))
    width = 0.38
    rt = [r["runtime_ms"] or 0 for r in rows]
    fl = [r["floor_ms"] or 0 for r in rows]
    ax.bar([x - width / 2 for x in xs], rt, width, label="llmrt abort", color=COLORS["llmrt"])
    fl_label = "bare trio: cancel scopes"
    ax.bar([x + width / 2 for x in xs], fl, width, label=fl_label, color=COLORS["floor"])
    for x, r in zip(xs, rows, strict=True):
        if r["ratio"] is not None:
            ax.annotate(
                f"{r['ratio']:.2f}x",
                (x - width / 2, r["runtime_ms"]),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    ax.set_xticks(list(xs), [r["case"] for r in rows], fontsize=8)
    ax.set_ylabel(f"ms until all {rows[0]['calls']:,} have finished")
    ax.legend(fontsize=8)
    return [k for k, v in (("llmrt", rt), ("floor", fl)) if not any(v)]


def _draw_gateway(ax: Any, gateway: dict[str, Any]) -> list[str]:
    series = gateway_rate(gateway)
    if not series:
        _empty(ax, "no gateway throughput in the JSON")
        return ["gateway"]
    _lines(ax, series, None, {})
    ax.set_xscale("log")
    _plain_log(ax.xaxis)
    _ticks_at_data(ax, series)
    ax.set_xlabel("calls streaming at once")
    ax.set_ylabel("chunks (frames) per second")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return []
