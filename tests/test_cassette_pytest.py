"""The cassette pytest plugin, used by a temporary project the way a user's test suite uses it.

Each test writes a small project (a local upstream as its "real provider",
a test calling it through an OpenAI-compatible adapter) and runs pytest on
it (in process, with pytester), twice or more, checking what the runs recorded, what
they replayed and what they reported.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest
from llmrt.testing import SSEScript, open_upstream, openai_events


@pytest.fixture
async def provider():
    async with open_upstream(SSEScript(openai_events(["Hi", "!"])), script_paths=None) as up:
        yield up


@pytest.fixture
def cassette_config(provider):
    return {"target": provider.base_url + "/v1"}
"""

TEST = """
import llmrt, pytest
from llmrt.adapters.openai_chat import OpenAIChatAdapter

PROMPTS = {prompts!r}


async def reply(base_url, prompt):
    environ = {{"K": "sk-t-0123456789"}}
    adapter = OpenAIChatAdapter(base_url=base_url, api_key_env="K", environ=environ)
    options = llmrt.GenerateOptions(provider="p", model="m", messages=(llmrt.user_message(prompt),))
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        async with rt.stream(options) as call:
            return "".join([c.text async for c in call if isinstance(c, llmrt.TextDelta)])


@pytest.mark.cassette{marker}
async def test_talk(cassette, provider):
    for prompt in PROMPTS:
        assert await reply(cassette.base_url, prompt) == "Hi!"
    print(f"RECORDED={{len(cassette.recorded)}} PLAYED={{cassette.played}}"
          f" UPSTREAM={{len(provider.requests)}}")
"""

TAPE = Path("cassettes", "test_talk", "test_talk.jsonl")


def _plugin_args() -> list[str]:
    """Nothing when llmrt's entry point is installed; else load the plugin by name."""
    points = importlib.metadata.distribution("llmrt").entry_points
    if any(p.group == "pytest11" and p.value == "llmrt.testing.pytest_plugin" for p in points):
        return []
    return ["-p", "llmrt.testing.pytest_plugin"]


def _project(pytester: pytest.Pytester, prompts: list[str], marker: str = "") -> None:
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_talk=TEST.format(prompts=prompts, marker=marker))


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # In process: a fresh interpreter per run would cost more than the runs themselves.
    return pytester.runpytest_inprocess("-s", "-p", "no:cacheprovider", *_plugin_args(), *args)


def test_once_records_the_first_run_and_replays_the_next(pytester: pytest.Pytester) -> None:
    _project(pytester, ["hello"])
    first = _run(pytester)
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["*RECORDED=1 PLAYED=0 UPSTREAM=1*"])
    tape = pytester.path / TAPE
    recorded = tape.read_bytes()
    assert recorded.count(b"\n") == 1 and b'"version":1' in recorded
    second = _run(pytester)
    second.assert_outcomes(passed=1)
    # Offline: the provider saw nothing, and the file is as it was.
    second.stdout.fnmatch_lines(["*RECORDED=0 PLAYED=1 UPSTREAM=0*"])
    assert tape.read_bytes() == recorded


def test_none_never_records(pytester: pytest.Pytester) -> None:
    _project(pytester, ["hello"])
    refused = _run(pytester, "--cassette-mode=none")
    refused.assert_outcomes(failed=1)  # pytest-trio reports a fixture's error so
    refused.stdout.fnmatch_lines(["*CassetteError*mode 'none' never records*"])
    assert not (pytester.path / TAPE).exists()
    _run(pytester).assert_outcomes(passed=1)
    replayed = _run(pytester, "--cassette-mode=none")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["*RECORDED=0 PLAYED=1 UPSTREAM=0*"])


def test_new_episodes_records_only_the_new_requests(pytester: pytest.Pytester) -> None:
    _project(pytester, ["hello"])
    _run(pytester).assert_outcomes(passed=1)
    _project(pytester, ["hello", "again"])
    grown = _run(pytester, "--cassette-mode=new_episodes")
    grown.assert_outcomes(passed=1)
    grown.stdout.fnmatch_lines(["*RECORDED=1 PLAYED=1 UPSTREAM=1*"])
    assert (pytester.path / TAPE).read_bytes().count(b"\n") == 2
    # Both are on the cassette now: a replay-only run plays them both.
    _run(pytester, "--cassette-mode=none").stdout.fnmatch_lines(
        ["*RECORDED=0 PLAYED=2 UPSTREAM=0*"]
    )


def test_a_request_the_cassette_lacks_fails_with_a_diff(pytester: pytest.Pytester) -> None:
    _project(pytester, ["hello"])
    _run(pytester).assert_outcomes(passed=1)
    _project(pytester, ["goodbye"])
    failed = _run(pytester)
    # The test's own assertion fails (the request was refused), and the cassette says why.
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(
        [
            "*CassetteMismatch*",
            "*no recorded exchange matches POST /v1/chat/completions*",
            '*-      "content": "hello",*',
            '*+      "content": "goodbye",*',
        ]
    )
    assert "sk-t-0123456789" not in failed.stdout.str()


def test_the_marker_names_the_file_and_the_mode(pytester: pytest.Pytester) -> None:
    _project(pytester, ["hello"], marker='("tapes/mine.jsonl", mode="all")')
    for _ in range(2):
        run = _run(pytester)
        run.assert_outcomes(passed=1)
        # "all" records every run anew, over the old file.
        run.stdout.fnmatch_lines(["*RECORDED=1 PLAYED=0 UPSTREAM=1*"])
    assert (pytester.path / "tapes" / "mine.jsonl").read_bytes().count(b"\n") == 1
    assert not (pytester.path / TAPE).exists()
