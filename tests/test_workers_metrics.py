"""``/metrics`` of ``llmrt serve --workers 2``: one label bound, and counters that never go down.

Real processes on one port, as in ``test_workers.py``: calls through the
Python client, scrapes over plain HTTP, workers killed with ``SIGKILL``.
Every wait is on the program's state: a printed line (a worker died, its
successor is ready) or what ``/metrics`` shows (another process's state,
which can only be asked).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import attrs
import msgspec
import trio
from _serving import Served, http_get, poll, serving, slow_demo_config, slow_options
from prometheus_client.parser import text_string_to_metric_families

from llmrt import Finish, FinishStop, LlmError
from llmrt.actors._stats import MAX_MODELS_PER_PROVIDER, OTHER
from llmrt.actors.gateway.client import open_gateway_client


async def scrape(port: int) -> str:
    status, body = await http_get(port, "/metrics")
    assert status == 200
    return body


def duration_counts(text: str, provider: str) -> dict[str, float]:
    """``llmrt_call_duration_seconds_count`` of ``provider``, by model label."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "llmrt_call_duration_seconds_count"
                and sample.labels["provider"] == provider
            ):
                out[sample.labels["model"]] = float(sample.value)
    return out


async def worker_pids(served: Served, count: int) -> dict[int, int]:
    """The pid of each slot's latest ready worker."""
    pids: dict[int, int] = {}
    for slot in range(count):
        found = [line for line in served.lines if line.startswith(f"worker {slot} ready: pid ")]
        pids[slot] = int(found[-1].rsplit(" ", 1)[1])
    return pids


async def kill_and_replace(served: Served, slot: int) -> None:
    """SIGKILL the worker in ``slot``; return once its successor says it is ready."""
    pid = (await worker_pids(served, slot + 1))[slot]
    os.kill(pid, signal.SIGKILL)
    await served.expect(rf"^worker {slot} \(pid {pid}\) died: killed by SIGKILL")
    await served.expect(
        rf"^worker {slot} ready: pid (\d+)$", where=lambda m: int(m.group(1)) != pid
    )


async def call_once(url: str, model: str) -> None:
    options = msgspec.structs.replace(slow_options(), model=model)
    async with open_gateway_client(url) as client, client.stream(options) as call:
        async for chunk in call:
            assert not isinstance(chunk, Finish) or isinstance(chunk.reason, FinishStop), chunk


async def test_the_model_label_bound_holds_over_workers_and_restarts(tmp_path: Path) -> None:
    config = slow_demo_config(tmp_path, tokens_per_second=2000)
    async with serving("--workers", "2", "--config", str(config)) as served:
        port = await served.port()
        await served.expect(r"^workers ready: 2$")
        url = f"ws://127.0.0.1:{port}/"
        limiter = trio.CapacityLimiter(16)
        total = [0]
        seen: dict[str, float] = {}

        async def one(name: str) -> None:
            async with limiter:
                await call_once(url, name)

        async def all_counted() -> bool:
            seen.clear()
            seen.update(duration_counts(await scrape(port), "slow"))
            return sum(seen.values()) == total[0]

        # Two rounds, two deaths: the first folds into an empty retired.json,
        # the second into one that holds the first (a third death would take
        # that path again: the fold does not depend on the slot); both slots
        # restart; 300 names are three times the bound.
        for round_ in range(2):
            # 150 new model names a round, one connection per call: the kernel
            # spreads them over both workers, each of which keeps 100 names.
            names = [f"model-{round_}-{i}" for i in range(150)]
            async with trio.open_nursery() as nursery:
                for name in names:
                    nursery.start_soon(one, name)
            total[0] += len(names)
            await poll(all_counted, within=20)
            # The sum keeps at most 100 names and (other), and loses no call.
            assert len(seen) <= MAX_MODELS_PER_PROVIDER + 1, len(seen)
            # Then a worker dies (each slot in turn); its calls fold into the sum.
            await kill_and_replace(served, round_ % 2)

        await poll(all_counted, within=20)
        assert len(seen) == MAX_MODELS_PER_PROVIDER + 1 and OTHER in seen
        # The names admitted first keep their labels through every restart.
        assert sum(1 for name in seen if name.startswith("model-0-")) == MAX_MODELS_PER_PROVIDER


def counter_samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every summed counter sample (histogram buckets, counts and sums included)."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        # Per worker slot, by design: it restarts from 0 with the slot's new process.
        if family.type not in ("counter", "histogram") or "worker" in family.name:
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            out[sample.name, frozenset(sample.labels.items())] = float(sample.value)
    return out


@attrs.define
class Traffic:
    calls: int = 0
    stop: trio.Event = attrs.field(factory=trio.Event)


async def keep_calling(url: str, traffic: Traffic) -> None:
    """Calls one after another until told to stop; a killed worker's client reconnects."""
    while not traffic.stop.is_set():
        try:
            async with open_gateway_client(url) as client:
                while not traffic.stop.is_set():
                    async with client.stream(slow_options()) as call:
                        finish = [chunk async for chunk in call][-1]
                    assert isinstance(finish, Finish)
                    if not isinstance(finish.reason, FinishStop):
                        break  # the worker died under the connection: connect again
                    traffic.calls += 1
        except LlmError:
            await trio.sleep(0.01)  # refused while the port changes hands: try again


async def test_summed_counters_never_go_down_between_scrapes(tmp_path: Path) -> None:
    config = slow_demo_config(tmp_path, tokens_per_second=1000)
    async with serving("--workers", "2", "--config", str(config)) as served:
        port = await served.port()
        await served.expect(r"^workers ready: 2$")
        url = f"ws://127.0.0.1:{port}/"
        traffic = Traffic()
        scrapes: list[str] = []
        kills_done = trio.Event()

        def started(text: str) -> float:
            samples = counter_samples(text).items()
            return sum(v for (name, _), v in samples if name == "llmrt_calls_started_total")

        def traffic_seen() -> bool:
            # The figures are published with up to about two seconds of lag (a
            # snapshot a second, a rendered text a second): scrape until the
            # traffic shows, not for a fixed count that a slow machine outruns.
            return len(scrapes) > 1 and started(scrapes[-1]) - started(scrapes[0]) >= 40

        async def scraper() -> None:
            # One scraper, one scrape after another, as Prometheus does; it lands
            # on either worker. Until the kills are done, then 20 scrapes more
            # and until the traffic shows in them.
            after = 0
            while after < 20 or not traffic_seen():
                # A scrape whose worker was killed under it fails: Prometheus
                # records a failed scrape, and this test skips it.
                with contextlib.suppress(trio.BrokenResourceError, IndexError):
                    scrapes.append(await scrape(port))
                if kills_done.is_set():
                    after += 1
                await trio.sleep(0.03)

        async def killer() -> None:
            async def calls_flowing() -> bool:
                return traffic.calls >= 40

            # Each slot once: the second death folds into the first's retired
            # figures, the path every later death takes (see the test above).
            for slot in (0, 1):
                await poll(calls_flowing, within=20)
                traffic.calls = 0
                await kill_and_replace(served, slot)
            await poll(calls_flowing, within=20)
            kills_done.set()

        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                for _ in range(6):
                    nursery.start_soon(keep_calling, url, traffic)
                nursery.start_soon(killer)
                await scraper()
                traffic.stop.set()
                nursery.cancel_scope.cancel()

        drops = []
        previous = counter_samples(scrapes[0])
        for n, text in enumerate(scrapes[1:], start=1):
            current = counter_samples(text)
            for key, before in previous.items():
                after = current.get(key)
                if after is None or after < before:
                    drops.append((n, key[0], dict(key[1]), before, after))
            previous = current
        assert drops == [], f"{len(drops)} drops over {len(scrapes)} scrapes: {drops[:5]}"

        # The scrapes did see the traffic.
        assert started(scrapes[-1]) - started(scrapes[0]) >= 40
