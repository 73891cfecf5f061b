"""What each command imports: ``llmrt --help`` and ``llmrt call`` leave out what they
do not use (issue 22, item 6). The time it takes is measured by
``bench/bench_startup.py``; here, which modules a fresh process has loaded."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from _serving import http_get

ROOT = Path(__file__).resolve().parent.parent

#: Runs the CLI's main in a fresh interpreter, once per command line given (a
#: JSON list of argument lists), then prints the modules it loaded.
PROBE = """
import json, sys
from llmrt.actors.app.cli import main
for argv in json.loads(sys.argv[1]):
    try:
        main(argv)
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def loaded(*argv: str) -> set[str]:
    """The modules a fresh process has loaded after running ``llmrt ARGV...``."""
    return loaded_after([list(argv)])


def loaded_after(commands: list[list[str]]) -> set[str]:
    """The modules a fresh process has loaded after running each command line in turn."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"},
    )
    modules: list[str] = json.loads(done.stderr.splitlines()[-1])
    return set(modules)


def test_help_loads_no_configuration_and_no_command() -> None:
    modules = loaded("--help")
    assert "llmrt.actors.app.cli" in modules
    for module in (
        "llmrt.actors.app.config",
        "llmrt.actors.app.plugins",
        "llmrt.actors.app.cli.call",
        "llmrt.actors.gateway",
        "llmrt.adapters._http",
    ):
        assert module not in modules, module


def test_a_call_loads_neither_the_gateway_nor_the_client(tmp_path: Path) -> None:
    config = tmp_path / "fast.toml"
    config.write_text('[[provider]]\nroute = "demo"\nadapter = "demo"\n')
    modules = loaded("call", "hi", "--config", str(config))
    assert "llmrt.actors.app.cli.call" in modules  # it did run the call
    gateway = sorted(m for m in modules if m.startswith("llmrt.actors.gateway"))
    assert gateway == []
    assert "llmrt.actors.gateway.client" not in modules


def test_a_command_line_loads_its_own_command_module_only(tmp_path: Path) -> None:
    # The parser is built for the command the line names: the other commands'
    # modules (their flags included) are never imported.
    from llmrt.actors.app.cli import COMMANDS

    every = {f"llmrt.actors.app.cli.{entry.module}" for entry in COMMANDS}
    assert every & loaded("--help") == set()
    config = tmp_path / "fast.toml"
    config.write_text('[[provider]]\nroute = "demo"\nadapter = "demo"\n')
    assert every & loaded("call", "hi", "--config", str(config)) == {"llmrt.actors.app.cli.call"}
    assert every & loaded("serve", "--help") == {"llmrt.actors.app.cli.serve"}


def test_commands_on_the_demo_route_never_load_the_http_client(tmp_path: Path) -> None:
    # Every command loads every adapter plugin; the HTTP adapters' plugins are
    # light, so httpx and the HTTP stack come only with a route that uses them.
    # One process runs the four (none of them unloads a module).
    config = tmp_path / "fast.toml"
    config.write_text('[[provider]]\nroute = "demo"\nadapter = "demo"\n')
    commands = [["call", "hi"], ["providers"], ["models", "demo"], ["routes"]]
    modules = loaded_after([[*argv, "--config", str(config)] for argv in commands])
    for argv in commands:
        assert f"llmrt.actors.app.cli.{argv[0]}" in modules  # the command did run
    assert "llmrt.actors.app.plugins" in modules  # and loaded the plugins
    http = {"httpx", "llmrt.adapters._http", "llmrt.adapters._transport"}
    assert http & modules == set()


async def test_serve_on_the_demo_route_never_loads_the_http_client(tmp_path: Path) -> None:
    # The gateway serving a demo route and answering a request: -X importtime
    # names every module the process imported, on stderr.
    config = tmp_path / "fast.toml"
    config.write_text('[[provider]]\nroute = "demo"\nadapter = "demo"\n')
    command = [sys.executable, "-X", "importtime", "-m", "llmrt.actors.app.cli", "serve"]
    env = {"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    proc = await trio.lowlevel.open_process(
        [*command, "--port", "0", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    out, err = bytearray(), bytearray()

    async def drain(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
        while chunk := await stream.receive_some(65536):
            into += chunk

    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                assert proc.stdout is not None and proc.stderr is not None
                nursery.start_soon(drain, proc.stderr, err)
                while b"listening on ws://" not in out:
                    chunk = await proc.stdout.receive_some(65536)
                    assert chunk, f"serve ended: {err.decode(errors='replace')[-2000:]}"
                    out += chunk
                port = int(out.split(b"ws://127.0.0.1:")[1].split(b"/")[0])
                status, body = await http_get(port, "/v1/models")
                assert status == 200 and "demo" in body
                proc.send_signal(signal.SIGINT)
                await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in err.decode(errors="replace").splitlines()
        if line.startswith("import time:")
    }
    assert "llmrt.actors.gateway" in imported  # the probe reads what serve imported
    assert {"httpx", "llmrt.adapters._http", "llmrt.adapters._transport"} & imported == set()


def test_every_command_module_has_the_command_shape() -> None:
    import importlib
    import inspect

    from llmrt.actors.app.cli import COMMANDS, build_parser

    assert [entry.name for entry in COMMANDS] == [
        "serve",
        "call",
        "providers",
        "models",
        "stats",
        "routes",
        "log",
        "reload",
    ]
    for entry in COMMANDS:
        module = importlib.import_module(f"llmrt.actors.app.cli.{entry.module}")
        assert list(inspect.signature(module.add_arguments).parameters) == ["parser"]
        assert list(inspect.signature(module.run).parameters) == ["args", "config", "streams"]
        # Its parser takes its own arguments and every command's --config.
        line = [entry.name, *_positionals(entry.name), "--config", "x.toml"]
        args = build_parser(entry.name).parse_args(line)
        assert (args.command, args.config) == (entry.name, "x.toml")


def _positionals(command: str) -> list[str]:
    return {"call": ["hi"], "models": ["demo"], "log": ["tail"]}.get(command, [])


def test_the_startup_bench_sums_top_level_imports_only() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from bench_startup import import_ms
    finally:
        sys.path.remove(str(ROOT / "bench"))
    text = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       100 |        100 |   encodings.aliases\n"
        "import time:       900 |       1000 | encodings\n"
        "import time:      2000 |       5000 |     deep.child\n"
        "import time:      1500 |       2500 | site\n"
        "some other line on stderr\n"
    )
    assert import_ms(text) == pytest.approx(3.5)
