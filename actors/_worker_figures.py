"""The figures directory of ``llmrt serve --workers``: how ``/metrics`` on any worker sums all.

Each worker writes its statistics snapshot to ``worker-<slot>-<pid>.json`` in
a directory private to the supervisor (`SharedFigures.publish`, every
`SNAPSHOT_SECONDS`); a scrape reads the others' files and sums them with its
own fresh figures (`SharedFigures.combine`). When a worker dies the
supervisor folds its last snapshot into ``retired.json`` (`retire`), gauges
at zero, so counters never go backwards over a restart. Files are replaced
atomically: a reader sees a whole old or a whole new snapshot.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import attrs
import msgspec
from prometheus_client.core import Metric

from ._worker_sum import merge_values, retired, runtime_statistics, worker_families
from .gateway._metrics import Figures, metric_families
from .gateway._snapshot import StatisticsValue, statistics_value

__all__ = ["SNAPSHOT_SECONDS", "SharedFigures", "retire"]

#: How often each worker writes its statistics snapshot for the others' scrapes.
SNAPSHOT_SECONDS = 1.0
_RETIRED = "retired.json"


class _Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    slot: int
    pid: int
    value: StatisticsValue


def _write_atomically(path: Path, data: bytes) -> None:
    # Readers see the old file or the new one, never half of one.
    # A scratch name of its own per process and thread: two writers never share one.
    scratch = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    scratch.write_bytes(data)
    os.replace(scratch, path)


def _read_snapshot(path: Path) -> _Snapshot | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=_Snapshot)
    except (OSError, msgspec.DecodeError):
        return None  # removed meanwhile (its worker was retired), or not ours


def retire(figures_dir: Path, slot: int, pid: int) -> None:
    """Fold a dead worker's last snapshot into ``retired.json`` (the supervisor does this)."""
    path = figures_dir / f"worker-{slot}-{pid}.json"
    dead = _read_snapshot(path)
    if dead is None:
        return
    total = figures_dir / _RETIRED
    before = _read_snapshot(total)
    values = [retired(dead.value)] + ([before.value] if before is not None else [])
    merged = _Snapshot(slot=-1, pid=0, value=merge_values(values))
    _write_atomically(total, msgspec.json.encode(merged))
    path.unlink(missing_ok=True)


@attrs.define(eq=False)
class SharedFigures:
    """One worker's side of the figures directory: it publishes, and sums at scrape time."""

    figures_dir: Path
    slot: int
    pid: int = attrs.field(factory=os.getpid)

    @property
    def path(self) -> Path:
        return self.figures_dir / f"worker-{self.slot}-{self.pid}.json"

    def publish(self, figures: Figures) -> None:
        """Write this worker's snapshot (blocking file I/O: call it in a thread)."""
        value = statistics_value(figures.runtime, figures.gateway)
        data = msgspec.json.encode(_Snapshot(slot=self.slot, pid=self.pid, value=value))
        _write_atomically(self.path, data)

    def combine(self, figures: Figures) -> list[Metric]:
        """Every family of a scrape: this worker's fresh figures plus the others' files.

        Runs in the scrape's worker thread (`llmrt.actors.gateway._metrics.Combine`).
        """
        own = statistics_value(figures.runtime, figures.gateway)
        live: list[tuple[int, StatisticsValue]] = [(self.slot, own)]
        values = [own]
        for path in sorted(self.figures_dir.glob("*.json")):
            if path == self.path:
                continue
            snapshot = _read_snapshot(path)
            if snapshot is None:
                continue
            values.append(snapshot.value)
            if path.name != _RETIRED:
                live.append((snapshot.slot, snapshot.value))
        merged = merge_values(values)
        assert merged.gateway is not None
        total = Figures(figures.version, runtime_statistics(merged), merged.gateway)
        return [*metric_families(total), *worker_families(live)]
