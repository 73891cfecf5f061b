"""What pricing a call costs: the price lookup per call, and a call with and without it.

Run: ``python bench/bench_prices.py [--iterations N] [--calls C] [--repeats R]``

Measures the process's CPU time (``time.process_time_ns``: on a shared
machine, what this process spent, not what others took), per call:

* the lookup (`llmrt.actors._pricing.Pricer.price`) of one usage: a model of
  the price table; genai-prices models with a flat price (gpt-4.1), a tiered
  one (claude-sonnet-4-5) and one priced by the hour (deepseek-chat); a model
  no source knows (a cached miss); and, for reference, genai-prices' own
  calculation of the same gpt-4.1 usage, which the lookup replaces;
* whole calls through the runtime (a scripted adapter, 12 chunks a call), to
  a route whose calls are priced by genai-prices and to one whose model has
  no price (the cached miss), interleaved round by round: the difference is
  what pricing adds to a call.

Each figure is repeated ``R`` times; the table shows min and median in µs
per call. JSON goes to ``bench/results/prices.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

import llmrt
from llmrt import GenerateOptions, TokenUsage
from llmrt.actors._pricing import ModelPrice, Pricer, _calculated_cost, library_version
from llmrt.adapters.scripted import ScriptedAdapter, text_script

RESULTS = Path(__file__).resolve().parent / "results" / "prices.json"
USAGE = TokenUsage(input_tokens=800, output_tokens=500, cache_read_tokens=200, reasoning_tokens=100)
#: A fixed hour inside DeepSeek's standard hours: the same prices every run.
NOON = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)


def time_per_item(run: Callable[[], int], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.process_time_ns()
        items = run()
        samples.append((time.process_time_ns() - start) / items)
    return samples


def lookup(route: str, model: str, provider: str | None, iterations: int) -> Callable[[], int]:
    pricer = Pricer(
        {("local", "llama3"): ModelPrice(input_mtok=0.1, output_mtok=0.2, cache_read_mtok=0.01)}
    )
    price = pricer.price

    def run() -> int:
        for _ in range(iterations):
            price(route, model, USAGE, provider)
        return iterations

    return run


def library_calculation(iterations: int) -> Callable[[], int]:
    from genai_prices.data_snapshot import get_snapshot

    provider, model = get_snapshot().find_provider_model("gpt-4.1", None, "openai", None)

    def run() -> int:
        for _ in range(iterations):
            _calculated_cost(provider, model, USAGE, NOON)
        return iterations

    return run


def calls(calls: int, repeats: int) -> dict[str, list[float]]:
    """µs per whole call, priced and unpriced, interleaved round by round."""
    script = text_script([f"w{i} " for i in range(8)], usage=USAGE)
    samples: dict[str, list[float]] = {"priced": [], "unpriced": []}

    async def main() -> None:
        async with llmrt.open_runtime() as rt:
            adapter = ScriptedAdapter(script, price_providers={"openai": "openai"})
            await rt.register_adapter(["openai"], adapter)
            cases = {
                "priced": GenerateOptions(provider="openai", model="gpt-4.1", messages=()),
                "unpriced": GenerateOptions(provider="openai", model="no-price", messages=()),
            }
            for _ in range(repeats + 1):  # the first round warms up
                for case, options in cases.items():
                    start = time.process_time_ns()
                    for _ in range(calls):
                        async with rt.stream(options) as call:
                            async for _chunk in call:
                                pass
                    samples[case].append((time.process_time_ns() - start) / calls)
            for case in samples:
                samples[case] = samples[case][1:]

    trio.run(main)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    n = args.iterations
    cases: dict[str, tuple[str, Callable[[], int]]] = {
        "table": ("a price table model", lookup("local", "llama3", None, n)),
        "flat": ("genai-prices, flat (gpt-4.1)", lookup("openai", "gpt-4.1", "openai", n)),
        "tiered": (
            "genai-prices, tiered (claude-sonnet-4-5)",
            lookup("anthropic", "claude-sonnet-4-5", "anthropic", n),
        ),
        "hourly": (
            "genai-prices, by the hour (deepseek-chat)",
            lookup("deepseek", "deepseek-chat", "deepseek", n),
        ),
        "unknown": ("no price known (cached miss)", lookup("openai", "no-such", "openai", n)),
        "library": ("genai-prices' own calculation (gpt-4.1)", library_calculation(n // 10)),
    }
    results: dict[str, dict[str, Any]] = {}
    print(f"{'case':<9}{'what':<44}{'min µs':>9}{'median µs':>11}")
    for key, (label, run) in cases.items():
        run()  # warm-up: the lookups are cached after the first
        samples = [s / 1000 for s in time_per_item(run, args.repeats)]
        best, median = min(samples), statistics.median(samples)
        results[key] = {
            "label": label,
            "us_per_call_min": round(best, 3),
            "us_per_call_median": round(median, 3),
            "samples_us": [round(s, 3) for s in samples],
        }
        print(f"{key:<9}{label:<44}{best:>9.3f}{median:>11.3f}")
    per_call = calls(args.calls, args.repeats)
    whole: dict[str, Any] = {}
    for case, samples_ns in per_call.items():
        samples = [s / 1000 for s in samples_ns]
        whole[case] = {
            "us_per_call_min": round(min(samples), 3),
            "us_per_call_median": round(statistics.median(samples), 3),
            "samples_us": [round(s, 3) for s in samples],
        }
        label = f"a whole call, {case} (12 chunks)"
        print(f"{'call':<9}{label:<44}{min(samples):>9.3f}{statistics.median(samples):>11.3f}")
    added = whole["priced"]["us_per_call_median"] - whole["unpriced"]["us_per_call_median"]
    whole["added_us_median"] = round(added, 3)
    print(f"pricing adds {added:.3f} µs to the median call")

    report = {
        "benchmark": "prices",
        "command": "python bench/bench_prices.py",
        "iterations": args.iterations,
        "calls": args.calls,
        "repeats": args.repeats,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "genai_prices": library_version(),
        "llmrt": llmrt.__version__,
        "results": results,
        "calls_through_the_runtime": whole,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
