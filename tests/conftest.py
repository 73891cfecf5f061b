"""Shared fixtures and helpers for the actor-core tests.

A test marked ``anyio`` runs under anyio's pytest plugin instead of
pytest-trio (see `pytest_collection_modifyitems`).

Fixtures: ``runtime`` (an `LlmRuntime` from a fresh `llmrt.open_runtime()`),
``redis_server`` (a real redis-server for the session, see ``_redis.py``).
Helpers (plain functions, ``from conftest import ...``): `make_options`,
`collect`, `finish_reason`, `examples`.

Hypothesis profiles: ``$LLMRT_HYPOTHESIS_PROFILE`` selects one. ``dev`` (the
default) runs a fifth of every property test's examples, so the suite stays
quick to run while working; ``ci`` (what ``.ci/run`` sets) runs the full count.

Keeping the suite cheap (``scripts/test`` runs it on twice as many processes
as there are CPUs, with ``--dist loadfile``, so each file stays in one process):

- Most of the suite's time is child interpreters (each ``llmrt`` CLI process,
  ``llmrt serve`` or doc example imports trio, httpx and llmrt afresh). Start
  a process only when the process is the point (its exit status, signals, its
  output); otherwise serve in the test's own trio loop (``serve_gateway``,
  ``llmrt.testing.open_upstream``) and call it in-process.
- A test that runs ``llmrt`` as a process starts it through
  ``_cli_process.cli_argv()`` (``spawn_cli``, ``_serving.serving``, the
  examples' ``llmrt``): forked from one warm interpreter per test process
  (``_warm_llmrt.py``), about a fifth of a cold start's CPU. Only a test
  of start-up itself, or of a race a passed-on signal would shift, runs it
  cold (``warm=False``).
- Share a served process between the tests of one file with a module-scoped
  fixture when the tests only read from it; a file is never split between
  workers, so the fixture starts once per run.
- Ports: ask for port 0 wherever the server can report its port; for servers
  that cannot (redis-server, nginx) and for "nothing listens here" ports, use
  ``_ports.free_port``: it draws from this worker's own slice, outside port 0's range.
- The built-in demo route is unpaced (``$LLMRT_DEMO_TOKENS_PER_SECOND`` is
  ``0``, set below, inherited by child processes).
- Every process collects every file: a test module imports at its top only
  what collection needs. The provider SDKs (2.5 s of CPU) are deferred
  (``_sdks.py``), and the files that use them are one unit of work
  (`SDK_FILES`), so one process imports them.
- Once collected, the session's objects (every test module, the items) are
  frozen out of the cyclic collector's sight
  (`pytest_collection_finish`): each later collection would scan them again
  and find nothing. Objects that tests make are collected as ever.
- Property tests take ``max_examples=examples(full)`` (or the profile's
  default); nothing is tuned to a wall-clock time.
"""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from _redis import RedisServer
from hypothesis import settings

import llmrt
from llmrt import Finish, FinishReason, GenerateOptions, StreamChunk, user_message
from llmrt.adapters.demo import DEMO_PACE_ENV

#: The built-in demo route streams unpaced in this process and every process it
#: starts (doc examples, ``llmrt`` commands, servers): the suite reads the
#: demo's answers, it does not watch them arrive at 60 tokens a second. A test
#: about pacing names its own pace (a ``tokens_per_second`` route, or this
#: variable in its child's environment).
os.environ[DEMO_PACE_ENV] = "0"

#: ``max_examples`` is hypothesis' own default in ``ci``; `examples` scales by it.
settings.register_profile("ci", max_examples=100, deadline=None)
settings.register_profile("dev", max_examples=20, deadline=None)
settings.load_profile(os.environ.get("LLMRT_HYPOTHESIS_PROFILE", "dev"))


def examples(full: int) -> int:
    """A property test's example count: ``full`` under the ``ci`` profile, a fifth under ``dev``."""
    return max(10, full * settings().max_examples // 100)


#: The files that take longest (1.5 s and more on two cores, longest first) run
#: first. ``--dist loadfile`` hands a worker its next file when it has two
#: tests or fewer left, in collection order (`pytest_configure` keeps xdist from
#: reordering): in file-name order, or by test count, a long file
#: (``test_workers*``, ``test_nginx``) could come last, and one worker ran it
#: while the other had nothing left to do. Longest first, the last files handed
#: out are short ones; a file not listed takes well under two seconds.
LONG_FILES = (
    "test_examples.py",
    "test_playground.py",
    "test_cli_unix.py",
    "test_http_api.py",
    "test_workers.py",
    "test_workers_metrics.py",
    "test_cli.py",
    "test_nginx.py",
    "test_plugins.py",
    "test_config_secrets.py",
    "test_cli_connect.py",
    "test_cassette.py",
    "test_call_log_cli.py",
    "test_routing_serve.py",
    "test_http_api_calls.py",
    "test_cli_interrupt.py",
    "test_validation.py",
    "test_aio_cancel.py",
    "test_cli_startup.py",
    "test_aio_served.py",
    "test_reload_serve.py",
    "test_no_adapter.py",
    "test_routing_docs.py",
    "test_hostile_suite.py",
    "test_routing_redis.py",
    "test_import_graph.py",
    "test_http_adapters.py",
    "test_bench_runner.py",
    "test_otel.py",
    "test_exchange.py",
    "test_calls.py",
    "test_stopper.py",
    "test_module_state.py",
    "test_routing_wire.py",
    "test_actors_imports.py",
    "test_cassette_pytest.py",
    "test_gateway_admission.py",
)


#: The files that use the provider SDKs (``_sdks.py``): one process runs them
#: all, in `LONG_FILES` order, so that only it imports the SDKs (2.5 s of CPU).
SDK_FILES = frozenset(
    {
        "test_api_chat.py",
        "test_api_errors.py",
        "test_api_ledger.py",
        "test_api_messages.py",
        "test_api_replay.py",
        "test_api_responses.py",
        "test_http_api.py",
        "test_http_api_wire.py",
    }
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with `SDK_FILES` one unit of work instead of one per file."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "the provider SDKs' files" if path.rpartition("/")[2] in SDK_FILES else path

    return Scheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """Files are handed out in `LONG_FILES` order, not reordered by xdist.

    pytest-xdist (3.2 and later) sorts ``--dist loadfile``'s files by their
    number of tests, most first, unless ``--no-loadscope-reorder`` is given:
    the long files of few tests (``test_workers_metrics.py``: two tests, 14 s)
    then came last, and one worker ran them alone.
    """
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`LONG_FILES` first; tests marked ``anyio`` run on anyio's plugin, not pytest-trio.

    The order within a file, and of the other files, stays as collected.
    ``trio_mode`` marks every ``async def`` test ``trio``; a test that names
    its backends through anyio's ``anyio_backend`` fixture (tests/test_contract.py)
    would otherwise be run by both plugins.
    """
    rank = {name: n for n, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
    for item in items:
        if item.get_closest_marker("anyio") is not None:
            item.own_markers[:] = [m for m in item.own_markers if m.name != "trio"]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection allocated: in this process it lives until the session ends.

    In the ten in-process files that allocate most, the collector's time
    drops from 2.1 s to 0.9 s; its passes never go through these objects again.
    """
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port, shared by the session's routing tests.

    Tests that stop or restart Redis start their own (`RedisServer().start()`).
    """
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def runtime() -> AsyncIterator[llmrt.LlmRuntime]:
    """A runtime with default settings, shut down after the test."""
    async with llmrt.open_runtime() as rt:
        yield rt


def make_options(
    provider: str = "p", model: str = "m", *, prompt: str = "hi", **kw: Any
) -> GenerateOptions:
    """A one-user-message request; ``kw`` sets any other `GenerateOptions` field."""
    kw.setdefault("messages", (user_message(prompt),))
    return GenerateOptions(provider=provider, model=model, **kw)


async def collect(stream: AbstractAsyncContextManager[llmrt.Call]) -> list[StreamChunk]:
    """Enter ``rt.stream(...)`` and read every chunk, the terminal finish included."""
    async with stream as call:
        return [chunk async for chunk in call]


def finish_reason(chunks: list[StreamChunk]) -> FinishReason:
    """The reason of the terminal finish, checking that it is last and unique."""
    finishes = [c for c in chunks if isinstance(c, Finish)]
    assert len(finishes) == 1, chunks
    assert chunks[-1] is finishes[0], chunks
    return finishes[0].reason
