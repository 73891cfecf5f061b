"""The call log on the command line: ``llmrt serve --call-log``, ``[call_log]``, ``llmrt log``."""

from __future__ import annotations

import io
import json
import pathlib
import subprocess
import sys
import textwrap

import pytest
import trio

import llmrt
from llmrt import Finish, GenerateOptions, user_message
from llmrt.actors.app import config as configuration
from llmrt.actors.app.cli import main
from llmrt.actors.app.cli.log import follow
from llmrt.actors.call_log import CallRecord, LogRecord, read_records
from llmrt.adapters.demo import DemoAdapter
from llmrt.adapters.scripted import ScriptedAdapter, text_script


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err, environ={})
    return code, out.getvalue(), err.getvalue()


def live(argv: list[str]) -> tuple[int, str, str]:
    """``llmrt call`` itself, for the printed lines to compare with."""
    return run(["call", *argv, "--color", "never"])


async def demo_call(directory: pathlib.Path, prompt: str) -> str:
    async with llmrt.open_runtime(call_log=directory) as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        options = GenerateOptions(
            provider="demo",
            model="demo-1",
            messages=(user_message(prompt),),
            reasoning_effort="low",
        )
        async with rt.stream(options) as call:
            async for _ in call:
                pass
    assert call.log_id is not None
    return call.log_id


def lines_without_timing(text: str) -> list[str]:
    return [line.split(" | first token")[0].split(" | total")[0] for line in text.splitlines()]


def test_log_show_prints_the_call_as_llmrt_call_prints_it(tmp_path: pathlib.Path) -> None:
    async def logged() -> str:
        with trio.fail_after(20):
            return await demo_call(tmp_path, "tell me of tides")

    record_id = trio.run(logged)
    code, out, err = run(["log", "show", record_id, "--dir", str(tmp_path), "--color", "never"])
    assert code == 0
    live_code, live_out, live_err = live(
        ["tell me of tides", "-p", "demo", "-m", "demo-1", "--effort", "low"]
    )
    assert live_code == 0
    assert out == live_out  # the answer's text, alone on stdout
    header, *rest = err.splitlines()
    assert header.startswith(f"call {record_id}: demo/demo-1 via DemoAdapter")
    assert "request sha256:" in header
    # Reasoning, the usage line and the finish, as the live call printed them.
    assert lines_without_timing("\n".join(rest)) == lines_without_timing(live_err)


async def test_log_tail_and_json(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(20):
        ids = [await demo_call(tmp_path, f"call number {n}") for n in range(3)]
    code, out, err = run(["log", "tail", "--dir", str(tmp_path), "-n", "2", "--color", "never"])
    assert code == 0
    assert "call number 1" in out and "call number 2" in out and "call number 0" not in out
    assert err.count("finish: stop") == 2
    code, out, _ = run(["log", "tail", "--dir", str(tmp_path), "-n", "3", "--json"])
    assert [json.loads(line)["id"] for line in out.splitlines()] == ids
    code, out, _ = run(["log", "show", ids[0], "--dir", str(tmp_path), "--json"])
    (record,) = [json.loads(line) for line in out.splitlines()]
    assert record["kind"] == "call" and record["request"]["messages"][0]["content"][0]["text"] == (
        "call number 0"
    )


async def test_log_show_of_a_retried_call_prints_its_attempts(tmp_path: pathlib.Path) -> None:
    failure = llmrt.LlmFailure(message="busy now", code=llmrt.ErrorCode.OVERLOADED)
    plays = iter([[*text_script(["lost"])[:2], Finish(reason=llmrt.FinishError(failure=failure))]])
    adapter = ScriptedAdapter(lambda _o: next(plays, text_script(["kept"])))
    policy = llmrt.NormalRetryPolicy(max_retries=1, initial_delay_ms=5, jitter_ratio=0)
    with trio.fail_after(20):
        async with llmrt.open_runtime(call_log=tmp_path) as rt:
            await rt.register_adapter(["p"], adapter)
            options = GenerateOptions(provider="p", model="m", messages=(user_message("hi"),))
            async with rt.stream_with_retry(options, policy=policy) as call:
                async for _ in call:
                    pass
    assert call.log_id is not None
    code, out, err = run(["log", "show", call.log_id, "--dir", str(tmp_path), "--color", "never"])
    assert code == 0
    assert "[attempt 1 failed: OVERLOADED: busy now; retrying in 0.0 s]" in err
    assert out.endswith("kept\n")
    assert err.count("call ") >= 3 and "finish: stop" in err


def test_log_refuses_what_it_cannot_read(tmp_path: pathlib.Path) -> None:
    code, _, err = run(["log", "show", "nope", "--dir", str(tmp_path)])
    assert code == 1 and "no record 'nope'" in err
    code, _, err = run(["log", "tail", "--dir", str(tmp_path / "missing")])
    assert code == 2 and "no call log" in err
    empty = tmp_path / "llmrt.toml"
    empty.write_text("")
    code, _, err = run(["log", "tail", "--config", str(empty)])
    assert code == 2 and "[call_log] directory" in err


async def test_follow_hands_over_records_as_they_are_written(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(20):
        await demo_call(tmp_path, "before")
        got: list[LogRecord] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: follow(tmp_path, got.append, limit=2))
            await trio.sleep(0.3)
            await demo_call(tmp_path, "after one")
            await demo_call(tmp_path, "after two")
    texts = [r.request.messages[0].content[0].text for r in got if isinstance(r, CallRecord)]
    assert texts == ["after one", "after two"]  # type: ignore[union-attr]


# ---- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("[call_log]\nqueue = 4\n", 1, "[call_log] needs a directory"),
        ('\n[call_log]\ndirectory = "c"\nmax_file_bytes = 10\n', 4, ">= 4096"),
        ('[call_log]\ndirectory = "c"\nrotate = true\n', 3, "unknown field `rotate`"),
        (
            '[call_log]\ndirectory = "c"\nmax_file_bytes = 8192\nmax_total_bytes = 4096\n',
            1,
            "max_total_bytes must be at least max_file_bytes",
        ),
    ],
)
def test_a_bad_call_log_table_is_refused_at_its_line(
    tmp_path: pathlib.Path, text: str, line: int, reason: str
) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text(text)
    with pytest.raises(configuration.ConfigError) as info:
        configuration.load_config(str(path), environ={})
    assert str(info.value).startswith(f"{path}:{line}: ") and reason in str(info.value)


def test_the_table_and_the_flag_name_the_folder(tmp_path: pathlib.Path) -> None:
    from llmrt.actors.app.cli import parse_args
    from llmrt.actors.app.cli._serving import call_log_settings

    path = tmp_path / "llmrt.toml"
    path.write_text('[call_log]\ndirectory = "calls"\nqueue = 9\n')
    config = configuration.load_config(str(path), environ={})
    settings = call_log_settings(parse_args(["serve"]), config)
    assert settings is not None and settings.directory == str(tmp_path / "calls")
    assert settings.queue == 9
    flagged = call_log_settings(parse_args(["serve", "--call-log", "elsewhere"]), config)
    assert flagged is not None and (flagged.directory, flagged.queue) == ("elsewhere", 9)
    worker = call_log_settings(parse_args(["serve"]), config, worker=2)
    assert worker is not None and worker.directory == str(tmp_path / "calls" / "worker-2")
    none = configuration.load_config(None, environ={})
    assert call_log_settings(parse_args(["serve"]), none) is None


_SERVE = textwrap.dedent(
    """
    import io, os, signal, sys
    import trio
    import llmrt
    from llmrt.actors.app.cli import parse_args
    from llmrt.actors.app.cli.serve import serve
    from llmrt.actors.app import config as configuration
    from llmrt.actors.gateway.client import open_gateway_client

    async def main():
        args = parse_args(["serve", "--port", "0", *sys.argv[2:]])
        config = configuration.load_config(sys.argv[1], environ={})
        async with trio.open_nursery() as nursery:
            server = await nursery.start(serve, args, config, io.StringIO(), {})
            async with open_gateway_client(server.url) as client:
                options = llmrt.GenerateOptions(
                    provider="demo", model="demo-1", messages=(llmrt.user_message("served"),)
                )
                async with client.stream(options) as call:
                    async for _ in call:
                        pass
            os.kill(os.getpid(), signal.SIGINT)  # how serve is stopped: it drains and returns

    trio.run(main)
    """
)


@pytest.mark.parametrize("how", ["table", "flag"])
def test_serve_logs_the_calls_it_serves(tmp_path: pathlib.Path, how: str) -> None:
    config = tmp_path / "llmrt.toml"
    flags: list[str] = []
    if how == "table":
        config.write_text('[call_log]\ndirectory = "calls"\n')
        folder = tmp_path / "calls"
    else:
        config.write_text("")
        folder = tmp_path / "flagged"
        flags = ["--call-log", str(folder)]
    done = subprocess.run(
        [sys.executable, "-c", _SERVE, str(config), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (record,) = read_records(folder)
    assert isinstance(record, CallRecord) and record.provider == "demo"
    code, out, _ = run(["log", "tail", "--dir", str(folder), "--color", "never"])
    assert code == 0 and "served" in out
