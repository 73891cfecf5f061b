"""Helpers shared by the bench scripts: timing statistics, tables, RSS, JSON.

Bench scripts run as ``python bench/<script>.py``, so this module is imported
as ``_common`` (the script's folder is first on ``sys.path``).
"""

from __future__ import annotations

import gc
import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Where the JSON goes: ``bench/results`` unless ``python -m bench`` points the
#: scripts elsewhere (a ``--quick`` run writes outside the tracked results).
RESULTS = Path(os.environ.get("LLMRT_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")


def sized(defaults: dict[str, Any]) -> dict[str, Any]:
    """``defaults`` with the sizes ``python -m bench`` passes in ``LLMRT_BENCH_SIZES`` (JSON).

    The runner's ``--quick`` is a smoke run (does every workload still work?)
    and asks for smaller sizes than a script's own ``--quick``; an unknown key
    is an error rather than a silently ignored size.
    """
    raw = os.environ.get("LLMRT_BENCH_SIZES")
    if not raw:
        return defaults
    extra = json.loads(raw)
    unknown = sorted(set(extra) - set(defaults))
    if unknown:
        raise SystemExit(f"LLMRT_BENCH_SIZES: unknown sizes {unknown}; known: {sorted(defaults)}")
    return {**defaults, **extra}


def percentiles(samples: Sequence[float], points: Sequence[int] = (50, 90, 99)) -> dict[str, float]:
    """``{"p50": ..., "p90": ..., "max": ...}`` by the nearest-rank method (no interpolation)."""
    ordered = sorted(samples)
    n = len(ordered)
    out = {f"p{p}": ordered[min(n - 1, max(0, -(-p * n // 100) - 1))] for p in points}
    out["max"] = ordered[-1]
    return out


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def rss_kib() -> int:
    """Current resident set size of this process, in KiB (Linux ``VmRSS``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS line in /proc/self/status")


def peak_rss_kib() -> int:
    """Peak resident set size of this process, in KiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def environment() -> dict[str, Any]:
    """Versions and machine facts to store beside every figure."""
    import msgspec
    import trio

    import llmrt

    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "trio": trio.__version__,
        "msgspec": msgspec.__version__,
        "llmrt": llmrt.__version__,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "nproc": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table; the first column is left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [row[0].ljust(widths[0])]
        parts += [row[i].rjust(widths[i]) for i in range(1, len(row))]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def write_json(name: str, report: dict[str, Any]) -> Path:
    """Write ``report`` to ``bench/results/<name>`` and return the path."""
    path = RESULTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


class GcMeter:
    """Counts the cyclic garbage collector's runs and the time they took, while active.

    ``with GcMeter() as gcm: ...`` then ``gcm.summary()``: collections per
    generation, total milliseconds spent collecting, and how many objects the
    collections freed (cyclic garbage: near zero means the time went into
    scanning live objects, not into cleaning up cycles).
    """

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.collected = 0
        self.seconds = 0.0
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.collections[info["generation"]] += 1
            self.collected += info["collected"]

    def __enter__(self) -> GcMeter:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, Any]:
        return {
            "collections_by_generation": self.collections,
            "ms": self.seconds * 1e3,
            "objects_freed": self.collected,
        }


async def until_stdin_closes() -> None:
    """Return once this process's standard input is closed (a helper process's lifetime)."""
    import trio

    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with stdin:
        while await stdin.receive_some(1024):
            pass
