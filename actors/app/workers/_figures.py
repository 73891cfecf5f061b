"""The figures directory of ``llmrt serve --workers``: how ``/metrics`` on any worker sums all.

Each worker writes its statistics snapshot to ``worker-<slot>-<pid>.json`` in
a directory private to the supervisor (`SharedFigures.publish`, every
`SNAPSHOT_SECONDS`, and before each render). A scrape renders the sum of
every worker's file and ``retired.json`` (`SharedFigures.render`); when a
worker dies the supervisor folds its last snapshot into ``retired.json``
(`retire`), gauges at zero, and removes its file. Files are replaced
atomically: a reader sees a whole old or a whole new snapshot.

Summed counters never go down between scrapes, whichever worker answers
each one. Three rules make it so:

* Renders, and the supervisor's folds, take turns over every process: they
  hold an exclusive ``flock`` on ``render.lock``. A fold (write
  ``retired.json``, then remove the worker's file) is never seen half done,
  so a dead worker is counted exactly once; and each render reads files at
  least as new as the render before it.
* A worker's file only grows: the scraped worker publishes its fresh figures
  before it renders (so what any scrape showed of it is in its file, and in
  ``retired.json`` once it dies), and a write of older figures never
  replaces newer ones (`Figures.taken`).
* One rendered text, ``metrics.prom``, serves every worker's scrapes for
  `RENDER_SECONDS`; a worker's own cache would answer with older figures
  than another worker had already shown.

The model labels of the sum are bounded like one process's (``labels.json``,
see `llmrt.actors.app.workers._sum.admit_models`), retired workers included.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import msgspec
from prometheus_client.core import Metric

from ..._statistics import RuntimeStatistics
from ...gateway._exposition import Pacer, write_exposition
from ...gateway._metrics import Figures, metric_families
from ._sum import admit_models, fold_models, merge_values, retired, worker_families

__all__ = ["RENDER_SECONDS", "SNAPSHOT_SECONDS", "SharedFigures", "retire"]

#: How often each worker writes its statistics snapshot for the others' scrapes.
SNAPSHOT_SECONDS = 1.0
#: How long one rendered text answers every worker's scrapes (``time.monotonic``,
#: one clock for every process of the machine).
RENDER_SECONDS = 1.0
_RETIRED = "retired.json"
_LABELS = "labels.json"
_RENDERED = "metrics.prom"
_LOCK = "render.lock"
_WORKERS = "worker-*.json"


class _Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    slot: int
    pid: int
    value: RuntimeStatistics


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


class _Labels(msgspec.Struct, frozen=True):
    #: The model labels the sum keeps, by provider (see `admit_models`).
    models: dict[str, tuple[str, ...]] = {}


@contextmanager
def _turn(figures_dir: Path) -> Iterator[None]:
    """Hold the directory's lock: renders and folds of every process take turns.

    Blocking: call it in a thread. Closing the file releases the lock, so a
    worker killed while it renders does not keep it.
    """
    fd = os.open(figures_dir / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _bounded(figures_dir: Path, value: RuntimeStatistics) -> RuntimeStatistics:
    """``value`` within the sum's model-label bound; admits new names (hold `_turn`)."""
    path = figures_dir / _LABELS
    try:
        labels = msgspec.json.decode(path.read_bytes(), type=_Labels)
    except (OSError, msgspec.DecodeError):
        labels = _Labels()
    kept = admit_models(labels.models, value)
    if kept != labels.models:
        _write_atomically(path, msgspec.json.encode(_Labels(models=kept)))
    return fold_models(value, kept)


def retire(figures_dir: Path, slot: int, pid: int) -> None:
    """Fold a dead worker's last snapshot into ``retired.json`` (the supervisor does this)."""
    with _turn(figures_dir):
        path = figures_dir / f"worker-{slot}-{pid}.json"
        dead = _read_snapshot(path)
        if dead is None:
            return
        total = figures_dir / _RETIRED
        before = _read_snapshot(total)
        values = [retired(dead.value)] + ([before.value] if before is not None else [])
        merged = _Snapshot(slot=-1, pid=0, value=_bounded(figures_dir, merge_values(values)))
        # Written before the worker's file goes, and under the lock: no render
        # sees the worker in neither file, or in both.
        _write_atomically(total, msgspec.json.encode(merged))
        path.unlink(missing_ok=True)


@attrs.define(eq=False)
class SharedFigures:
    """One worker's side of the figures directory: it publishes, and renders the sum."""

    figures_dir: Path
    slot: int
    pid: int = attrs.field(factory=os.getpid)
    #: The clock of `RENDER_SECONDS` (a test's own; else the machine's monotonic clock).
    now: Callable[[], float] = time.monotonic
    render_seconds: float = RENDER_SECONDS
    #: The newest figures written, and when they were read: publishing older
    #: ones (a thread that lost the race) changes nothing.
    _written: tuple[float, RuntimeStatistics] | None = attrs.field(default=None, init=False)
    _writing: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    @property
    def path(self) -> Path:
        return self.figures_dir / f"worker-{self.slot}-{self.pid}.json"

    def publish(self, figures: Figures) -> RuntimeStatistics:
        """Write this worker's snapshot unless newer figures are written already;
        returns the newest written. Blocking file I/O: call it in a thread."""
        with self._writing:
            if self._written is not None and figures.taken < self._written[0]:
                return self._written[1]
            value = figures.statistics()
            data = msgspec.json.encode(_Snapshot(slot=self.slot, pid=self.pid, value=value))
            _write_atomically(self.path, data)
            self._written = (figures.taken, value)
            return value

    def combine(self, figures: Figures) -> list[Metric]:
        """Every family of a sum: these figures plus the other workers' files.

        Admits new model labels (writes ``labels.json``). For one render hold
        the directory's lock, as `render` does.
        """
        return self._families(figures.statistics(), figures.version)

    def _families(self, own: RuntimeStatistics, version: str) -> list[Metric]:
        live: list[tuple[int, RuntimeStatistics]] = [(self.slot, own)]
        values = [own]
        paths = [*sorted(self.figures_dir.glob(_WORKERS)), self.figures_dir / _RETIRED]
        for path in paths:
            if path == self.path:
                continue
            snapshot = _read_snapshot(path)
            if snapshot is None:
                continue
            values.append(snapshot.value)
            if path.name != _RETIRED:
                live.append((snapshot.slot, snapshot.value))
        merged = _bounded(self.figures_dir, merge_values(values))
        assert merged.gateway is not None
        total = Figures(version, merged, merged.gateway)
        return [*metric_families(total), *worker_families(live)]

    def render(self, figures: Figures) -> bytes:
        """The ``/metrics`` text of every worker (`llmrt.actors.gateway._metrics.Render`).

        The text another worker rendered less than `render_seconds` ago, else
        a new one from this worker's figures (published first) and the
        others' files. Blocking: runs in the scrape's worker thread.
        """
        rendered = self.figures_dir / _RENDERED
        with _turn(self.figures_dir):
            try:
                stamp, _, body = rendered.read_bytes().partition(b"\n")
                if 0 <= self.now() - float(stamp) < self.render_seconds:
                    return body
            except (OSError, ValueError):
                pass  # none yet, or not ours
            own = self.publish(figures)
            body = write_exposition(self._families(own, figures.version), Pacer())
            _write_atomically(rendered, repr(self.now()).encode() + b"\n" + body)
            return body
