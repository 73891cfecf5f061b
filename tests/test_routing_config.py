"""``[[group]]`` and ``[routing]`` in ``llmrt.toml``: loaded, checked at their lines, registered."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from _routing import ask, finish_of, served_by

import llmrt
from llmrt import FinishStop
from llmrt.actors.app.cli import main
from llmrt.actors.app.config import ConfigError, describe, load_config, register_config
from llmrt.actors.routing import Deployment, GroupsHandle

ROUTES = """\
[[provider]]
route = "one"
adapter = "demo"

[[provider]]
route = "two"
adapter = "demo"
"""

GROUPS = """
[routing]
seed = 3

[[group]]
name = "chat"
strategy = "weighted"
first_chunk_timeout = 10.0
[[group.deployment]]
route = "one"
model = "demo-1"
rpm = 500
[[group.deployment]]
route = "two"
model = "demo-1"
tier = 2
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llmrt.toml"
    path.write_text(text)
    return path


def test_groups_load_with_their_deployments(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ROUTES + GROUPS), environ={})
    (chat,) = config.groups
    assert chat.name == "chat" and chat.strategy == "weighted"
    assert chat.first_chunk_timeout == 10.0
    assert chat.deployments == (
        Deployment(route="one", model="demo-1", rpm=500),
        Deployment(route="two", model="demo-1", tier=2),
    )
    assert config.routing.seed == 3 and config.routing.redis is None
    assert describe(config)[-1].split() == [
        "chat",
        "group/weighted",
        "one/demo-1,",
        "two/demo-1",
        "[routing",
        "group]",
    ]


@pytest.mark.parametrize(
    ("change", "line", "reason"),
    [
        (("rpm = 500", "rmp = 500"), 19, "unknown field `rmp`"),
        (('route = "two"\nmodel', 'route = "three"\nmodel'), 21, "deployment route 'three'"),
        (('strategy = "weighted"', 'strategy = "fastest"'), 14, "unknown strategy 'fastest'"),
        (("tier = 2", "tier = 0"), 23, "Expected `int` >= 1"),
        (("seed = 3", 'redis = "http://localhost"'), 10, "redis must be a redis://"),
        (('name = "chat"', 'name = "one"'), 13, "has the name of a provider route"),
        (("first_chunk_timeout = 10.0", "first_chunk_timeout = inf"), 15, "finite number"),
    ],
)
def test_a_bad_group_is_a_config_error_at_its_line(
    tmp_path: Path, change: tuple[str, str], line: int, reason: str
) -> None:
    text = (ROUTES + GROUPS).replace(*change)
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, text), environ={})
    assert raised.value.line == line, str(raised.value)
    assert reason in raised.value.reason
    assert str(raised.value).startswith(f"{tmp_path / 'llmrt.toml'}:{line}: ")


def test_a_redis_password_is_never_in_an_error(tmp_path: Path) -> None:
    text = ROUTES + GROUPS.replace("seed = 3", 'redis = "redis://:hunter2-secret@:nope/0"')
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, text), environ={})
    assert "hunter2" not in str(raised.value)


async def test_register_config_registers_the_groups_last(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ROUTES + GROUPS), environ={})
    async with llmrt.open_runtime() as rt:
        handles = await register_config(rt, config)
        assert isinstance(handles[-1], GroupsHandle)
        assert [p.id for p in rt.list_providers()] == ["one", "two", "demo", "chat"]
        chunks = await ask(rt)
    assert isinstance(finish_of(chunks).reason, FinishStop)
    assert served_by(chunks) == "one"  # tier 1 first


def test_llmrt_call_reaches_a_group(tmp_path: Path) -> None:
    path = write(tmp_path, ROUTES + GROUPS)
    out = io.StringIO()
    code = main(["call", "--config", str(path), "-p", "chat", "hello group"], out=out, environ={})
    assert code == 0
    assert 'You said: "hello group"' in out.getvalue()
