"""Routing state shared by real processes through a real redis-server.

One set of processes serves the whole module (they take seconds to start):
a redis-server on a free loopback port, ``llmrt serve --workers 4`` and a
second gateway (``llmrt serve``), both configured with the same groups and
``[routing] redis``, in front of `llmrt.testing` upstreams that run in a
thread of this process (each test's own trio run reads what they received).
The last test stops Redis and starts it again.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from _cli_process import cli_argv
from _redis import RedisServer
from _routing import OK, rate_limited, request, upstreams
from _sdks import coredis
from _serving import http_get, metric, poll

import llmrt
from llmrt import ErrorCode, FinishError, FinishStop
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.testing import RecordedRequest, Script, Upstream

STARTUP = 60.0
BOUND = 60

pytestmark = pytest.mark.timeout(120)


@attrs.define(eq=False)
class UpstreamThread:
    """The module's upstreams, served by a trio run in a thread of their own."""

    ups: dict[str, Upstream] = attrs.field(factory=dict)
    _ready: threading.Event = attrs.field(factory=threading.Event)
    _token: Any = None
    _stop: trio.Event | None = None
    _thread: threading.Thread | None = None

    def start(self) -> UpstreamThread:
        first = {"n": 0}

        def cool_first(_: RecordedRequest) -> Script:
            first["n"] += 1
            return rate_limited(120) if first["n"] == 1 else OK

        routes = {"lim": OK, "ca": cool_first, "cb": OK, "pl": OK}

        async def main() -> None:
            async with upstreams(routes) as ups:  # type: ignore[arg-type]
                self.ups = ups
                self._token = trio.lowlevel.current_trio_token()
                self._stop = trio.Event()
                self._ready.set()
                await self._stop.wait()

        self._thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
        self._thread.start()
        if not self._ready.wait(STARTUP):
            raise RuntimeError("the upstreams did not start")
        return self

    def stop(self) -> None:
        if self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        if self._thread is not None:
            self._thread.join(30)

    def count(self, name: str) -> int:
        return len(self.ups[name].requests)


def _config(path: Path, ups: dict[str, Upstream], redis_url: str) -> Path:
    providers = "".join(
        f'[[provider]]\nroute = "{name}"\nadapter = "openai_chat"\n'
        f'base_url = "{up.base_url}"\napi_key_env = "ROUTING_TEST_KEY"\n\n'
        for name, up in ups.items()
    )
    path.write_text(
        providers
        + f"""
[routing]
redis = "{redis_url}"
redis_retry = 0.5
redis_timeout = 0.5

[[group]]
name = "limited"
window = 30.0
when_unavailable = "fail"
[[group.deployment]]
route = "lim"
model = "m"
rpm = 60

[[group]]
name = "cool"
[[group.deployment]]
route = "ca"
model = "m"
[[group.deployment]]
route = "cb"
model = "m"
tier = 2

[[group]]
name = "plain"
[[group.deployment]]
route = "pl"
model = "m"
"""
    )
    return path


@attrs.define(eq=False)
class Gateway:
    proc: subprocess.Popen[str]
    lines: list[str] = attrs.field(factory=list)
    _found: threading.Event = attrs.field(factory=threading.Event)
    port: int = 0

    @classmethod
    def start(cls, config: Path, *args: str) -> Gateway:
        command = [*cli_argv(), "serve", "--port", "0"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "ROUTING_TEST_KEY": "sk-routing-test"}
        proc = subprocess.Popen(
            [*command, "--config", str(config), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        gateway = cls(proc)
        threading.Thread(target=gateway._read, daemon=True).start()
        return gateway

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            found = re.search(r"listening on ws://127\.0\.0\.1:(\d+)/", line)
            if found and not self.port:
                self.port = int(found.group(1))
                self._found.set()
        self._found.set()

    def wait_listening(self) -> None:
        if not self._found.wait(STARTUP) or not self.port:
            raise RuntimeError(f"the gateway did not start: {self.lines}")

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@attrs.frozen
class Cluster:
    redis: RedisServer
    upstreams: UpstreamThread
    workers: Gateway
    other: Gateway


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    redis = RedisServer().start()
    ups = UpstreamThread().start()
    config = _config(tmp_path_factory.mktemp("routing") / "llmrt.toml", ups.ups, redis.url)
    workers = Gateway.start(config, "--workers", "4")
    other = Gateway.start(config)
    try:
        workers.wait_listening()
        other.wait_listening()
        yield Cluster(redis, ups, workers, other)
    finally:
        workers.stop()
        other.stop()
        ups.stop()
        redis.stop()


async def _calls(url: str, provider: str, n: int, connections: int) -> list[llmrt.Finish]:
    """``n`` calls to ``provider`` over ``connections`` websockets (spread over the workers)."""
    finishes: list[llmrt.Finish] = []

    async def over_one(count: int) -> None:
        async with open_gateway_client(url) as client:
            for _ in range(count):
                async with client.stream(request(provider)) as call:
                    async for chunk in call:
                        if isinstance(chunk, llmrt.Finish):
                            finishes.append(chunk)

    async with trio.open_nursery() as nursery:
        for index in range(connections):
            share = n // connections + (1 if index < n % connections else 0)
            nursery.start_soon(over_one, share)
    return finishes


async def test_four_workers_and_a_second_gateway_admit_at_most_rpm_in_total(
    cluster: Cluster,
) -> None:
    with trio.fail_after(BOUND):
        finishes = await _calls(cluster.workers.url, "limited", 80, 16)
        finishes += await _calls(cluster.other.url, "limited", 20, 4)
    served = [f for f in finishes if isinstance(f.reason, FinishStop)]
    refused = [f for f in finishes if isinstance(f.reason, FinishError)]
    assert len(finishes) == 100
    # Every call fell within one 30 s window: exactly the budget went through.
    assert len(served) == 60 and cluster.upstreams.count("lim") == 60
    for finish in refused:
        assert isinstance(finish.reason, FinishError)
        assert finish.reason.failure.code == ErrorCode.RATE_LIMIT
        assert finish.reason.failure.provider_retry_after_ms is not None


async def test_a_cooldown_set_by_one_worker_holds_in_the_others_and_another_gateway(
    cluster: Cluster,
) -> None:
    with trio.fail_after(BOUND):
        (first,) = await _calls(cluster.workers.url, "cool", 1, 1)
        later = await _calls(cluster.workers.url, "cool", 16, 16)
        later += await _calls(cluster.other.url, "cool", 4, 4)
    assert first.routing is not None
    assert [(a.route, a.code) for a in first.routing.attempts] == [
        ("ca", "RATE_LIMIT"),
        ("cb", None),
    ]
    assert [f.routing.route for f in later if f.routing] == ["cb"] * 20
    # Without shared state each other process would have tried "ca" (which then answers).
    assert cluster.upstreams.count("ca") == 1


async def test_redis_killed_then_restarted(cluster: Cluster) -> None:
    port = cluster.workers.port
    with trio.fail_after(BOUND):
        cluster.redis.stop()
        during = await _calls(cluster.workers.url, "plain", 24, 12)
        assert [type(f.reason) for f in during] == [FinishStop] * 24

        async def shows_errors() -> bool:
            _, text = await http_get(port, "/metrics")
            errors = metric(text, "llmrt_routing_redis_errors_total")
            return errors is not None and errors > 0

        await poll(shows_errors, within=20)
        cluster.redis.start()  # empty, on the same port
        counted = cluster.upstreams.count("pl")

        async def shared_again() -> bool:
            await _calls(cluster.workers.url, "plain", 4, 4)
            async with coredis.Redis.from_url(cluster.redis.url) as client:
                return bool(await client.keys("llmrt:*pl/m:rpm"))

        await poll(shared_again, within=20, every=0.2)
        _, text = await http_get(port, "/metrics")
    assert cluster.upstreams.count("pl") > counted
    assert (metric(text, "llmrt_routing_redis_degradations_total") or 0) >= 1
    assert metric(text, "llmrt_routing_redis_processes") == 4
