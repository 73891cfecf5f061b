"""How long the ``llmrt`` command takes to start, beside ``python -c pass`` as the floor.

Each case is a fresh process, run ``RUNS`` times with the cases interleaved
(one of each per round, so a noisy moment of a shared machine touches every
case alike):

- ``python -c pass``: the interpreter's own start, the floor;
- ``python -c "import trio"``: llmrt's one large dependency on its own;
- ``llmrt --help``;
- ``llmrt call hi``: a whole call, on an unpaced demo route (``--config``),
  so what is left beside the imports is the call itself.

Two figures per case, from separate runs: the **import time**, the sum of
the top-level entries ``python -X importtime`` reports (everything the
process imported, whenever it did), and the **wall time** from spawning the
process to its exit. Targets (issue 22): ``llmrt --help`` and ``llmrt call``
in at most 300 ms of import time each. Medians and p90 per case; the wall
times also as a ratio to the floor's.

Run: ``python bench/bench_startup.py [--quick] [--runs N]``; writes
``bench/results/startup.json`` (``startup-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import environment, median, percentiles, table, write_json

#: Import time each llmrt command may take (issue 22, item 6).
TARGET_IMPORT_MS = 300.0
RUNS = 21
QUICK_RUNS = 3


def llmrt_command() -> list[str]:
    """How to start ``llmrt``: its console script when installed beside this Python."""
    script = Path(sys.executable).parent / "llmrt"
    if script.is_file():
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "llmrt.actors.app.cli"]


def cases(config: Path) -> dict[str, list[str]]:
    """Each case's command line, after the interpreter (``-X importtime`` goes in between)."""
    llmrt = llmrt_command()[1:]
    return {
        "python -c pass (floor)": ["-c", "pass"],
        "python -c 'import trio'": ["-c", "import trio"],
        "llmrt --help": [*llmrt, "--help"],
        "llmrt call hi": [*llmrt, "call", "hi", "--config", str(config)],
    }


def import_ms(stderr: str) -> float:
    """The process's whole import time: the top-level entries of ``-X importtime``."""
    total = 0
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        _, cumulative, name = line[len("import time:") :].split("|")
        if cumulative.strip().isdigit() and name.startswith(" ") and not name.startswith("  "):
            total += int(cumulative)
    return total / 1000


def run_once(argv: list[str], *, importtime: bool, env: dict[str, str]) -> tuple[float, str]:
    command = [sys.executable, *(["-X", "importtime"] if importtime else []), *argv]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    wall = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, done.stderr


def summary(samples: list[float]) -> dict[str, Any]:
    p = percentiles(samples, (90,))
    return {
        "median": round(median(samples), 1),
        "p90": round(p["p90"], 1),
        "max": round(p["max"], 1),
        "samples": [round(x, 1) for x in samples],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RUNS} runs per case")
    parser.add_argument("--runs", type=int, default=None, help=f"runs per case (default {RUNS})")
    args = parser.parse_args(argv)
    runs = args.runs or (QUICK_RUNS if args.quick else RUNS)
    # No key, no colour, no inherited configuration: the same start every time.
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("LLMRT_CONFIG", None)
    env["NO_COLOR"] = "1"
    folder = Path(tempfile.mkdtemp(prefix="llmrt-startup-"))
    try:
        config = folder / "fast.toml"
        config.write_text('[[provider]]\nroute = "demo"\nadapter = "demo"\n')
        commands = cases(config)
        imports: dict[str, list[float]] = {name: [] for name in commands}
        walls: dict[str, list[float]] = {name: [] for name in commands}
        for command in commands.values():  # warm the bytecode caches, unmeasured
            run_once(command, importtime=False, env=env)
        for _ in range(runs):
            for name, command in commands.items():
                _, stderr = run_once(command, importtime=True, env=env)
                imports[name].append(import_ms(stderr))
                wall, _ = run_once(command, importtime=False, env=env)
                walls[name].append(wall)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    floor = "python -c pass (floor)"
    floor_wall = median(walls[floor])
    report: dict[str, Any] = {
        "environment": environment(),
        "command": "python bench/bench_startup.py" + (" --quick" if args.quick else ""),
        "runs": runs,
        "launcher": " ".join(Path(a).name for a in llmrt_command()),
        "cases": {},
        "targets": {},
    }
    rows = []
    for name in commands:
        imp, wall = summary(imports[name]), summary(walls[name])
        ratio = round(wall["median"] / floor_wall, 2) if floor_wall else None
        report["cases"][name] = {"import_ms": imp, "wall_ms": wall, "wall_over_floor": ratio}
        rows.append([name, imp["median"], imp["p90"], wall["median"], wall["p90"], ratio])
    for name in ("llmrt --help", "llmrt call hi"):
        got = report["cases"][name]["import_ms"]["median"]
        verdict = "MET" if got <= TARGET_IMPORT_MS else "MISSED"
        report["targets"][f"{name}: import <= {TARGET_IMPORT_MS:g} ms"] = (
            f"{verdict} ({got:g} ms median)" if not args.quick else f"NOT JUDGED ({got:g} ms)"
        )
    headers = ["case", "import ms", "p90", "wall ms", "p90", "wall / floor"]
    print(table(headers, rows))
    for target, verdict in report["targets"].items():
        print(f"{target}: {verdict}")
    name = "startup-quick.json" if args.quick else "startup.json"
    print("wrote", write_json(name, report))


if __name__ == "__main__":
    main()
