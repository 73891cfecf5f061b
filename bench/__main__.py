"""``python -m bench [suite ...] [--quick]``: run suites, then draw the plots and the README.

Without suite names every suite runs. Each suite runs in its own process
(see ``_suites``) with a progress line per stage: the script's own output,
prefixed with the suite and the elapsed time, and a "still running" line
when a stage is silent for a while.

Where things go:

* a full run: JSON in ``bench/results/``, PNGs in ``bench/plots/``, and the
  generated sections of ``bench/README.md`` rewritten;
* ``--quick`` (a smoke run: does every workload still work?): all of it under
  ``bench/.quick/`` (ignored by git), so CI leaves the checkout clean and the
  committed figures are never replaced by smoke-sized ones;
* ``--out DIR``: all of it under ``DIR``;
* ``--report-only``: no benchmark runs; plots and README from the JSON there.

The exit status is 1 only when a workload broke (a script failed, wrote no
JSON, or its JSON shows failed streams), never because a figure missed its
target: misses are stated in the README instead.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import _figures, _readme
from bench._suites import HERE, SUITES, Suite, select

#: A stage silent for this long gets a "still running" line.
QUIET_S = 5.0


@dataclass
class Outcome:
    suite: Suite
    seconds: float
    returncode: int
    json_path: Path
    broken: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.broken


@dataclass(frozen=True)
class Layout:
    results: Path
    plots: Path
    readme: Path


def layout(quick: bool, out: Path | None) -> Layout:
    if out is not None:
        return Layout(out / "results", out / "plots", out / "README.md")
    if quick:
        root = HERE / ".quick"
        return Layout(root / "results", root / "plots", root / "README.md")
    return Layout(HERE / "results", HERE / "plots", HERE / "README.md")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run benchmark suites, write JSON per suite, draw plots, regenerate README.",
    )
    names = ", ".join(s.name + (f" ({'/'.join(s.aliases)})" if s.aliases else "") for s in SUITES)
    parser.add_argument("suites", nargs="*", metavar="suite", help=f"any of: {names}; none: all")
    parser.add_argument(
        "--quick", action="store_true", help="smoke sizes; output under bench/.quick/"
    )
    parser.add_argument("--out", type=Path, help="write results/, plots/ and README.md here")
    parser.add_argument(
        "--report-only", action="store_true", help="run nothing: plots and README from the JSON"
    )
    parser.add_argument("--list", action="store_true", help="list the suites and exit")
    args = parser.parse_args(argv)
    try:
        args.selected = select(args.suites)
    except ValueError as exc:
        parser.error(str(exc))
    return args


class _Progress:
    """Prints a suite's output lines with the elapsed time; fills silences with a tick."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = time.monotonic()
        self.last = self.started
        self._done = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True)

    def __enter__(self) -> _Progress:
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._ticker.join()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def line(self, text: str) -> None:
        self.last = time.monotonic()
        print(f"  {self.label} {self.elapsed():6.1f}s | {text}", flush=True)

    def _tick(self) -> None:
        while not self._done.wait(1.0):
            if time.monotonic() - self.last >= QUIET_S:
                self.last = time.monotonic()
                print(f"  {self.label} {self.elapsed():6.1f}s | ... still running", flush=True)


def run_suite(suite: Suite, quick: bool, results: Path, index: str) -> Outcome:
    argv = [sys.executable, *suite.argv(quick, results)]
    path = results / suite.json_name(quick)
    before = path.stat().st_mtime_ns if path.exists() else None
    print(f"[{index}] {suite.name}: {suite.what}", flush=True)
    env = {**os.environ, **suite.env(quick, results), "PYTHONUNBUFFERED": "1"}
    with _Progress(suite.name) as progress:
        proc = subprocess.Popen(
            argv,
            cwd=HERE.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        assert proc.stdout is not None
        tail: list[str] = []
        for raw in proc.stdout:
            text = raw.rstrip()
            tail = [*tail[-19:], text]
            if text:
                progress.line(text)
        code = proc.wait()
        seconds = progress.elapsed()
    outcome = Outcome(suite, seconds, code, path)
    if code != 0:
        outcome.broken.append(f"exit status {code}; last lines:\n" + "\n".join(tail))
    elif not path.exists() or path.stat().st_mtime_ns == before:
        outcome.broken.append(f"wrote no {path.name}")
    elif suite.check is not None:
        outcome.broken.extend(suite.check(_figures.load(path) or {}))
    verdict = "ok" if outcome.ok else "BROKEN: " + "; ".join(outcome.broken)
    print(f"[{index}] {suite.name}: {verdict} ({seconds:.1f} s)\n", flush=True)
    return outcome


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for s in SUITES:
            print(f"{s.name:10s} {s.what} -> results/{s.full_json}")
        return 0
    where = layout(args.quick, args.out)
    where.results.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    outcomes: list[Outcome] = []
    if not args.report_only:
        n = len(args.selected)
        for i, suite in enumerate(args.selected, 1):
            outcomes.append(run_suite(suite, args.quick, where.results, f"{i}/{n}"))
    runs: dict[str, dict[str, Any]] = {
        o.suite.name: {"seconds": o.seconds, "ok": o.ok, "broken": o.broken} for o in outcomes
    }
    print("[plots] drawing from the JSON", flush=True)
    figures = _figures.draw_all(where.results, where.plots, args.quick)
    for fig in figures:
        print(f"  {fig.path.name}: {fig.status}", flush=True)
    _readme.regenerate(where.readme, where.results, where.plots, figures, args.quick, runs)
    print(f"[readme] {where.readme}", flush=True)
    broken = [o for o in outcomes if not o.ok]
    total = time.monotonic() - started
    if broken:
        print(f"BROKEN: {', '.join(o.suite.name for o in broken)} ({total:.0f} s)")
        return 1
    print(f"done: {len(outcomes)} suites in {total:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
