"""A third-party adapter package, found through the ``llmrt.adapters`` entry points.

The package is written to a temporary directory as an installed
distribution (``<name>.dist-info`` with ``METADATA`` and ``entry_points.txt``
beside the module) and put on ``PYTHONPATH``; no network, no pip. Then
``llmrt providers`` and ``llmrt call`` run as real processes and use it
through ``llmrt.toml`` and zero-config detection, with no change to llmrt.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint

import pytest

from llmrt.actors.app.config import ConfigError, load_config
from llmrt.actors.app.plugins import PLUGIN_ERROR, installed, load_plugins
from llmrt.adapters.plugin import AdapterConfig, AdapterPlugin, ModelSpec

CLI = [sys.executable, "-m", "llmrt.actors.app.cli"]
SECRET = "sk-echo-never-shown-0123456789"

ECHO = '''
"""llmrt-echo: answers every prompt with its own words, louder or not."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Annotated, ClassVar, Literal

import msgspec

from llmrt import (
    Adapter,
    BlockEnd,
    BlockStart,
    Finish,
    FinishStop,
    GenerateOptions,
    ResolvedRetryPolicy,
    StreamChunk,
    TextBlock,
    TextDelta,
)
from llmrt.adapters.plugin import AdapterConfig, AdapterPlugin, Detected


class EchoAdapter(Adapter):
    def __init__(self, style: str, repeat: int, key_env: str | None) -> None:
        self.style, self.repeat, self.key_env = style, repeat, key_env

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        words = " ".join(
            block.text
            for message in options.messages
            for block in message.content
            if isinstance(block, TextBlock)
        )
        text = " ".join([words.upper() if self.style == "loud" else words] * self.repeat)
        yield BlockStart(index=0, block_type="text")
        yield TextDelta(index=0, text=f"echo: {text}")
        yield BlockEnd(index=0, block=TextBlock(text=f"echo: {text}"))
        yield Finish(reason=FinishStop())


class EchoConfig(AdapterConfig, tag="echo", frozen=True):
    style: Literal["plain", "loud"] = "plain"
    repeat: Annotated[int, msgspec.Meta(ge=1, le=5)] = 1
    api_key_env: str | None = None

    default_key_env: ClassVar[str | None] = "ECHO_API_KEY"

    def key_env(self) -> str | None:
        return self.api_key_env or self.default_key_env

    def default_model(self) -> str | None:
        return "echo-1"

    def build(
        self,
        *,
        key_env: str | None,
        retry: ResolvedRetryPolicy | None,
        environ: Mapping[str, str] | None,
    ) -> Adapter:
        return EchoAdapter(self.style, self.repeat, key_env)


PLUGIN = AdapterPlugin(
    config=EchoConfig,
    summary="echoes the prompt",
    detect=(Detected("ECHO_API_KEY", "echo-auto", EchoConfig(style="loud")),),
)
'''


def install(site: pathlib.Path, dist: str, module: str, source: str, points: str) -> None:
    """Write ``module`` and its distribution's metadata into ``site`` (an installed layout)."""
    (site / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[llmrt.adapters]\n{textwrap.dedent(points)}", encoding="utf-8"
    )


def llmrt_cli(
    cwd: pathlib.Path, site: pathlib.Path, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.endswith("_API_KEY") and key != "LLMRT_CONFIG"
    }
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), environ.get("PYTHONPATH")]))
    environ.update(env or {})
    return subprocess.run(
        [*CLI, *argv], cwd=cwd, env=environ, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def site(tmp_path: pathlib.Path) -> pathlib.Path:
    site = tmp_path / "site"
    site.mkdir()
    install(site, "llmrt_echo", "llmrt_echo", ECHO, "echo = llmrt_echo:PLUGIN\n")
    return site


def write_config(cwd: pathlib.Path, text: str) -> pathlib.Path:
    path = cwd / "llmrt.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_a_plugin_package_serves_routes_from_llmrt_toml(
    tmp_path: pathlib.Path, site: pathlib.Path
) -> None:
    write_config(
        tmp_path,
        """\
        [[provider]]
        route = "parrot"
        adapter = "echo"
        style = "loud"
        repeat = 2
        """,
    )
    listed = llmrt_cli(tmp_path, site, "providers")
    assert listed.returncode == 0, listed.stderr
    parrot = next(line for line in listed.stdout.splitlines() if line.startswith("parrot"))
    assert "echo" in parrot and "$ECHO_API_KEY (NOT SET)" in parrot
    assert "config file line 1" in parrot
    assert "demo" in listed.stdout  # the built-in adapters still serve beside it

    called = llmrt_cli(tmp_path, site, "call", "hi there", "-p", "parrot", "--no-color")
    assert called.returncode == 0, called.stderr
    # The plugin's default model was used (no --model) and its settings reached it.
    assert "echo: HI THERE HI THERE" in called.stdout
    assert "finish: stop" in called.stderr  # the answer alone on stdout


def test_a_plugin_key_variable_adds_its_zero_config_route(
    tmp_path: pathlib.Path, site: pathlib.Path
) -> None:
    env = {"ECHO_API_KEY": SECRET}
    listed = llmrt_cli(tmp_path, site, "providers", env=env)
    assert listed.returncode == 0, listed.stderr
    auto = next(line for line in listed.stdout.splitlines() if line.startswith("echo-auto"))
    assert "$ECHO_API_KEY (set)" in auto and "environment ECHO_API_KEY" in auto
    assert SECRET not in listed.stdout + listed.stderr
    called = llmrt_cli(tmp_path, site, "call", "quiet words", "-p", "echo-auto", env=env)
    assert called.returncode == 0, called.stderr
    assert "echo: QUIET WORDS" in called.stdout


@pytest.mark.parametrize(
    ("entry", "line", "reasons"),
    [
        ('style = "whisper"', 4, ["unknown style 'whisper'", "$.provider[0].style"]),
        ("repeat = 9", 4, ["Expected `int` <= 5", "$.provider[0].repeat"]),
        ("colour = 1", 4, ["unknown field `colour`", "$.provider[0]"]),
        # A key of another adapter is named as such, the plugin's kind included.
        ('preset = "openai"', 4, ["`preset` does not apply to adapter 'echo'", "openai_chat"]),
    ],
)
def test_a_plugin_entry_is_validated_by_its_struct(
    tmp_path: pathlib.Path, site: pathlib.Path, entry: str, line: int, reasons: list[str]
) -> None:
    path = write_config(tmp_path, f'[[provider]]\nroute = "parrot"\nadapter = "echo"\n{entry}\n')
    result = llmrt_cli(tmp_path, site, "providers")
    assert result.returncode == 2
    assert result.stderr.startswith(f"llmrt: {path.name}:{line}: "), result.stderr
    for reason in reasons:
        assert reason in result.stderr


def test_a_broken_plugin_costs_its_own_kind_only(
    tmp_path: pathlib.Path, site: pathlib.Path
) -> None:
    install(
        site,
        "llmrt_broken",
        "llmrt_broken",
        "raise ImportError('the broken plugin needs a library that is not here')\n",
        "broken = llmrt_broken:PLUGIN\n",
    )
    write_config(tmp_path, '[[provider]]\nroute = "parrot"\nadapter = "echo"\n')
    listed = llmrt_cli(tmp_path, site, "providers")
    assert listed.returncode == 0, listed.stderr
    assert any(line.startswith("parrot") for line in listed.stdout.splitlines())
    warnings = [line for line in listed.stderr.splitlines() if PLUGIN_ERROR in line]
    assert warnings == [
        f"llmrt: warning [{PLUGIN_ERROR}]: adapter 'broken' failed to load: "
        "ImportError: the broken plugin needs a library that is not here"
    ]

    path = write_config(tmp_path, '[[provider]]\nroute = "b"\nadapter = "broken"\n')
    refused = llmrt_cli(tmp_path, site, "providers")
    assert refused.returncode == 2
    assert f"{path.name}:3: adapter 'broken' failed to load" in refused.stderr
    assert "$.provider[0].adapter" in refused.stderr


def test_a_kind_claimed_twice_is_refused_with_both_claimants(tmp_path: pathlib.Path) -> None:
    points = [
        EntryPoint("echo", "first_echo:PLUGIN", "llmrt.adapters"),
        EntryPoint("echo", "second_echo:PLUGIN", "llmrt.adapters"),
        EntryPoint("demo", "llmrt.adapters.demo:PLUGIN", "llmrt.adapters"),
        # One distribution seen twice on the path is one claim, not a conflict.
        EntryPoint("demo", "llmrt.adapters.demo:PLUGIN", "llmrt.adapters"),
    ]
    plugins = load_plugins(points)
    assert list(plugins.adapters) == ["demo"]
    problem = plugins.problems["echo"]
    assert "claimed by" in problem and "first_echo:PLUGIN" in problem
    assert "second_echo:PLUGIN" in problem

    path = tmp_path / "llmrt.toml"
    path.write_text('[[provider]]\nroute = "e"\nadapter = "echo"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={}, plugins=plugins)
    assert caught.value.code == PLUGIN_ERROR
    assert caught.value.line == 3 and "claimed by" in caught.value.reason
    # The other adapters of the same set keep working.
    path.write_text('[[provider]]\nroute = "d"\nadapter = "demo"\n', encoding="utf-8")
    routes = load_config(path, environ={}, plugins=plugins).routes
    assert [s.route for s in routes] == ["d", "demo"]


def test_a_plugin_that_is_not_a_plugin_or_mistagged_is_a_problem() -> None:
    points = [
        EntryPoint("notplugin", "llmrt.adapters.demo:DemoAdapter", "llmrt.adapters"),
        EntryPoint("renamed", "llmrt.adapters.demo:PLUGIN", "llmrt.adapters"),
    ]
    plugins = load_plugins(points)
    assert plugins.adapters == {}
    assert "is not an AdapterPlugin" in plugins.problems["notplugin"]
    assert "tagged 'demo', not 'renamed'" in plugins.problems["renamed"]


class RaisingConfig(AdapterConfig, tag="raising", frozen=True):
    def check(self) -> None:
        raise RuntimeError(SECRET)


#: Loaded by entry points below (this test module is importable by its name).
RAISING = AdapterPlugin(config=RaisingConfig, summary="a plugin whose check() has a bug")
NOT_A_STRUCT = AdapterPlugin(config=dict, summary="no config Struct")  # type: ignore[arg-type]


def test_a_plugin_bug_is_a_coded_error_of_its_kind(tmp_path: pathlib.Path) -> None:
    points = [
        EntryPoint("raising", f"{__name__}:RAISING", "llmrt.adapters"),
        EntryPoint("nostruct", f"{__name__}:NOT_A_STRUCT", "llmrt.adapters"),
        EntryPoint("demo", "llmrt.adapters.demo:PLUGIN", "llmrt.adapters"),
    ]
    plugins = load_plugins(points)
    assert list(plugins.adapters) == ["raising", "demo"]
    assert "not an AdapterConfig Struct" in plugins.problems["nostruct"]
    path = tmp_path / "llmrt.toml"
    path.write_text('[[provider]]\nroute = "r"\nadapter = "raising"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={}, plugins=plugins)
    assert caught.value.code == PLUGIN_ERROR and caught.value.line == 3
    assert "failed to check its entry (RuntimeError)" in caught.value.reason
    assert SECRET not in str(caught.value)


def test_unknown_adapter_lists_the_installed_ones(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text('[[provider]]\nroute = "x"\nadapter = "nope"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.line == 3
    for kind in installed().adapters:
        assert kind in caught.value.reason


#: Loads the installed plugins in a fresh interpreter, then builds one adapter of
#: each HTTP kind; prints the modules loaded after each step.
LIGHT_PROBE = """
import json, sys
from llmrt.actors.app.plugins import installed

plugins = installed()
print(json.dumps(sorted(plugins.problems)))
print(json.dumps(sorted(plugins.adapters)))
print(json.dumps(sorted(sys.modules)))
for kind in ("openai_chat", "anthropic", "gemini", "openai_responses"):
    config = plugins.adapters[kind].config(base_url="http://127.0.0.1:9")
    adapter = config.build(key_env=None, retry=None, environ={})
    print(type(adapter).__name__, file=sys.stderr)
print(json.dumps(sorted(sys.modules)))
"""

#: What an HTTP adapter needs to stream, none of which loading its plugin needs.
HTTP_STACK = {
    "httpx",
    "llmrt.adapters._http",
    "llmrt.adapters._transport",
    "llmrt.adapters._sse",
    "llmrt.adapters._models",
    "llmrt.adapters._openai_wire",
    "llmrt.adapters._anthropic_wire",
    "llmrt.adapters._gemini_wire",
    "llmrt.adapters._responses_wire",
    "llmrt.adapters._openai_chat_adapter",
    "llmrt.adapters._anthropic_adapter",
    "llmrt.adapters._gemini_adapter",
    "llmrt.adapters._openai_responses_adapter",
}


def test_loading_the_installed_plugins_leaves_the_http_stack_unloaded() -> None:
    # Every command loads every plugin: a demo call must not pay for httpx. The
    # adapter is imported when a route of its kind is built, and only then.
    done = subprocess.run(
        [sys.executable, "-c", LIGHT_PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    problems, kinds, loaded, built = (json.loads(line) for line in done.stdout.splitlines())
    assert problems == []
    assert {"openai_chat", "anthropic", "demo", "gemini", "openai_responses"} <= set(kinds)
    assert HTTP_STACK & set(loaded) == set()
    assert set(built) >= HTTP_STACK
    assert done.stderr.split() == [
        "OpenAIChatAdapter",
        "AnthropicAdapter",
        "GeminiAdapter",
        "OpenAIResponsesAdapter",
    ]


@pytest.mark.parametrize(
    ("kind", "fallback", "cls"),
    [
        ("anthropic", "claude-sonnet-4-5", "AnthropicAdapter"),
        ("gemini", "gemini-2.5-flash", "GeminiAdapter"),
        ("openai_responses", "gpt-5-mini", "OpenAIResponsesAdapter"),
    ],
)
def test_an_http_plugin_builds_its_adapter_class_with_the_entrys_keys(
    kind: str, fallback: str, cls: str
) -> None:
    # HttpAdapterConfig's own build: the class its plugin names, from adapter_kwargs.
    config_type = importlib.import_module(f"llmrt.adapters._{kind}_plugin").PLUGIN.config
    assert config_type().default_model() == fallback
    entry = config_type(
        base_url="http://127.0.0.1:9/v1", models=(ModelSpec(id="m-1"),), display_name="Mine"
    )
    assert entry.default_model() == "m-1"
    adapter = entry.build(key_env="MY_KEY", retry=None, environ={"MY_KEY": "sk-test"})
    assert type(adapter).__name__ == cls
    assert type(adapter).__module__ == f"llmrt.adapters._{kind}_adapter"
    assert adapter.display_name == "Mine"
