"""Shared fixtures and helpers for the actor-core tests.

Fixtures: ``runtime`` (an `LlmRuntime` from a fresh `llmrt.open_runtime()`),
``redis_server`` (a real redis-server for the session, see ``_redis.py``).
Helpers (plain functions, ``from conftest import ...``): `make_options`,
`collect`, `finish_reason`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from _redis import RedisServer

import llmrt
from llmrt import Finish, FinishReason, GenerateOptions, StreamChunk, user_message


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
