"""The workers' shared ``/metrics`` render (`SharedFigures.render`, `retire`), in process.

Two `SharedFigures` in one directory stand for two worker processes; a fake
clock decides when the shared text is too old. What the real processes show
(``test_workers_metrics.py``) follows from these rules: one text serves every
worker for a second, a worker publishes before it renders, a fold counts a
dead worker once, and the sum keeps one model-label bound, retired workers
included.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
from prometheus_client.parser import text_string_to_metric_families

import llmrt
from llmrt import user_message
from llmrt.actors._statistics import HistogramSnapshot, ModelHistogram, RuntimeStatistics
from llmrt.actors._stats import MAX_MODELS_PER_PROVIDER, OTHER, StatsCounters
from llmrt.actors.app.workers import SharedFigures, retire
from llmrt.actors.app.workers._figures import RENDER_SECONDS
from llmrt.actors.app.workers._sum import admit_models, fold_models
from llmrt.actors.gateway import Limits
from llmrt.actors.gateway._connection import GatewayState
from llmrt.actors.gateway._metrics import Figures
from llmrt.adapters.demo import DemoAdapter

EMPTY = StatsCounters().snapshot(0)


def samples(body: bytes, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = float(sample.value)
    return out


def started(body: bytes) -> float:
    return sum(samples(body, "llmrt_calls_started_total").values())


async def calls(rt: llmrt.LlmRuntime, models: list[str]) -> None:
    for model in models:
        options = llmrt.GenerateOptions(
            provider="demo", model=model, messages=(user_message("hi"),)
        )
        async with rt.stream(options) as call:
            async for _ in call:
                pass


async def test_one_text_serves_every_worker_for_a_second(tmp_path: Path) -> None:
    clock = [100.0]
    async with llmrt.open_runtime() as one, llmrt.open_runtime() as two:
        for rt in (one, two):
            await rt.register_adapter(["demo"], DemoAdapter())
        a = SharedFigures(tmp_path, slot=0, pid=1, now=lambda: clock[0])
        b = SharedFigures(tmp_path, slot=1, pid=2, now=lambda: clock[0])
        state_a = GatewayState(runtime=one, limits=Limits(), version="t", token=None)
        state_b = GatewayState(runtime=two, limits=Limits(), version="t", token=None)
        await calls(one, ["demo-1"] * 2)
        first = a.render(Figures.read(state_a))
        assert started(first) == 2
        await calls(two, ["demo-1"] * 3)
        # Within the second, worker b answers with a's text, though it has more.
        clock[0] += RENDER_SECONDS / 2
        assert b.render(Figures.read(state_b)) == first
        # Then b renders: its own figures, published first, and a's file.
        clock[0] += RENDER_SECONDS
        assert started(b.render(Figures.read(state_b))) == 5
        # An older read of b's figures never replaces the newer file.
        stale = Figures.read(state_b)
        await calls(two, ["demo-1"])
        newer = Figures.read(state_b)
        b.publish(newer)
        b.publish(stale)
        clock[0] += RENDER_SECONDS
        assert started(a.render(Figures.read(state_a))) == 6


async def test_a_fold_counts_a_dead_worker_once_within_the_label_bound(tmp_path: Path) -> None:
    clock = [0.0]
    async with llmrt.open_runtime() as one, llmrt.open_runtime() as two:
        for rt in (one, two):
            await rt.register_adapter(["demo"], DemoAdapter())
        await calls(one, [f"a-{i:03d}" for i in range(80)])
        await calls(two, [f"b-{i:03d}" for i in range(80)])
        a = SharedFigures(tmp_path, slot=0, pid=1, now=lambda: clock[0])
        b = SharedFigures(tmp_path, slot=1, pid=2, now=lambda: clock[0])
        state_a = GatewayState(runtime=one, limits=Limits(), version="t", token=None)
        state_b = GatewayState(runtime=two, limits=Limits(), version="t", token=None)
        b.publish(Figures.read(state_b))
        body = a.render(Figures.read(state_a))
        models = samples(body, "llmrt_call_duration_seconds_count")
        # 160 names over two workers: 100 keep labels, the rest count as (other).
        assert len(models) == MAX_MODELS_PER_PROVIDER + 1
        assert models[(("model", OTHER), ("provider", "demo"))] == 60
        assert sum(models.values()) == 160
        kept = {model for (_, model), _ in (key for key in models)} - {OTHER}

        # Worker b dies: folded into retired.json, its file gone, counted once.
        retire(tmp_path, 1, 2)
        assert not b.path.exists()
        clock[0] += RENDER_SECONDS
        await calls(one, [f"c-{i:03d}" for i in range(5)])
        body = a.render(Figures.read(state_a))
        models = samples(body, "llmrt_call_duration_seconds_count")
        assert sum(models.values()) == 165
        assert {model for (_, model), _ in models} - {OTHER} == kept
        assert samples(body, "llmrt_gateway_workers") == {(): 1.0}


def _value(counts: dict[tuple[str, str], int]) -> RuntimeStatistics:
    entries = tuple(
        ModelHistogram(
            provider=provider,
            model=model,
            histogram=HistogramSnapshot(bounds=(1.0,), counts=(n, 0), sum=float(n)),
        )
        for (provider, model), n in counts.items()
    )
    return msgspec.structs.replace(EMPTY, call_duration=entries, time_to_first_chunk=entries)


def test_names_are_admitted_busiest_first_and_never_given_back() -> None:
    busy = _value({("p", "quiet"): 1, ("p", "busy"): 9, ("p", OTHER): 50, (OTHER, OTHER): 3})
    assert admit_models({}, busy, limit=1) == {"p": ("busy",)}
    # Full: a busier newcomer does not take a kept name's place.
    busier = _value({("p", "quiet"): 1, ("p", "busy"): 9, ("p", "busiest"): 99})
    assert admit_models({"p": ("busy",)}, busier, limit=1) == {"p": ("busy",)}
    assert admit_models({"p": ("busy",)}, busier, limit=3) == {"p": ("busy", "busiest", "quiet")}
    folded = fold_models(busier, {"p": ("busy",)})
    counts = {(e.provider, e.model): e.histogram.count for e in folded.call_duration}
    assert counts == {("p", "busy"): 9, ("p", OTHER): 100}
