"""How `llmrt serve` sets up Python's cyclic garbage collector for its own process.

The library never touches the collector: an embedding application owns its
process. ``llmrt serve`` and its workers are applications, and at thousands
of concurrent calls the collector is a visible cost: there is no cyclic
garbage to find, yet every full collection scans every in-flight call's
objects, and the first generation fills every few hundred allocations. So
once start-up is done, a serving process moves everything allocated so far
(imports, configuration, adapters) out of the collector's sight with
`gc.freeze`, and raises the first threshold. ``--no-gc-tuning`` keeps
Python's defaults. ``python bench/bench_http.py --only scale`` measures what
it buys (the ``llmrt-served`` row beside ``llmrt``).

A process that ran a command line to its end (the ``llmrt`` command, a
worker) freezes everything before it exits (`freeze_for_exit`): interpreter
shutdown runs full collections that scan every object once more, a sixth of
a short command's CPU time (``llmrt providers``: 45 of 300 ms), and finds
no cycle worth breaking in a process about to end.
"""

from __future__ import annotations

import gc

__all__ = ["SERVE_THRESHOLDS", "collector_line", "freeze_for_exit", "tune_for_serving"]

#: ``gc.set_threshold`` for a serving process: young collections every 50,000
#: net allocations instead of 700, the older generations as Python has them.
SERVE_THRESHOLDS = (50_000, 10, 10)


def tune_for_serving() -> None:
    """Freeze what start-up allocated and raise the first threshold. For this process only."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVE_THRESHOLDS)


def collector_line() -> str:
    """What the serve banner says of the collector, as set now."""
    first = gc.get_threshold()[0]
    return (
        f"gc: {gc.get_freeze_count():,} start-up objects frozen, first threshold {first:,} "
        "(--no-gc-tuning keeps Python's defaults)"
    )


def freeze_for_exit() -> None:
    """Hide every object from the collector: for a process whose last act this is.

    Objects are still released as the interpreter clears its modules (reference
    counting runs as ever); only the collector's scans at exit are skipped.
    """
    gc.freeze()
