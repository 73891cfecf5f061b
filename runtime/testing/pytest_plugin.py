"""The pytest plugin for cassettes: a ``cassette`` fixture and marker, and ``--cassette-mode``.

Installed with llmrt (the ``pytest11`` entry point ``llmrt``), so a test
asks for the fixture and points its adapter at ``cassette.base_url``::

    @pytest.mark.cassette(target="https://api.openai.com/v1")
    async def test_reply(cassette):
        adapter = OpenAIChatAdapter(base_url=cassette.base_url, ...)

The cassette file is ``cassettes/<module>/<test>.jsonl`` beside the test
module unless the marker names a ``path``. Settings come from, last wins:
the ``cassette_config`` fixture (a dict; override it in a conftest), then
``--cassette-mode``, then the marker's keyword arguments (those of
`llmrt.testing.cassette`). The fixture is async: tests run under trio
(pytest-trio). Importing this module imports pytest only; the cassette
machinery loads when a test asks for it.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ._cassette import Cassette

__all__ = ["cassette", "cassette_config", "pytest_addoption", "pytest_configure"]

_MODES = ("once", "none", "new_episodes", "all")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("llmrt", "llmrt cassettes")
    group.addoption(
        "--cassette-mode",
        choices=_MODES,
        default=None,
        help="how cassettes record: once (default), none (replay only), new_episodes, all",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cassette(path=None, **options): record / replay this test's provider exchanges"
        " (options: those of llmrt.testing.cassette)",
    )


def _default_path(request: pytest.FixtureRequest) -> Path:
    module = Path(str(request.node.path))
    name = re.sub(r"[^\w.-]+", "_", request.node.name).strip("_")
    return module.parent / "cassettes" / module.stem / f"{name}.jsonl"


@pytest.fixture
def cassette_config() -> dict[str, Any]:
    """Settings for every cassette of its scope (keyword arguments of `llmrt.testing.cassette`)."""
    return {}


@pytest.fixture
async def cassette(
    request: pytest.FixtureRequest, cassette_config: dict[str, Any]
) -> AsyncIterator[Cassette]:
    """This test's cassette, open for the test: point the adapter at ``cassette.base_url``."""
    from ._cassette import cassette as open_cassette

    options: dict[str, Any] = dict(cassette_config)
    mode = request.config.getoption("--cassette-mode")
    if mode is not None:
        options["mode"] = mode
    path: Any = options.pop("path", None)
    marker = request.node.get_closest_marker("cassette")
    if marker is not None:
        if marker.args:
            path = marker.args[0]
        options.update(marker.kwargs)
        path = options.pop("path", path)
    where = Path(path) if path is not None else _default_path(request)
    if not where.is_absolute():
        where = Path(str(request.node.path)).parent / where
    async with open_cassette(where, **options) as tape:
        yield tape
