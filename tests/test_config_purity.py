"""Validating ``llmrt.toml`` is pure; registering it into a runtime is where the effects are.

``llmrt.actors.app.config`` is a facade over modules of two kinds: the pure
ones (the text of the file, the environment's variable names and the
installed plugins in; a `Config` or a `ConfigError` out) and the two that do
I/O (`_load` reads the file, `_register` builds adapters and registers them
into a runtime). The walk reads the pure modules with `ast`: their own import
statements (module-level or deferred) name no trio, no socket, file or
process module and none of the effectful modules of llmrt, and they call no
``open`` / ``print`` / ``installed``; they define no coroutine. Then
`validate_config` runs with every way to open a file or a socket made to fail.
"""

from __future__ import annotations

import ast
import builtins
import io
import os
import socket
import textwrap
from pathlib import Path

import pytest

import llmrt.actors.app.config as config_package
from llmrt.actors.app.config import ConfigError, load_config, validate_config
from llmrt.actors.app.plugins import installed

FOLDER = Path(config_package.__file__).parent
PACKAGE = "llmrt.actors.app.config"
#: The pure modules of the package; every other one is named in `EFFECTS`.
PURE = ("_describe", "_routing", "_schema", "_secrets", "_suggest", "_types", "_validate")
#: The modules that do I/O, and what they do.
EFFECTS = {
    "_load": "reads the file, os.environ and the installed entry points",
    "_register": "builds adapters and registers them into a runtime (trio)",
}
#: Standard and third-party modules that do I/O, keep time or run tasks.
IO_MODULES = {
    "asyncio",
    "httpx",
    "importlib",
    "io",
    "os",
    "pathlib",
    "shutil",
    "socket",
    "subprocess",
    "tempfile",
    "threading",
    "time",
    "trio",
    "trio_websocket",
}
#: llmrt's modules with effects: the runtime and its registry, the config's own effects.
EFFECT_MODULES = {
    "llmrt.actors._runtime",
    "llmrt.actors._registry",
    "llmrt.actors._registration",
    *(f"{PACKAGE}.{name}" for name in EFFECTS),
}
CALLS = {"open", "print", "input", "exec", "eval", "__import__", "installed"}
#: (module, call) pairs the rule allows, with the reason.
ALLOWED = {
    ("_types", "installed"): "Config's defaults: a Config made in code (Config(routes=...)) "
    "serves the installed adapters; validate_config always passes its own plugins",
}


def _imports(name: str, tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # A module of the package: its parent is PACKAGE.
                base = f"{PACKAGE}.{name}".split(".")[: -node.level]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def _problems(name: str) -> list[str]:
    tree = ast.parse((FOLDER / f"{name}.py").read_text(encoding="utf-8"))
    problems = []
    for target in sorted(_imports(name, tree)):
        if target.split(".")[0] in IO_MODULES or target in EFFECT_MODULES:
            problems.append(f"imports {target}")
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncFunctionDef | ast.Await):
            problems.append(f"async code at line {node.lineno}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            call = node.func.id
            if call in CALLS and (name, call) not in ALLOWED:
                problems.append(f"calls {call}() at line {node.lineno}")
    return problems


def test_the_walk_sees_every_module_of_the_package() -> None:
    modules = {path.stem for path in FOLDER.glob("*.py")} - {"__init__"}
    assert modules == set(PURE) | set(EFFECTS)


def test_the_pure_modules_import_no_io_and_call_none() -> None:
    assert {name: _problems(name) for name in PURE if _problems(name)} == {}


def test_the_walk_would_catch_the_effects() -> None:
    # The two modules with effects are caught for what they do.
    assert "imports trio" in _problems("_register")
    assert "imports llmrt.actors._runtime" in _problems("_register")
    assert any(problem.startswith("async code") for problem in _problems("_register"))
    assert any(problem.startswith("calls open()") for problem in _problems("_load"))
    assert "imports os" in _problems("_load")


TEXT = textwrap.dedent(
    """\
    [defaults]
    stream_idle_timeout = 30

    [[provider]]
    route = "local"
    adapter = "openai_chat"
    base_url = "http://127.0.0.1:8000/v1"
    models = [{ id = "m1" }]
    """
)


def refuse_io(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way to open a file or a socket fails while ``monkeypatch`` holds."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"I/O during validation: {args!r:.80}")

    for owner, name in [
        (builtins, "open"),
        (io, "open"),
        (io, "open_code"),
        (os, "open"),
        (os, "stat"),
        (os, "listdir"),
        (os, "scandir"),
        (socket, "socket"),
        (socket, "create_connection"),
        (socket, "getaddrinfo"),
    ]:
        monkeypatch.setattr(owner, name, refuse)


def test_validation_does_no_io(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "llmrt.toml"
    file.write_text(TEXT)
    environ = {"DEEPSEEK_API_KEY": "set"}
    plugins = installed()
    loaded = load_config(file, environ=environ, plugins=plugins)
    # What validation may import lazily is imported now, while files can still be opened.
    validate_config(TEXT, file=str(file), environ=environ, plugins=plugins)
    with monkeypatch.context() as patch:
        refuse_io(patch)
        with pytest.raises(AssertionError, match="I/O during validation"):
            file.read_text()  # the patch holds
        validated = validate_config(TEXT, file=str(file), environ=environ, plugins=plugins)
        with pytest.raises(ConfigError, match=r":6: unknown adapter 'nope'"):
            validate_config(
                TEXT.replace('"openai_chat"', '"nope"'),
                file=str(file),
                environ=environ,
                plugins=plugins,
            )
    assert validated == loaded
    assert [spec.route for spec in validated.routes][:2] == ["local", "deepseek"]
    assert validated.route("local").stream_idle_timeout == 30  # type: ignore[union-attr]
