"""The ``llmrt`` command line, in-process and as a real process (serve, Ctrl-C)."""

from __future__ import annotations

import io
import json
import os
import pathlib
import signal
import subprocess

import pytest
import trio
from _cli_process import cli_argv, kill, spawn_cli

import llmrt
from llmrt.actors.app.cli import main

#: What the demo model says after quoting the prompt.
DEMO_TAIL = "This answer comes from llmrt's demo model, streamed token by token."


def run(*argv: str, environ: dict[str, str] | None = None) -> tuple[int, str]:
    """``llmrt ARGV`` in-process: the status and stdout (stderr is the process's)."""
    out = io.StringIO()
    code = main(list(argv), out=out, environ=environ if environ is not None else {})
    return code, out.getvalue()


def run_both(*argv: str, environ: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``llmrt ARGV`` in-process: the status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err, environ=environ if environ is not None else {})
    return code, out.getvalue(), err.getvalue()


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert llmrt.__version__ in capsys.readouterr().out
    for command in ("serve", "call", "providers", "models", "stats"):
        with pytest.raises(SystemExit) as info:
            main([command, "--help"])
        assert info.value.code == 0
        assert f"usage: llmrt {command}" in capsys.readouterr().out
    code, text = run()
    assert code == 0 and "serve" in text and "call" in text


def test_call_streams_the_demo_answer() -> None:
    code, out, err = run_both("call", "hello cli", "--no-color")
    assert code == 0
    # The answer alone on stdout; what is said about it on stderr.
    assert out == 'You said: "hello cli". ' + DEMO_TAIL + "\n"
    assert "thinking:" in err
    assert "usage: input 2" in err
    assert "first token" in err and "total" in err
    assert err.rstrip().endswith("finish: stop")
    assert "You said" not in err


def test_call_with_retry_and_options() -> None:
    code, out, err = run_both("call", "x", "--retry", "--effort", "low", "--max-tokens", "3")
    assert code == 0
    assert "finish: max-tokens" in err
    assert out == ""  # three tokens of reasoning, no answer yet


def test_call_reports_failures_with_their_code() -> None:
    code, out, err = run_both("call", "x", "--provider", "nowhere", "--model", "m")
    assert code == 1
    assert "error NO_ADAPTER" in err and out == ""
    code, out, err = run_both("call", "x", "--effort", "extreme")
    assert code == 1
    assert "UNSUPPORTED_REASONING_EFFORT" in err and out == ""


def test_providers_and_models() -> None:
    code, text = run("providers", environ={"DEEPSEEK_API_KEY": "sk-secret-value-123"})
    assert code == 0
    assert "demo" in text and "deepseek" in text
    assert "sk-secret-value-123" not in text
    code, text = run("models", "demo")
    assert code == 0
    assert text.splitlines()[0].startswith("demo-1")


def test_stats_in_process_after_demo_calls() -> None:
    code, text = run("stats", "--calls", "2")
    assert code == 0
    lines = text.splitlines()
    assert lines[0].startswith("calls: started 2, in flight 0, chunks forwarded ")
    assert "finished: stop 2" in lines
    assert any(line.startswith("  demo/demo-1: first chunk n=2 mean ") for line in lines)
    assert "gateway:" not in text
    code, text = run("stats", "--calls", "0", "--json")
    value = json.loads(text)
    assert value["callsStarted"] == 0 and value["registrations"] == 1
    assert value["abortToFinish"]["counts"] == [0] * (len(value["abortToFinish"]["bounds"]) + 1)


def test_bad_config_names_file_and_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text('[[provider]]\nroute = "x"\nadapter = "nope"\n')
    code, _ = run("providers", "--config", str(path))
    assert code == 2
    err = capsys.readouterr().err
    assert f"{path}:" in err and "adapter" in err


def _spawn(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    environ = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    environ.update(env or {})
    environ["PYTHONUNBUFFERED"] = "1"
    return subprocess.Popen(
        [*cli_argv(), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ
    )


def _read_until(proc: subprocess.Popen[str], needle: str) -> str:
    seen = ""
    assert proc.stdout is not None
    while needle not in seen:
        char = proc.stdout.read(1)
        if not char:
            break
        seen += char
    return seen


def test_serve_then_call_via_the_gateway_then_shut_down() -> None:
    server = _spawn("serve", "--port", "0")
    try:
        head = _read_until(server, "\n")
        assert "gateway listening on ws://127.0.0.1:" in head
        url = head.strip().rsplit(" ", 1)[-1]
        rest = _read_until(server, "demo")
        assert rest.startswith(f"playground: {url.replace('ws://', 'http://')} ")
        assert "workers: 1 (this process)" in rest
        assert "auth: off" in rest
        code, text, err = run_both("call", "through the wire", "--via", url, "--no-color")
        assert code == 0
        assert text == 'You said: "through the wire". ' + DEMO_TAIL + "\n"
        assert err.rstrip().endswith("finish: stop")
        code, text = run("models", "demo", "--via", url)
        assert code == 0 and "demo-1" in text
        code, text = run("providers", "--via", url)
        assert code == 0 and text.startswith("demo\t")
        code, text = run("stats", "--via", url)
        assert code == 0
        assert "calls: started 1, in flight 0" in text
        assert "provider demo: started 1" in text and "stop 1" in text
        assert "gateway: ready, connections 1 (accepted 4)" in text
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=30)
        assert server.returncode == 0
        assert "shutting down" in out
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()


def test_serve_refuses_a_public_host_without_a_token() -> None:
    code, _ = run("serve", "--host", "0.0.0.0", "--port", "0")
    assert code == 2


async def test_ctrl_c_aborts_the_call_and_reports_the_latency(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "slow.toml"
    config.write_text('[[provider]]\nroute = "slow"\nadapter = "demo"\ntokens_per_second = 4\n')
    cli = await spawn_cli("call", "a long story", "--config", str(config), "-p", "slow")
    try:
        with trio.fail_after(30):
            await cli.read_err_until("thinking: The")  # streaming has started
            cli.interrupt()
            code, out, err = await cli.finish()
    finally:
        await kill(cli)
    assert code == 130
    assert "aborted: the call was aborted (abort -> finish" in err
    assert out == ""  # the answer had not begun


async def test_call_as_a_process() -> None:
    cli = await spawn_cli("call", "from a process", "--no-color")
    try:
        with trio.fail_after(60):
            code, out, err = await cli.finish()
    finally:
        await kill(cli)
    assert code == 0, err
    assert out == 'You said: "from a process". ' + DEMO_TAIL + "\n"
    assert err.rstrip().endswith("finish: stop")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tuning", [True, False])
def test_serve_sets_up_the_collector_for_its_own_process_unless_told_not_to(tuning: bool) -> None:
    import gc

    before = (gc.get_threshold(), gc.get_freeze_count())
    args = ("serve", "--port", "0") if tuning else ("serve", "--port", "0", "--no-gc-tuning")
    server = _spawn(*args)
    try:
        seen = _read_until(server, "demo")
        if tuning:
            # Only now is the banner's last line written: after the collector was set up.
            seen += _read_until(server, "defaults)\n")
            assert "start-up objects frozen, first threshold 50,000" in seen
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=30)
        assert server.returncode == 0
        assert ("gc:" in seen + out) is tuning
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    # The test process's own collector is untouched (the library never sets it).
    assert (gc.get_threshold(), gc.get_freeze_count()) == before


#: Processes started at once by the race test; each has its own chance of hitting the window.
RACERS = 4


async def test_sigint_as_the_banner_appears_is_a_clean_shutdown() -> None:
    # Issue 21, finding 12: a SIGINT between the banner and the signal receiver
    # was a KeyboardInterrupt traceback and exit status 1.
    results: list[tuple[int, str, str]] = []

    async def race() -> None:
        # Cold: a signal passed on by the warm runner's stand-in lands later.
        cli = await spawn_cli("serve", "--port", "0", warm=False)
        try:
            with trio.fail_after(60):
                await cli.read_until("gateway listening on ")
                cli.interrupt()  # the banner says it serves: Ctrl-C must now be a shutdown
                results.append(await cli.finish())
        finally:
            await kill(cli)

    async with trio.open_nursery() as nursery:
        for _ in range(RACERS):
            nursery.start_soon(race)
    for code, out, err in results:
        assert "Traceback" not in err, err
        assert code == 0, (out, err)
        assert "shutting down" in out


async def test_a_second_sigint_while_draining_stops_at_once() -> None:
    # Before, the second signal stayed in the closed receiver and came back as a
    # KeyboardInterrupt traceback once the drain ended.
    cli = await spawn_cli("serve", "--port", "0", "--drain-delay", "600")
    try:
        with trio.fail_after(60):
            await cli.read_until("gateway listening on ")
            cli.interrupt()
            await cli.read_until("shutting down\n")  # now draining for ten minutes
            cli.interrupt()
            code, out, err = await cli.finish()
    finally:
        await kill(cli)
    assert "Traceback" not in err, err
    assert code == 130, (out, err)
    assert "interrupted again: exiting now" in out
