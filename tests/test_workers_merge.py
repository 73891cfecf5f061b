"""Summing workers' statistics for `/metrics` (`workers._sum`, `workers._figures`), in process.

The wire value round-trips to the same exposition text, a sum adds counters,
histograms and gauges, a retired worker keeps its counters and drops its
gauges, and a scrape sums its own fresh figures with the other workers' files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

import llmrt
from llmrt import user_message
from llmrt.actors._statistics import GatewayStatistics, RuntimeStatistics
from llmrt.actors.app.workers import SharedFigures, retire
from llmrt.actors.app.workers._sum import SUMMED_FIELDS, merge_values, retired
from llmrt.actors.gateway._metrics import Figures, metric_families
from llmrt.adapters.demo import DemoAdapter


class _Families:
    def __init__(self, families: Sequence[Metric]) -> None:
        self.families = families

    def collect(self) -> Sequence[Metric]:
        return self.families


def exposition(families: Sequence[Metric]) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry).decode()


def sample(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"no {name} {labels}")


GATEWAY = GatewayStatistics(
    ready=True,
    connections=2,
    accepted=5,
    live_requests=1,
    refused={"auth": 1},
    frames_received=10,
    frames_sent=40,
    bytes_received=1000,
    bytes_sent=9000,
    http_requests={"/metrics": 3},
)


async def figures_after_calls() -> Figures:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        await rt.register_adapter(["paced"], DemoAdapter(tokens_per_second=20))
        options = llmrt.GenerateOptions(
            provider="demo", model="demo-1", messages=(user_message("hi"),)
        )
        for _ in range(3):
            async with rt.stream(options) as call:
                async for _chunk in call:
                    pass
        paced = msgspec.structs.replace(options, provider="paced")
        async with rt.stream(paced) as call:
            async for _chunk in call:
                call.abort()
        return Figures("0-test", rt.statistics(), GATEWAY)


async def test_the_wire_value_round_trips_to_the_same_text() -> None:
    figures = await figures_after_calls()
    wire = msgspec.json.encode(figures.statistics())
    again = Figures(figures.version, msgspec.json.decode(wire, type=RuntimeStatistics), GATEWAY)
    direct = exposition(metric_families(figures))
    assert exposition(metric_families(again)) == direct
    assert sample(direct, "llmrt_calls_started_total", provider="demo") == 3
    assert sample(direct, "llmrt_abort_to_finish_seconds_count") == 1


async def test_a_sum_adds_counters_histograms_and_gauges() -> None:
    figures = await figures_after_calls()
    one = figures.statistics()
    two = merge_values([one, one])
    assert two.calls_started == 2 * one.calls_started
    assert two.chunks_forwarded == 2 * one.chunks_forwarded
    assert two.calls_finished == {k: 2 * n for k, n in one.calls_finished.items()}
    assert two.registrations == one.registrations == 2  # every worker registers the same routes
    assert len(two.call_duration) == len(one.call_duration) == 2  # demo and paced
    for summed, single in zip(two.call_duration, one.call_duration, strict=True):
        assert (summed.provider, summed.model) == (single.provider, single.model)
        assert summed.histogram.count == 2 * single.histogram.count
        assert summed.histogram.sum == 2 * single.histogram.sum
    assert two.abort_to_finish is not None and one.abort_to_finish is not None
    assert two.abort_to_finish.count == 2 * one.abort_to_finish.count == 2
    assert two.gateway is not None
    assert two.gateway.connections == 4
    assert two.gateway.refused == {"auth": 2}
    assert two.gateway.ready
    draining = msgspec.structs.replace(one, gateway=msgspec.structs.replace(GATEWAY, ready=False))
    merged_gateway = merge_values([one, draining]).gateway
    assert merged_gateway is not None and not merged_gateway.ready


async def test_a_retired_worker_keeps_counters_and_drops_gauges() -> None:
    figures = await figures_after_calls()
    value = msgspec.structs.replace(figures.statistics(), calls_in_flight=3)
    gone = retired(value)
    assert gone.calls_in_flight == 0
    assert gone.gateway is not None and gone.gateway.connections == 0
    assert gone.gateway.live_requests == 0
    assert gone.calls_started == value.calls_started
    assert gone.gateway.accepted == GATEWAY.accepted


def _write(path: Path, slot: int, pid: int, value: RuntimeStatistics) -> None:
    path.write_bytes(msgspec.json.encode({"slot": slot, "pid": pid, "value": value}))


async def test_a_scrape_sums_its_own_figures_with_the_other_workers_files(tmp_path: Path) -> None:
    figures = await figures_after_calls()
    value = figures.statistics()
    # Two other workers: one alive, one dead and folded into retired.json.
    _write(tmp_path / "worker-1-101.json", 1, 101, value)
    _write(tmp_path / "worker-2-102.json", 2, 102, value)
    retire(tmp_path, 2, 102)
    assert not (tmp_path / "worker-2-102.json").exists()
    assert (tmp_path / "retired.json").exists()
    (tmp_path / "junk.json").write_text("not a snapshot")  # ignored

    own = SharedFigures(tmp_path, slot=0, pid=100)
    text = exposition(own.combine(figures))
    assert sample(text, "llmrt_calls_started_total", provider="demo") == 3 * 3
    assert sample(text, "llmrt_gateway_connections") == 2 * GATEWAY.connections  # dead: 0
    assert sample(text, "llmrt_gateway_connections_accepted_total") == 3 * GATEWAY.accepted
    assert sample(text, "llmrt_gateway_workers") == 2
    assert sample(text, "llmrt_gateway_worker_connections", worker="1") == 2

    # A worker publishes what a scrape on another one reads.
    own.publish(figures)
    other = SharedFigures(tmp_path, slot=1, pid=101)
    text = exposition(other.combine(figures))
    assert sample(text, "llmrt_calls_started_total", provider="demo") == 3 * 3
    assert sample(text, "llmrt_gateway_worker_calls_started_total", worker="0") == 4


def test_concurrent_atomic_writes_never_share_a_scratch_file(tmp_path: Path) -> None:
    # The supervisor folds workers that die together from worker threads; with one
    # scratch name per process, one thread's replace took the other's scratch file.
    import threading

    from llmrt.actors.app.workers._figures import _write_atomically

    target = tmp_path / "retired.json"
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(300):
                _write_atomically(target, f"{n}:{i}".encode())
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert target.read_bytes().split(b":")[1] == b"299"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["retired.json"]


def test_the_sum_names_every_field_of_the_statistics() -> None:
    # A section added to RuntimeStatistics must say how workers add it up.
    assert {field.name for field in msgspec.structs.fields(RuntimeStatistics)} == SUMMED_FIELDS
