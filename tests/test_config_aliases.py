"""``[aliases]`` in llmrt.toml: bare model names for the HTTP APIs, checked at their line."""

from __future__ import annotations

import pytest

from llmrt.actors.app.config import Config, ConfigError, validate_config
from llmrt.actors.app.plugins import installed

ROUTES = """\
[[provider]]
route = "fast"
adapter = "demo"

[[group]]
name = "pool"
[[group.deployment]]
route = "fast"
model = "demo-1"

[aliases]
"""


def config(aliases: str) -> Config:
    return validate_config(ROUTES + aliases, file="llmrt.toml", environ={}, plugins=installed())


def test_aliases_name_a_route_or_a_group() -> None:
    loaded = config('"quick" = "fast/demo-1"\n"pooled" = "pool/any"\n')
    assert loaded.aliases == {"quick": "fast/demo-1", "pooled": "pool/any"}


@pytest.mark.parametrize(
    ("aliases", "line", "reason"),
    [
        ('"ok" = "fast/demo-1"\n"x" = "nowhere/m"\n', 13, "neither a route nor a group"),
        ('"x" = "fast"\n', 12, "names `provider/model`"),
        ('"a/b" = "fast/demo-1"\n', 12, "bare model name"),
    ],
)
def test_a_bad_alias_is_an_error_at_its_line(aliases: str, line: int, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(aliases)
    assert caught.value.line == line
    assert reason in caught.value.reason
    assert str(caught.value).startswith(f"llmrt.toml:{line}: ")
