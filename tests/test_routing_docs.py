"""docs/routing.md runs as printed: its Python programs, its llmrt.toml files, its commands."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from llmrt.actors.app.config import load_config

DOC = Path(__file__).resolve().parent.parent / "docs" / "routing.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
BLOCKS = [
    (m.group(1), m.group(2), DOC.read_text()[: m.start()].count("\n") + 1)
    for m in BLOCK.finditer(DOC.read_text())
]


def _blocks(lang: str) -> list[tuple[str, int]]:
    return [(code, line) for kind, code, line in BLOCKS if kind == lang]


def test_the_page_has_its_examples() -> None:
    assert len(_blocks("python")) == 2 and len(_blocks("toml")) == 2
    assert len(_blocks("console")) == 1


@pytest.mark.parametrize(("code", "line"), _blocks("python"), ids=lambda v: str(v)[:12])
def test_python_examples_run_and_print_what_they_say(code: str, line: int, tmp_path: Path) -> None:
    path = tmp_path / "example.py"
    path.write_text(code)
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    # Each `print(...)  # -> VALUE` line of the example printed VALUE, in order.
    promised = re.findall(r"#\s*-> (.*)$", code, re.MULTILINE)
    assert done.stdout.splitlines() == promised, (line, done.stdout)


@pytest.mark.parametrize(("code", "line"), _blocks("toml"), ids=lambda v: str(v)[:12])
def test_toml_examples_load(code: str, line: int, tmp_path: Path) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text(code)
    config = load_config(path, environ={})
    assert [group.name for group in config.groups] == ["chat"]


def test_the_console_example(tmp_path: Path) -> None:
    ((code, _),) = _blocks("console")
    command, expected = code.split("\n", 1)
    assert command.startswith("$ llmrt ")
    done = subprocess.run(
        [sys.executable, "-m", "llmrt.actors.app.cli", *command.split()[2:]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected
