"""``llmrt call`` as a Unix tool, and ``llmrt serve``'s start-up messages (issue 22, items 3, 6).

Every test runs the CLI as a real process: pipes, a pseudo-terminal for the
colour rules, real signals and sockets. The demo route is unpaced (the
``FAST`` config) so a call costs its process start and little more.
"""

from __future__ import annotations

import errno
import io
import json
import os
import pathlib
import pty
import socket
import subprocess
from collections.abc import Callable

import pytest
import trio
from _cli_process import CliProcess, cli_argv, kill, spawn_cli
from _serving import http_get, serving

import llmrt
from llmrt import AttemptChunk, Finish, FinishToolCalls, TextDelta
from llmrt.actors.app.cli import main
from llmrt.actors.app.cli._call_input import MAX_PROMPT_BYTES, MAX_TOOLS_FILE_BYTES
from llmrt.testing import SSEScript, open_upstream, openai_events

#: Real seconds per process: far above what a working run takes.
BOUND = 30
ANSI = "\x1b["
DEMO_TAIL = "This answer comes from llmrt's demo model, streamed token by token."
WEATHER = (
    'get_weather={"type": "object", "properties": {"city": {"type": "string"}}, '
    '"required": ["city"]}'
)


@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A config whose ``demo`` route streams as fast as it is read."""
    path = tmp_path_factory.mktemp("cli") / "fast.toml"
    path.write_text('[[provider]]\nroute = "demo"\nadapter = "demo"\n')
    return str(path)


async def run_cli(
    *argv: str, env: dict[str, str] | None = None, stdin: bytes | None = None
) -> tuple[int, str, str]:
    cli = await spawn_cli(*argv, env=env, stdin=stdin)
    try:
        with trio.fail_after(BOUND):
            return await cli.finish()
    finally:
        await kill(cli)


async def run_all(*runs: Callable[[], object]) -> None:
    """Run the given coroutine functions at once: process starts overlap."""
    async with trio.open_nursery() as nursery:
        for run in runs:
            nursery.start_soon(run)  # type: ignore[arg-type]


# ---- stdout is the answer, stderr the rest -------------------------------------------------


async def test_the_answer_alone_on_stdout_and_the_rest_on_stderr(fast: str) -> None:
    code, out, err = await run_cli("call", "Weather here?", "--config", fast, "--tool", WEATHER)
    assert code == 0, err
    # `llmrt call ... 2>/dev/null | wc -l` is 1: the answer's one line.
    assert out == f'You said: "Weather here?". {DEMO_TAIL}\n'
    lines = err.splitlines()
    assert lines[0] == (
        "thinking: The user wrote 2 words. A short, friendly answer that quotes them fits best."
    )
    assert lines[1] == '-> tool call get_weather({"city": "Weather here?"})'
    assert lines[2].startswith("usage: input 2, output ") and " | total " in lines[2]
    assert lines[3:] == ["finish: tool-calls"]
    assert ANSI not in out + err  # neither stream is a terminal


async def test_json_writes_every_chunk_as_one_line_and_nothing_else(fast: str) -> None:
    code, out, err = await run_cli("call", "as json", "--config", fast, "--json", "--tool", "now")
    assert code == 0, err
    assert err == ""
    chunks = [llmrt.decode_chunk(line) for line in out.splitlines()]
    assert [json.loads(line)["type"] for line in out.splitlines()][:1] == ["block-start"]
    text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    assert text == f'You said: "as json". {DEMO_TAIL}'
    assert isinstance(chunks[-1], Finish) and isinstance(chunks[-1].reason, FinishToolCalls)
    assert out.endswith("\n") and "\n\n" not in out


async def test_retry_into_a_pipe_writes_only_the_finished_attempts_answer(
    tmp_path: pathlib.Path,
) -> None:
    # Each run: an attempt cut after some words, then one that finishes.
    script = [
        SSEScript(events=openai_events(["void ", "words ", "lost"]), disconnect_after=3),
        SSEScript(events=openai_events(["the ", "answer"])),
    ] * 2
    async with open_upstream(script) as upstream:
        config = tmp_path / "flaky.toml"
        config.write_text(
            '[[provider]]\nroute = "flaky"\nadapter = "openai_chat"\n'
            f'preset = "openai-compatible"\nbase_url = "{upstream.base_url}"\n'
            'retry = { mode = "normal", initial_delay_ms = 1, max_delay_ms = 1, '
            'jitter_ratio = 0, retryable_codes = ["NETWORK"] }\n'
        )
        args = ("call", "hi", "--config", str(config), "-p", "flaky", "-m", "m", "--retry")
        code, out, err = await run_cli(*args)
        _, json_out, _ = await run_cli(*args, "--json")
    assert code == 0, err
    assert out == "the answer\n"  # not "void words the answer"
    assert "[attempt 1 failed: NETWORK: " in err and err.rstrip().endswith("finish: stop")
    # With --json every attempt's chunks are there, each tagged with its attempt.
    events = [json.loads(line) for line in json_out.splitlines()]
    assert {e["type"] for e in events} == {"attempt-chunk", "retry"}
    last = llmrt.decode(json_out.splitlines()[-1], AttemptChunk)
    assert last.attempt == 2 and isinstance(last.chunk, Finish)


async def test_a_reader_that_leaves_ends_the_call_quietly(
    fast: str, tmp_path: pathlib.Path
) -> None:
    slow = tmp_path / "slow.toml"
    slow.write_text('[[provider]]\nroute = "demo"\nadapter = "demo"\ntokens_per_second = 20\n')
    cli = await spawn_cli("call", "a long story", "--config", str(slow), "--json")
    try:
        with trio.fail_after(BOUND):
            await cli.read_until("\n")  # `| head -1`: one line, then the pipe closes
            assert cli.proc.stdout is not None
            await cli.proc.stdout.aclose()
            assert cli.proc.stderr is not None
            err = bytearray()
            while data := await cli.proc.stderr.receive_some(65536):
                err += data
            code = await cli.proc.wait()
    finally:
        await kill(cli)
    assert code == 141, err  # what a shell reports for a SIGPIPE
    assert b"Traceback" not in err and b"Broken pipe" not in err


# ---- colour: NO_COLOR and --color, on a terminal ----------------------------------------------


async def stderr_on_a_terminal(*argv: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal: (status, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    environ.update(env, PYTHONUNBUFFERED="1")
    proc = await trio.lowlevel.open_process(
        [*cli_argv(), *argv],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        env=environ,
    )
    os.close(slave)
    cli = CliProcess(proc)

    def read_terminal() -> bytes:
        seen = bytearray()
        while True:
            try:
                data = os.read(master, 65536)
            except OSError as exc:  # the child closed the terminal: EIO on Linux
                if exc.errno == errno.EIO:
                    return bytes(seen)
                raise
            if not data:
                return bytes(seen)
            seen += data

    try:
        with trio.fail_after(BOUND):
            assert proc.stdout is not None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cli.read_until, "\n")
                terminal = await trio.to_thread.run_sync(read_terminal)
            while data := await proc.stdout.receive_some(65536):
                cli.out += data
            code = await proc.wait()
    finally:
        await kill(cli)
        os.close(master)
    return code, cli.text, terminal.decode()


#: (flags, environment, whether stderr is styled) with stderr on a terminal.
COLOUR_RULES = [
    ((), {}, True),
    ((), {"NO_COLOR": "1"}, False),
    ((), {"NO_COLOR": ""}, True),  # no-color.org: set *and not empty*
    ((), {"TERM": "dumb"}, False),
    (("--color=always",), {"NO_COLOR": "1"}, True),  # the command line wins
    (("--color", "never"), {}, False),
    (("--no-color",), {}, False),
]


class Terminal(io.StringIO):
    """An in-memory stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("flags", "env", "coloured"), COLOUR_RULES)
def test_colour_rules(
    fast: str, flags: tuple[str, ...], env: dict[str, str], coloured: bool
) -> None:
    out, err = Terminal(), Terminal()
    code = main(["call", "hi", "--config", fast, *flags], out=out, err=err, environ=env)
    assert code == 0
    assert (ANSI in err.getvalue()) is coloured
    assert ANSI not in out.getvalue()  # the answer is never styled


async def test_colour_on_a_real_terminal(fast: str) -> None:
    cases = [COLOUR_RULES[0], COLOUR_RULES[1], COLOUR_RULES[4]]
    seen: dict[int, tuple[int, str, str]] = {}

    def case(n: int, flags: tuple[str, ...], env: dict[str, str]) -> Callable[[], object]:
        async def run() -> None:
            seen[n] = await stderr_on_a_terminal(
                "call", "hi", "--config", fast, *flags, env={"TERM": "xterm", **env}
            )

        return run

    await run_all(*(case(n, flags, env) for n, (flags, env, _) in enumerate(cases)))
    for n, (_, _, coloured) in enumerate(cases):
        code, out, terminal = seen[n]
        assert code == 0, terminal
        plain = terminal.replace("\x1b[2m", "").replace("\x1b[0m", "")
        assert "thinking: The user wrote 1 word." in plain
        assert (ANSI in terminal) is coloured, cases[n]
        assert ANSI not in out


def test_color_always_into_a_pipe_is_styled(fast: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["call", "hi", "--config", fast, "--color", "always"], out=out, err=err, environ={})
    assert code == 0
    assert "\x1b[2mthinking: \x1b[0m" in err.getvalue() and ANSI not in out.getvalue()


# ---- the prompt from stdin, a system prompt, tools -------------------------------------------


async def test_dash_reads_the_prompt_from_stdin(fast: str) -> None:
    results: dict[str, tuple[int, str, str]] = {}

    def case(name: str, data: bytes) -> Callable[[], object]:
        async def run() -> None:
            results[name] = await run_cli("call", "-", "--config", fast, stdin=data)

        return run

    await run_all(case("echo", b"x y\n"), case("big", b"x" * (MAX_PROMPT_BYTES + 1)))
    code, out, err = results["echo"]  # echo "x y" | llmrt call -
    assert code == 0, err
    assert out == f'You said: "x y". {DEMO_TAIL}\n'
    assert results["big"] == (2, "", "llmrt: the prompt on stdin is over 8 MiB\n")


@pytest.mark.parametrize(
    ("data", "status", "said"),
    [
        ("first line\nsecond \u00e9\n\n".encode(), 0, 'You said: "first line\nsecond \u00e9". '),
        (b"\n", 2, "llmrt: the prompt on stdin is empty\n"),
        (b" \t \r\n", 2, "llmrt: the prompt on stdin is empty\n"),
        (b"ok \xff\xfe", 2, "llmrt: the prompt on stdin is not UTF-8 (byte 3)\n"),
        (b"x" * MAX_PROMPT_BYTES, 0, 'You said: "xxx'),
    ],
)
def test_what_stdin_may_hold(fast: str, data: bytes, status: int, said: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["call", "-", "--config", fast],
        out=out,
        err=err,
        environ={},
        stdin=io.BytesIO(data),
    )
    assert code == status, err.getvalue()
    if status:
        assert (out.getvalue(), err.getvalue()) == ("", said)
    else:
        assert out.getvalue().startswith(said)


async def test_a_system_prompt_reaches_the_model(fast: str) -> None:
    code, out, err = await run_cli(
        "call", "hi", "--config", fast, "--json", "--system", "answer in three words"
    )
    assert code == 0, err
    (usage,) = [json.loads(line) for line in out.splitlines() if '"usage"' in line]
    # The demo counts words as tokens: 1 of the prompt, 4 of the system prompt.
    assert usage["usage"]["inputTokens"] == 5


async def test_tools_from_a_file_and_from_the_command_line(
    fast: str, tmp_path: pathlib.Path
) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps(
            [
                {
                    "name": "search",
                    "description": "Search the web",
                    "parameters": {
                        "type": "object",
                        "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
                        "required": ["q", "n"],
                    },
                },
                {"name": "now"},
            ]
        )
    )
    code, _, err = await run_cli(
        "call", "find llmrt", "--config", fast, "--tools", str(tools), "--tool", WEATHER
    )
    assert code == 0, err
    # The file's tools come first; the demo calls the first tool it is offered.
    assert '-> tool call search({"q": "find llmrt", "n": 1})' in err.splitlines()
    assert err.rstrip().endswith("finish: tool-calls")


@pytest.mark.parametrize(
    ("args", "file", "message"),
    [
        (("--tool", "w={not json"), None, "--tool w: the schema is not JSON"),
        (("--tool", "=" + "{}"), None, "a tool name is one word, not ''"),
        (("--tool", "w=[1]"), None, "--tool w: the schema of tool 'w' is not a JSON object"),
        (("--tool", "a", "--tool", "a"), None, "two tools are named 'a'"),
        ((), '{"name": "a"}', "the file must hold a JSON array of tools"),
        ((), "[{", "not JSON"),
        ((), '[{"name": "a", "params": {}}]', "entry 0: Object contains unknown field `params`"),
        ((), '[{"type": "function", "function": {"name": "a"}}]', "entry 0 is in OpenAI's form"),
        ((), '[{"description": "x"}]', "entry 0: Object missing required field `name`"),
        ((), " " * (MAX_TOOLS_FILE_BYTES + 1), "the file is over 1024 KiB"),
    ],
)
def test_bad_tools_are_one_line_and_status_2(
    fast: str, tmp_path: pathlib.Path, args: tuple[str, ...], file: str | None, message: str
) -> None:
    if file is not None:
        path = tmp_path / "tools.json"
        path.write_text(file)
        args = (*args, "--tools", str(path))
    out, err = io.StringIO(), io.StringIO()
    code = main(["call", "hi", "--config", fast, *args], out=out, err=err, environ={})
    assert code == 2 and out.getvalue() == ""
    assert err.getvalue().startswith("llmrt: ") and message in err.getvalue(), err.getvalue()
    assert len(err.getvalue().splitlines()) == 1


async def test_a_tool_in_openais_form_is_refused_by_the_process(
    fast: str, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "openai.json"
    path.write_text('[{"type": "function", "function": {"name": "a", "parameters": {}}}]')
    code, out, err = await run_cli("call", "hi", "--config", fast, "--tools", str(path))
    assert (code, out) == (2, "")
    assert err == (
        f"llmrt: --tools {path}: entry 0 is in OpenAI's form; write its `function` object "
        "(name, description, parameters) instead\n"
    )


async def test_a_missing_tools_file_is_named(fast: str, tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "nope.json"
    code, _, err = await run_cli("call", "hi", "--config", fast, "--tools", str(missing))
    assert code == 2
    assert err == f"llmrt: --tools {missing}: No such file or directory\n"


# ---- models the route does not list ----------------------------------------------------------


async def test_a_model_the_route_does_not_list_is_sent_with_a_warning(fast: str) -> None:
    results: dict[str, tuple[int, str, str]] = {}

    async def unknown() -> None:
        results["unknown"] = await run_cli("call", "hi", "--config", fast, "-m", "demo-9")

    async def known() -> None:
        results["known"] = await run_cli("call", "hi", "--config", fast, "-m", "demo-mini")

    await run_all(unknown, known)
    code, out, err = results["unknown"]
    assert code == 0 and out.startswith('You said: "hi"')  # the adapter still takes it
    assert err.splitlines()[0] == (
        "llmrt: warning: model 'demo-9' is not one route 'demo' knows (demo-1, demo-mini); "
        "sending it anyway (`llmrt models demo` lists what the endpoint serves)"
    )
    code, _, err = results["known"]
    assert code == 0 and "warning" not in err


# ---- serve: the playground URL, a busy port ---------------------------------------------------


async def test_the_banner_names_the_playground_and_it_answers() -> None:
    async with serving("--workers", "1") as served:
        port = await served.port()
        found = await served.expect(r"^playground: (\S+) \(open it in a browser\)$")
        assert found.group(1) == f"http://127.0.0.1:{port}/"
        status, body = await http_get(port, "/")
        assert status == 200 and "<html" in body.lower()


def listening_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.mark.parametrize("workers", [(), ("--workers", "2")])
async def test_a_busy_port_says_which_and_how_to_pick_another(workers: tuple[str, ...]) -> None:
    with listening_socket() as busy:
        port = busy.getsockname()[1]
        code, out, err = await run_cli("serve", "--port", str(port), *workers)
    assert code == 2, (out, err)
    assert err == (
        f"llmrt: port {port} on 127.0.0.1 is already in use (another llmrt serve?): stop what "
        "holds it, or pick another port with --port N (--port 0 takes any free port)\n"
    )
    assert "listening" not in out


async def test_a_host_that_is_not_this_machines_is_named() -> None:
    code, _, err = await run_cli(
        "serve", "--host", "192.0.2.1", "--port", "0", env={"LLMRT_GATEWAY_TOKEN": "t" * 32}
    )
    assert code == 2
    assert err == "llmrt: 192.0.2.1 is not an address of this machine: pick another with --host\n"


async def test_the_demo_answers_through_the_gateway_as_in_process(fast: str) -> None:
    # One stdout/stderr split whether the call runs here or through --via.
    async with serving("--config", fast) as served:
        port = await served.port()
        code, out, err = await run_cli("call", "via", "--via", f"ws://127.0.0.1:{port}/")
    assert code == 0, err
    assert out == f'You said: "via". {DEMO_TAIL}\n'
    assert err.rstrip().endswith("finish: stop") and "thinking: The user wrote 1 word." in err
