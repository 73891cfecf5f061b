"""Helpers for the routing tests: local upstreams behind OpenAI-compatible routes, and calls.

`upstreams` opens one `llmrt.testing` upstream per route name (real loopback
sockets); `register_routes` registers an `OpenAIChatAdapter` per upstream;
`ask` runs one call and returns its chunks; `served_by` and `text_of` read
the answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager

import llmrt
from llmrt import Finish, GenerateOptions, StreamChunk, TextDelta
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import ErrorScript, Route, SSEScript, Upstream, open_upstream, openai_events

OK = SSEScript(events=openai_events(["Hello", " there"]))
RATE_LIMITED = ErrorScript(
    429, body={"error": {"message": "Rate limit reached", "type": "requests", "code": None}}
)


def rate_limited(retry_after: float) -> ErrorScript:
    """A 429 whose ``Retry-After`` asks for ``retry_after`` seconds."""
    return ErrorScript(
        429,
        headers={"retry-after": f"{retry_after:g}"},
        body={"error": {"message": "Rate limit reached", "type": "requests", "code": None}},
    )


def request(provider: str = "chat", prompt: str = "hi", **kw: object) -> GenerateOptions:
    return GenerateOptions(
        provider=provider, model="any", messages=(llmrt.user_message(prompt),), **kw
    )


@asynccontextmanager
async def upstreams(routes: Mapping[str, Route]) -> AsyncIterator[dict[str, Upstream]]:
    """One upstream per name, open for the block."""
    async with AsyncExitStack() as stack:
        opened = {}
        for name, route in routes.items():
            opened[name] = await stack.enter_async_context(open_upstream(route))
        yield opened


async def register_routes(rt: llmrt.LlmRuntime, ups: Mapping[str, Upstream]) -> None:
    for name, upstream in ups.items():
        adapter = OpenAIChatAdapter(
            base_url=upstream.base_url, api_key_env="K", environ={"K": "sk-routing-test"}
        )
        await rt.register_adapter([name], adapter)


async def ask(rt: llmrt.LlmRuntime, options: GenerateOptions | None = None) -> list[StreamChunk]:
    async with rt.stream(options or request()) as call:
        return [chunk async for chunk in call]


def finish_of(chunks: list[StreamChunk]) -> Finish:
    finishes = [chunk for chunk in chunks if isinstance(chunk, Finish)]
    assert len(finishes) == 1 and chunks[-1] is finishes[0], chunks
    return finishes[0]


def served_by(chunks: list[StreamChunk]) -> str | None:
    routing = finish_of(chunks).routing
    assert routing is not None
    return routing.route


def text_of(chunks: list[StreamChunk]) -> str:
    return "".join(chunk.text for chunk in chunks if isinstance(chunk, TextDelta))
