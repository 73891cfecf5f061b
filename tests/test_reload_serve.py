"""Reloading a running ``llmrt serve``: SIGHUP, the ``reload`` frame, ``llmrt reload --via``,
one process and ``--workers 2`` (real processes), and the ``providers-changed`` frame.
"""

from __future__ import annotations

import io
import json
import os
import signal
from pathlib import Path

import trio
from _cli_process import cli_argv
from _serving import serving

import llmrt
from llmrt.actors.app.cli import main
from llmrt.actors.app.config import CONFIG_INVALID
from llmrt.actors.gateway.client import open_gateway_client

TOKEN = "reload-test-token-0123456789"
ENV = {"LLMRT_GATEWAY_TOKEN": TOKEN}


def _demo(*routes: str) -> str:
    return "".join(f'[[provider]]\nroute = "{name}"\nadapter = "demo"\n\n' for name in routes)


async def _ids(url: str) -> list[str]:
    with trio.fail_after(30):
        async with open_gateway_client(url, token=TOKEN) as client:
            return [info.id for info in await client.list_providers()]


async def _cli_reload(url: str, *flags: str, cwd: Path) -> tuple[int, str]:
    """``llmrt reload --via URL`` as a process in ``cwd``: its exit status and output."""
    command = [*cli_argv(), "reload", "--via", url, *flags]
    env = {**os.environ, **ENV}
    env.pop("LLMRT_CONFIG", None)
    with trio.fail_after(30):
        done = await trio.run_process(
            command, env=env, cwd=cwd, capture_stdout=True, capture_stderr=True, check=False
        )
    return done.returncode, done.stdout.decode() + done.stderr.decode()


def test_reload_needs_a_gateway() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["reload"], out=out, err=err, environ={}) == 2
    assert err.getvalue() == (
        "llmrt: llmrt reload needs --via URL (the gateway); or send the serving process SIGHUP\n"
    )


async def test_one_process_reloads_on_sighup_and_on_the_frame(tmp_path: Path) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text(_demo("first"))
    async with serving("--config", str(path), env=ENV) as served:
        port = await served.port()
        url = f"ws://127.0.0.1:{port}/"
        path.write_text(_demo("first", "second"))
        served.proc.send_signal(signal.SIGHUP)
        await served.expect(r"^reload: applied \(added second\)$")
        assert "second" in await _ids(url)
        # A broken file: refused with FILE:LINE, everything serves on.
        path.write_text(_demo("first") + '[[provider]]\nroute = "x"\n')
        served.proc.send_signal(signal.SIGHUP)
        found = await served.expect(r"^reload: refused, the old configuration serves on: (.*)$")
        assert found.group(1).startswith(f"{path}:")
        assert {"first", "second"} <= set(await _ids(url))
        # The frame, through `llmrt reload --via`; the broken file beside it is not read.
        status, output = await _cli_reload(url, cwd=tmp_path)
        assert status == 1
        assert output.startswith(f"reload: refused, the old configuration serves on: {path}:")
        path.write_text(_demo("first"))
        status, output = await _cli_reload(url, "--json", cwd=tmp_path)
        assert status == 0
        assert json.loads(output) == {
            "ok": True,
            "workers": [{"ok": True, "removed": ["second"]}],
        }
        assert "second" not in await _ids(url)
        status, output = await _cli_reload(url, cwd=tmp_path)
        assert (status, output) == (0, "reload: applied (no change)\n")


async def test_workers_reload_together_on_sighup_and_on_a_frame(tmp_path: Path) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text(_demo("first"))
    async with serving("--workers", "2", "--config", str(path), env=ENV) as served:
        await served.expect(r"^workers ready: 2$")
        port = await served.port()
        url = f"ws://127.0.0.1:{port}/"
        path.write_text(_demo("first", "second"))
        served.proc.send_signal(signal.SIGHUP)
        for slot in (0, 1):
            await served.expect(rf"^worker {slot} reload: applied \(added second\)$")
        with trio.fail_after(60):
            async with open_gateway_client(url, token=TOKEN) as client:
                assert "second" in [info.id for info in await client.list_providers()]
                async with client.providers_changed() as changes:
                    # A frame reaching one worker reloads both; the report names each.
                    path.write_text(_demo("first", "second", "third"))
                    report = await client.reload()
                    assert report.ok
                    assert [(r.worker, r.ok, r.added) for r in report.workers] == [
                        (0, True, ("third",)),
                        (1, True, ("third",)),
                    ]
                    # This connection's worker changed its providers: it says so.
                    await changes.receive()
                    assert "third" in [info.id for info in await client.list_providers()]
                    # A broken file: every worker refuses it with FILE:LINE and serves on.
                    path.write_text("[[provider]\n")
                    report = await client.reload()
                    assert not report.ok
                    assert [r.worker for r in report.workers] == [0, 1]
                    for result in report.workers:
                        assert not result.ok and result.error is not None
                        assert result.error.code == CONFIG_INVALID
                        assert result.error.message.startswith(f"{path}:1")
                    options = llmrt.GenerateOptions(
                        provider="third", model="demo-1", messages=(llmrt.user_message("hi"),)
                    )
                    completion = await client.complete(options)
                    assert completion.text
