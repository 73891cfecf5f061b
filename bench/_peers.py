"""The contenders of ``bench_http.py``: one streaming chat-completions client each.

Every peer streams the same OpenAI-style request from the same local upstream
and counts the text deltas it receives. A peer is a `Peer`: how to open one
client session (one connection pool, as a user would hold one), and how to
run one stream on it. With ``leave_after=k`` the consumer stops after ``k``
text chunks the way users of that library do, and notes ``time.monotonic()``
at that moment (the abandonment figure compares it with the upstream's close).

* ``llmrt`` — `OpenAIChatAdapter` in `llmrt.open_runtime`, ``async with
  rt.stream(...) as call: async for chunk in call`` (trio);
* ``httpx`` — bare ``httpx.AsyncClient.stream`` under trio, ``aiter_bytes``,
  a hand-written SSE split and one msgspec decode per ``data:`` event;
* ``httpx-lines`` — the same with ``aiter_lines`` (the textbook loop);
* ``httpx-drain`` — ``httpx`` that reads the body to its end after ``[DONE]``
  (as llmrt does), so the connection goes back to httpx's pool for reuse
  instead of being closed: the control for httpcore's pool costs;
* ``openai`` — the official SDK, ``AsyncOpenAI(...).chat.completions.create(
  stream=True)`` under asyncio, abandoned by ``break`` (no ``async with``);
* ``litellm`` — ``litellm.acompletion(stream=True, custom_llm_provider="openai")``
  under asyncio, abandoned by ``break``;
* ``floor`` — the raw-trio floor of ``_floor.py``: one trio socket per stream,
  chunked coding and SSE parsed by hand.

The optional peers (openai, litellm) are imported only when used; `missing`
says whether one is installed.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import _floor
import attrs
import msgspec

MODEL = "gpt-4.1-mini"
API_KEY = "sk-bench-0123456789"
#: A stream's user message carries its marker, so the upstream's records
#: can tell which connection served which consumer.
MARKER_PREFIX = "bench-stream-"

#: One stream: (session, marker, leave_after) -> (text chunks seen, monotonic time left or None).
StreamFn = Callable[[Any, str, "int | None"], Awaitable[tuple[int, float | None]]]
OpenFn = Callable[[str], AbstractAsyncContextManager[Any]]

#: Text chunks received by all streams of this process so far, so that a run
#: stopped at its deadline can still say how far it got.
RECEIVED = [0]


@attrs.frozen
class Peer:
    name: str
    #: ``trio`` or ``asyncio``: which event loop the peer runs under.
    flavor: str
    #: Modules that must be importable (None: always available).
    requires: tuple[str, ...]
    #: ``open(base_url)`` -> async context manager yielding a session.
    open: OpenFn
    stream: StreamFn

    def missing(self) -> str | None:
        """A note naming the uninstalled module, or None when the peer can run."""
        for module in self.requires:
            if importlib.util.find_spec(module) is None:
                return f"{self.name}: skipped, `{module}` is not installed (pip install {module})"
        return None


def request_body(marker: str) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": marker}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


# ---- llmrt ------------------------------------------------------------------------------------


@asynccontextmanager
async def _llmrt_open(base_url: str) -> AsyncIterator[Any]:
    import llmrt
    from llmrt.adapters.openai_chat import OpenAIChatAdapter

    # The adapter's default pool limits and timeouts, as a user gets them.
    adapter = OpenAIChatAdapter(
        preset="openai-compatible",
        base_url=base_url + "/v1",
        api_key_env="BENCH_KEY",
        environ={"BENCH_KEY": API_KEY},
    )
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["bench"], adapter)
        yield rt


async def _llmrt_stream(rt: Any, marker: str, leave_after: int | None) -> tuple[int, float | None]:
    from llmrt import GenerateOptions, TextDelta, user_message

    options = GenerateOptions(provider="bench", model=MODEL, messages=(user_message(marker),))
    count = 0
    left: float | None = None
    async with rt.stream(options) as call:
        async for chunk in call:
            if type(chunk) is TextDelta:
                count += 1
                RECEIVED[0] += 1
                if count == leave_after:
                    left = time.monotonic()
                    break
    return count, left


# ---- bare httpx under trio --------------------------------------------------------------------


#: The floor's decoder of one ``data:`` payload: the same msgspec decode for both.
_decode_event = _floor.decode_event


@asynccontextmanager
async def _httpx_open(base_url: str) -> AsyncIterator[Any]:
    import httpx

    # The same pool limits and timeouts as llmrt's adapter defaults.
    limits = httpx.Limits(
        max_connections=10_000, max_keepalive_connections=1_000, keepalive_expiry=30.0
    )
    timeout = httpx.Timeout(connect=10.0, read=600.0, write=30.0, pool=60.0)
    async with httpx.AsyncClient(base_url=base_url + "/v1", limits=limits, timeout=timeout) as c:
        yield c


def _httpx_request(marker: str) -> tuple[bytes, dict[str, str]]:
    headers = {
        "Authorization": f"Bearer {API_KEY}",
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
    }
    return msgspec.json.encode(request_body(marker)), headers


async def _httpx_stream(
    client: Any, marker: str, leave_after: int | None
) -> tuple[int, float | None]:
    body, headers = _httpx_request(marker)
    count = 0
    tail = b""
    async with client.stream("POST", "/chat/completions", content=body, headers=headers) as r:
        async for raw in r.aiter_bytes():
            events = (tail + raw).split(b"\n\n")
            tail = events.pop()
            for event in events:
                if not event.startswith(b"data: "):
                    continue
                data = event[6:]
                if data == b"[DONE]":
                    return count, None
                for choice in _decode_event(data).choices:
                    if choice.delta.content:
                        count += 1
                        RECEIVED[0] += 1
                        if count == leave_after:
                            return count, time.monotonic()
    return count, None


async def _httpx_drain_stream(
    client: Any, marker: str, leave_after: int | None
) -> tuple[int, float | None]:
    # Like _httpx_stream, but reads the body to its end after [DONE], as
    # llmrt's adapter does, so that httpx returns the connection to its pool
    # for reuse instead of closing it.
    body, headers = _httpx_request(marker)
    count = 0
    tail = b""
    done = False
    async with client.stream("POST", "/chat/completions", content=body, headers=headers) as r:
        async for raw in r.aiter_bytes():
            if done:
                continue
            events = (tail + raw).split(b"\n\n")
            tail = events.pop()
            for event in events:
                if not event.startswith(b"data: "):
                    continue
                data = event[6:]
                if data == b"[DONE]":
                    done = True
                    break
                for choice in _decode_event(data).choices:
                    if choice.delta.content:
                        count += 1
                        RECEIVED[0] += 1
    return count, None


async def _httpx_lines_stream(
    client: Any, marker: str, leave_after: int | None
) -> tuple[int, float | None]:
    body, headers = _httpx_request(marker)
    count = 0
    async with client.stream("POST", "/chat/completions", content=body, headers=headers) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            for choice in _decode_event(data).choices:
                if choice.delta.content:
                    count += 1
                    RECEIVED[0] += 1
                    if count == leave_after:
                        return count, time.monotonic()
    return count, None


# ---- the openai SDK (asyncio) -------------------------------------------------------------------


@asynccontextmanager
async def _openai_open(base_url: str) -> AsyncIterator[Any]:
    from openai import AsyncOpenAI

    # max_retries=0: one attempt per call, like the others. The SDK's own
    # connection limits (1,000) are kept: that is what its users get.
    client = AsyncOpenAI(base_url=base_url + "/v1", api_key=API_KEY, max_retries=0)
    try:
        yield client
    finally:
        await client.close()


async def _openai_stream(
    client: Any, marker: str, leave_after: int | None
) -> tuple[int, float | None]:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": marker}],
        stream=True,
        stream_options={"include_usage": True},
    )
    count = 0
    async for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                count += 1
                RECEIVED[0] += 1
        if count == leave_after:
            return count, time.monotonic()  # `break`, as users write it: nothing closes
    return count, None


# ---- LiteLLM (asyncio) ----------------------------------------------------------------------


@asynccontextmanager
async def _litellm_open(base_url: str) -> AsyncIterator[Any]:
    # No network at import: use the bundled model-cost map, no telemetry.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_TELEMETRY", "False")
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    yield (litellm, base_url + "/v1")


async def _litellm_stream(
    session: Any, marker: str, leave_after: int | None
) -> tuple[int, float | None]:
    litellm, api_base = session
    response = await litellm.acompletion(
        model=MODEL,
        messages=[{"role": "user", "content": marker}],
        stream=True,
        api_base=api_base,
        api_key=API_KEY,
        custom_llm_provider="openai",
        max_retries=0,
    )
    count = 0
    async for chunk in response:
        for choice in chunk.choices:
            if choice.delta.content:
                count += 1
                RECEIVED[0] += 1
        if count == leave_after:
            return count, time.monotonic()
    return count, None


PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer("llmrt", "trio", (), _llmrt_open, _llmrt_stream),
        Peer("httpx", "trio", ("httpx",), _httpx_open, _httpx_stream),
        Peer("httpx-lines", "trio", ("httpx",), _httpx_open, _httpx_lines_stream),
        Peer("httpx-drain", "trio", ("httpx",), _httpx_open, _httpx_drain_stream),
        Peer("openai", "asyncio", ("openai",), _openai_open, _openai_stream),
        Peer("litellm", "asyncio", ("litellm",), _litellm_open, _litellm_stream),
        Peer(
            "floor",
            "trio",
            (),
            lambda base_url: _floor.open_session(base_url, API_KEY),
            _floor.stream_fn(RECEIVED, request_body, API_KEY),
        ),
    )
}


# ---- llmrt with an explicit transport (TrioTransport vs httpcore) ------------------------------
# Two more contenders, kept apart from the table above: ``llmrt-trio-transport`` runs the
# adapter on `llmrt.adapters._transport.TrioTransport` (HTTP/1.1 over trio sockets, O(1)
# pool); ``llmrt-httpcore`` pins httpx's default transport (httpcore), whatever the
# adapter's default becomes. Both use the adapter's default limits and timeouts.


def _llmrt_with_transport(kind: str) -> OpenFn:
    @asynccontextmanager
    async def open_(base_url: str) -> AsyncIterator[Any]:
        import httpx

        import llmrt
        from llmrt.adapters._http import DEFAULT_LIMITS
        from llmrt.adapters._transport import TrioTransport
        from llmrt.adapters.openai_chat import OpenAIChatAdapter

        transport: httpx.AsyncBaseTransport = (
            TrioTransport(limits=DEFAULT_LIMITS)
            if kind == "trio"
            else httpx.AsyncHTTPTransport(limits=DEFAULT_LIMITS)
        )
        adapter = OpenAIChatAdapter(
            preset="openai-compatible",
            base_url=base_url + "/v1",
            api_key_env="BENCH_KEY",
            environ={"BENCH_KEY": API_KEY},
            transport=transport,
        )
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["bench"], adapter)
            yield rt

    return open_


PEERS["llmrt-trio-transport"] = Peer(
    "llmrt-trio-transport", "trio", (), _llmrt_with_transport("trio"), _llmrt_stream
)
PEERS["llmrt-httpcore"] = Peer(
    "llmrt-httpcore", "trio", ("httpx",), _llmrt_with_transport("httpcore"), _llmrt_stream
)


# ---- llmrt as `llmrt serve` runs it --------------------------------------------------------
# ``llmrt-served``: the ``llmrt`` contender with the collector set up the way a serving
# process sets it up once start-up is done (`llmrt.actors.app._collector`), so the scale
# section shows what that buys beside Python's defaults.


@asynccontextmanager
async def _llmrt_served_open(base_url: str) -> AsyncIterator[Any]:
    from llmrt.actors.app._collector import tune_for_serving

    async with _llmrt_open(base_url) as rt:
        tune_for_serving()
        yield rt


PEERS["llmrt-served"] = Peer("llmrt-served", "trio", (), _llmrt_served_open, _llmrt_stream)
