"""``/metrics`` under load: one render per second per process, and the optional token.

The render cache runs on trio's clock, so a `MockClock` decides when a
rendered text is too old; concurrent scrapes are held inside one render
(its writer waits on an event) to show that they share it. The token check
is exercised over a real loopback socket, as a scraper would meet it.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

import llmrt
from llmrt import user_message
from llmrt.actors.app import config as configuration
from llmrt.actors.app.cli import parse_args
from llmrt.actors.app.cli._serving import serve_options
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway import _metrics as metrics_module
from llmrt.actors.gateway._connection import GatewayState
from llmrt.actors.gateway._metrics import CACHE_SECONDS, GatewayMetrics
from llmrt.adapters.demo import DemoAdapter

TOKEN = "metrics-token_0123456789"
OPTIONS = llmrt.GenerateOptions(provider="demo", model="demo-1", messages=(user_message("hi"),))


def started(body: bytes) -> float:
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "llmrt_calls_started_total":
                return float(sample.value)
    return 0.0


async def one_call(rt: llmrt.LlmRuntime) -> None:
    async with rt.stream(OPTIONS) as call:
        async for _ in call:
            pass


async def test_scrapes_share_one_render_and_reuse_it_for_a_second(
    mock_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    renders: list[float] = []
    release = threading.Event()
    real = metrics_module._own_exposition

    def counted(figures: metrics_module.Figures, *pace: Any) -> bytes:
        renders.append(figures.taken)
        # Holds the first render open until every scraper has asked.
        assert release.wait(timeout=30)
        return real(figures, *pace)

    monkeypatch.setattr(metrics_module, "_own_exposition", counted)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        await one_call(rt)
        state = GatewayState(runtime=rt, limits=Limits(), version="test", token=None)
        metrics = GatewayMetrics(state)
        bodies: list[bytes] = []

        async def scrape() -> None:
            body, _ = await metrics.render()
            bodies.append(body)

        async with trio.open_nursery() as nursery:
            for _ in range(16):
                nursery.start_soon(scrape)
            # Every scraper is waiting: fifteen on the render the first started.
            await trio.testing.wait_all_tasks_blocked()
            release.set()
        assert len(renders) == 1
        assert len(bodies) == 16 and len(set(bodies)) == 1
        assert started(bodies[0]) == 1

        # Within the second, a later scrape gets the same text, call or no call.
        await one_call(rt)
        mock_clock.jump(CACHE_SECONDS / 2)
        assert (await metrics.render())[0] == bodies[0]
        assert len(renders) == 1

        # Past it, the next scrape renders anew and sees the new call.
        mock_clock.jump(CACHE_SECONDS / 2)
        body, _ = await metrics.render()
        assert len(renders) == 2
        assert started(body) == 2


async def test_a_failed_render_fails_its_scrapes_and_the_next_one_renders_again(
    mock_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = [0]
    real = metrics_module._own_exposition

    def flaky(figures: metrics_module.Figures, *pace: Any) -> bytes:
        calls[0] += 1
        if calls[0] == 1:
            raise OSError("disk full")
        return real(figures, *pace)

    monkeypatch.setattr(metrics_module, "_own_exposition", flaky)
    async with llmrt.open_runtime() as rt:
        state = GatewayState(runtime=rt, limits=Limits(), version="test", token=None)
        metrics = GatewayMetrics(state)
        with pytest.raises(OSError):
            await metrics.render()
        body, _ = await metrics.render()  # nothing cached from the failure
        assert calls[0] == 2 and b"llmrt_build_info" in body


async def http_get(
    port: int, path: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """One plain ``GET`` on loopback: the status and the whole response."""
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
            lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
            await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
            data = bytearray()
            while chunk := await stream.receive_some(65536):
                data += chunk
    return int(bytes(data).split(b" ", 2)[1]), bytes(data)


@asynccontextmanager
async def gateway(**kw: Any) -> AsyncIterator[GatewayServer]:
    async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
        await rt.register_adapter(["demo"], DemoAdapter())
        server = await nursery.start(partial(serve_gateway, rt, **kw))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def test_metrics_behind_the_token_answer_401_without_it() -> None:
    async with gateway(token=TOKEN, metrics_auth="token") as server:
        for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            status, response = await http_get(server.port, "/metrics", headers)
            assert status == 401
            assert b"WWW-Authenticate: Bearer" in response
            assert b"llmrt_" not in response and TOKEN.encode() not in response
        status, response = await http_get(
            server.port, "/metrics", {"Authorization": f"Bearer {TOKEN}"}
        )
        assert status == 200 and b"llmrt_build_info" in response
        # The refusals are counted as any refused token is; other routes stay open.
        assert server.refusals["auth"] == 3
        assert (await http_get(server.port, "/healthz"))[0] == 200


async def test_metrics_stay_open_by_default_even_with_a_token() -> None:
    async with gateway(token=TOKEN) as server:
        status, response = await http_get(server.port, "/metrics")
        assert status == 200 and b"llmrt_build_info" in response


async def test_metrics_auth_token_needs_a_token_and_a_known_value() -> None:
    async with llmrt.open_runtime() as rt:
        with pytest.raises(ValueError, match="needs a gateway token"):
            await serve_gateway(rt, metrics_auth="token")
        with pytest.raises(ValueError, match="metrics_auth must be one of"):
            await serve_gateway(rt, token=TOKEN, metrics_auth="closed")


def test_llmrt_serve_takes_metrics_auth_from_the_file_and_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text('[gateway]\nmetrics_auth = "token"\n')
    config = configuration.load_config(path, environ={})
    environ = {"LLMRT_GATEWAY_TOKEN": TOKEN}
    assert serve_options(parse_args(["serve"]), config, environ)["metrics_auth"] == "token"
    flag = parse_args(["serve", "--metrics-auth", "open"])
    assert serve_options(flag, config, environ)["metrics_auth"] == "open"
    default = configuration.load_config(None, environ={})
    assert serve_options(parse_args(["serve"]), default, environ)["metrics_auth"] == "open"
    with pytest.raises(ValueError, match=r"needs a gateway token: set \$LLMRT_GATEWAY_TOKEN"):
        serve_options(parse_args(["serve"]), config, {})
    path.write_text('[gateway]\nmetrics_auth = "closed"\n')
    with pytest.raises(configuration.ConfigError, match="metrics_auth"):
        configuration.load_config(path, environ={})
