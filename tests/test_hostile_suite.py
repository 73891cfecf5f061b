"""The fault suite: every hostile-upstream misbehaviour and every malformed frame, one deployment.

One local upstream, one runtime with the real HTTP adapters (OpenAI chat and
Anthropic) over `TrioTransport`, one websocket gateway and one Python gateway
client serve every case in turn, as a long-running host would. Each upstream
misbehaviour is met by both adapters, called directly and through the gateway;
each malformed-frame class is sent to the gateway on a raw websocket. After
every case the deployment must be as it was before: each call ended with
exactly one finish carrying the expected code (and no key in it), no call or
gateway request is live, no task is left behind, and the only sockets still
open are idle pooled upstream connections. At the end a fresh gateway client
is served, and closing the runtime closes every upstream connection.

Each test collects every mismatch before asserting, so one run names every
case that does not hold, not just the first.
"""

from __future__ import annotations

import collections
import gc
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import msgspec
import pytest
import trio
from _settle import wait_until
from trio_websocket import WebSocketConnection, open_websocket_url

import llmrt
from llmrt import Finish, FinishError, FinishStop, GenerateOptions, TextDelta
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway.client import GatewayClient, open_gateway_client
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import (
    MISBEHAVIOURS,
    SECRET_PHRASINGS,
    RecordedRequest,
    Script,
    SSEScript,
    Upstream,
    anthropic_events,
    hostile,
    open_upstream,
    openai_events,
)

# Keys shaped like no provider's, so only redaction of the exact values held can hide them.
KEYS = {"openai": "Zq7hostileOpenAIkey4f1d9c2e8b", "anthropic": "Zq7hostileAnthropicKey9a2b5c7d1e"}
PROVIDERS = ("openai", "anthropic")
TEXT = "Hello, world"
# The runtime's idle watchdog: an endless misbehaviour a client fails to bound ends
# TIMEOUT after this (a wrong code, reported) instead of hanging the suite.
IDLE_TIMEOUT = 3.0
# A bound on one case (all its calls), in real seconds; a hang is reported, not waited out.
CASE_BOUND = 30.0
# A bound on the deployment settling after a case.
SETTLE_BOUND = 5.0
# The request body early-413 answers before reading: larger than loopback socket buffers.
LARGE_PROMPT = "x" * (8 << 20)
# Frames above this get FRAME_TOO_LARGE; large enough for LARGE_PROMPT's call frame.
MAX_FRAME_BYTES = 12 << 20


@attrs.frozen
class Case:
    name: str
    options: dict[str, Any]
    #: The finish code every call must end with; None: a normal stop with the text.
    code: str | None
    text: str = TEXT
    prompt: str = "hi"

    @property
    def label(self) -> str:
        return self.name + "".join(f"[{k}={v}]" for k, v in self.options.items())


def _cases() -> list[Case]:
    cases = []
    for name, entry in MISBEHAVIOURS.items():
        if name == "echo-secrets":
            cases += [Case(name, {"phrasing": p}, entry.expected_code) for p in SECRET_PHRASINGS]
        elif name == "gzip-bomb":
            # 256 MiB inflated from about 256 KiB: hostile enough, quick to build.
            cases.append(Case(name, {"inflated_mib": 256}, entry.expected_code))
        elif name == "giant-deltas":
            text = "".join(chr(ord("a") + i % 26) * 300_000 for i in range(8))
            cases.append(Case(name, {}, entry.expected_code, text=text))
        elif name == "early-413":
            cases.append(Case(name, {}, entry.expected_code, prompt=LARGE_PROMPT))
        else:
            cases.append(Case(name, {}, entry.expected_code))
    return cases


CASES = _cases()


def _request(provider: str, prompt: str = "hi") -> GenerateOptions:
    return GenerateOptions(provider=provider, model="m", messages=(llmrt.user_message(prompt),))


def _normal(request: RecordedRequest) -> Script:
    if request.path.endswith("/messages"):
        return SSEScript(anthropic_events(["Hello", ", ", "world"]))
    return SSEScript(openai_events(["Hello", ", ", "world"]))


# ---- the deployment and what it holds -----------------------------------------------------------


@attrs.define
class Deployment:
    upstream: Upstream
    runtime: llmrt.LlmRuntime
    server: GatewayServer
    client: GatewayClient
    baseline_tasks: collections.Counter[str] = attrs.field(factory=collections.Counter)
    baseline_sockets: int = 0


@asynccontextmanager
async def deployment() -> AsyncIterator[Deployment]:
    async with open_upstream(_normal) as upstream:
        async with llmrt.open_runtime(stream_idle_timeout=IDLE_TIMEOUT) as rt:
            await rt.register_adapter(
                ["openai"],
                OpenAIChatAdapter(
                    base_url=upstream.base_url, api_key_env="K", environ={"K": KEYS["openai"]}
                ),
            )
            await rt.register_adapter(
                ["anthropic"],
                AnthropicAdapter(
                    base_url=upstream.base_url, api_key_env="K", environ={"K": KEYS["anthropic"]}
                ),
            )
            limits = Limits(max_frame_bytes=MAX_FRAME_BYTES, shutdown_grace=0.2)
            async with trio.open_nursery() as nursery:
                server = await nursery.start(partial(serve_gateway, rt, limits=limits))
                async with open_gateway_client(server.url) as client:
                    yield Deployment(upstream, rt, server, client)
                nursery.cancel_scope.cancel()
        # The runtime closed its adapters: no upstream connection may outlive them.
        with trio.fail_after(SETTLE_BOUND):
            await upstream.wait_all_closed()


def task_names() -> collections.Counter[str]:
    """The names of every task in this run except the local upstream's own."""
    names: collections.Counter[str] = collections.Counter()

    def walk(task: trio.lowlevel.Task) -> None:
        if "serve_upstream" in task.name:
            return  # the upstream's tasks come and go with its (pooled) connections
        if task.name == "llmrt.transport.read_deadlines":
            return  # one per run, not per call: it lives while some connection is watched
        names[task.name] += 1
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return names


def open_sockets(local_port: int | None = None) -> int:
    """Sockets open in this process; with `local_port`, only those bound to that port."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
        except OSError:
            continue  # closed while listing (the listing's own descriptor, for one)
        if local_port is None:
            count += 1
            continue
        sock = socket.socket(fileno=int(fd))
        try:
            name = sock.getsockname()
            count += isinstance(name, tuple) and name[1] == local_port
        except OSError:
            pass
        finally:
            sock.detach()  # a look only: the descriptor stays its owner's
    return count


def open_upstream_connections(upstream: Upstream) -> int:
    return sum(1 for c in upstream.connections if not c.closed.is_set())


async def settle(check: Callable[[], bool], bound: float = SETTLE_BOUND) -> bool:
    """Wait (in real time, bounded) until `check()` holds; return whether it did."""
    try:
        await wait_until(check, bound, settle=False)
    except trio.TooSlowError:
        return check()
    return True


async def leftovers(d: Deployment, *, sockets: bool = True) -> list[str]:
    """What a finished case left behind, as readable complaints (empty: nothing).

    With `sockets`, every socket of the process is accounted for.
    """
    problems = []
    if not await settle(lambda: d.runtime.statistics().calls_in_flight == 0):
        problems.append(f"{d.runtime.statistics().calls_in_flight} calls still in flight")
    if not await settle(lambda: d.server.live_requests == 0):
        problems.append(f"{d.server.live_requests} gateway requests still live")
    upstream = d.upstream

    def unfinished() -> list[int]:
        # A connection whose response never completed must not stay open:
        # only idle, pooled connections may.
        return [
            c.index
            for c in upstream.connections
            if not c.closed.is_set() and not (c.requests and c.completed)
        ]

    if not await settle(lambda: not unfinished()):
        problems.append(f"upstream connections {unfinished()} open mid-response")
    if not await settle(lambda: task_names() == d.baseline_tasks):
        extra = task_names() - d.baseline_tasks
        missing = d.baseline_tasks - task_names()
        problems.append(f"tasks differ: extra {dict(extra)}, missing {dict(missing)}")

    def sockets_ok() -> bool:
        # Each idle pooled connection is two sockets of this process: the
        # adapter's and the upstream's. Anything beyond those leaked.
        return open_sockets() == d.baseline_sockets + 2 * open_upstream_connections(upstream)

    if sockets and not await settle(sockets_ok):
        problems.append(
            f"{open_sockets()} sockets open, expected {d.baseline_sockets} + 2 x "
            f"{open_upstream_connections(upstream)} pooled"
        )
    return problems


async def take_baseline(d: Deployment) -> None:
    await trio.testing.wait_all_tasks_blocked()
    # Sockets that earlier tests in this process left unreachable would be closed
    # by the collector at some later moment, mid-suite, and the count would drop
    # under the baseline: finalize them now.
    gc.collect()
    d.baseline_tasks = task_names()
    d.baseline_sockets = open_sockets() - 2 * open_upstream_connections(d.upstream)


# ---- one call, direct or through the gateway ----------------------------------------------------


async def call_direct(d: Deployment, options: GenerateOptions) -> list[Any]:
    async with d.runtime.stream(options) as call:
        return [chunk async for chunk in call]


async def call_remote(d: Deployment, options: GenerateOptions) -> list[Any]:
    async with d.client.stream(options) as call:
        return [chunk async for chunk in call]


Caller = Callable[[Deployment, GenerateOptions], Awaitable[list[Any]]]
PATHS: dict[str, Caller] = {"direct": call_direct, "gateway": call_remote}


def judge(case: Case, provider: str, chunks: list[Any]) -> list[str]:
    """What is wrong with the chunks of one call of `case` (empty: nothing)."""
    finishes = [c for c in chunks if isinstance(c, Finish)]
    if len(finishes) != 1 or chunks[-1] is not finishes[0]:
        return [
            f"{len(finishes)} finishes, last chunk {type(chunks[-1]).__name__ if chunks else None}"
        ]
    reason = finishes[0].reason
    problems = []
    if case.code is None:
        if not isinstance(reason, FinishStop):
            problems.append(f"expected a stop, got {reason!r}"[:300])
        text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
        if text != case.text:
            problems.append(f"text of {len(text)} chars differs from the {len(case.text)} sent")
    elif not isinstance(reason, FinishError) or reason.failure.code != case.code:
        problems.append(f"expected {case.code}, got {reason!r}"[:300])
    key = KEYS[provider]
    if any(key in repr(c) for c in chunks) or key.encode() in llmrt.encode(finishes[0]):
        problems.append("the provider key reached the caller")
    return problems


async def run_case(d: Deployment, case: Case, provider: str, caller: Caller) -> list[str]:
    d.upstream.set_route(hostile(case.name, **case.options))
    options = _request(provider, case.prompt)
    problems = []
    with trio.move_on_after(CASE_BOUND) as scope:
        chunks = await caller(d, options)
        problems += judge(case, provider, chunks)
        if case.name == "stale-keep-alive":
            # The upstream closes the kept-alive connection as the next request
            # arrives on it: that call must be sent again, on a fresh connection.
            problems += [
                f"second call: {p}" for p in judge(case, provider, await caller(d, options))
            ]
    if scope.cancelled_caught:
        problems.append(f"no finish within {CASE_BOUND} s")
    return problems


# ---- the tests ----------------------------------------------------------------------------------


# 72 calls, some of them 8 MiB requests or 256 MiB bombs: more than the default bound on a
# loaded machine, and far more when a client does not bound an endless misbehaviour.
@pytest.mark.timeout(300)
async def test_every_misbehaviour_through_both_adapters_directly_and_via_the_gateway(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    failures: dict[str, list[str]] = {}
    async with deployment() as d:
        await take_baseline(d)
        for case in CASES:
            for provider in PROVIDERS:
                for path, caller in PATHS.items():
                    label = f"{case.label} {provider} {path}"
                    problems = await run_case(d, case, provider, caller)
                    problems += await leftovers(d)
                    if problems:
                        failures[label] = problems
        # After all of that, a fresh client is served as on day one.
        d.upstream.set_route(_normal)
        async with open_gateway_client(d.server.url) as fresh:
            providers = {p.id for p in await fresh.list_providers()}
            for provider in PROVIDERS:
                async with fresh.stream(_request(provider)) as call:
                    chunks = [chunk async for chunk in call]
                if problems := judge(Case("fresh", {}, None), provider, chunks):
                    failures[f"fresh client {provider}"] = problems
        if providers != set(PROVIDERS):
            failures["fresh client"] = [f"listed providers {providers}"]
    # Keys never reach a log line or a logged traceback, at any level.
    for provider, key in KEYS.items():
        if key in caplog.text:
            failures[f"logs ({provider})"] = ["the provider key was logged"]
    assert not failures, "\n".join(f"{k}: {'; '.join(v)}" for k, v in failures.items())


# Malformed frames: (label, subprotocol, message, expected error code).
_DEEP = 5000
_DEEP_JSON = '{"type":"call","id":"deep","request":' + "[" * _DEEP + "]" * _DEEP + "}"
_DEEP_MSGPACK = b"\x83\xa4type\xa4call\xa2id\xa4deep\xa7request" + b"\x91" * _DEEP + b"\xc0"
FRAMES: list[tuple[str, str, str | bytes, str]] = [
    ("bad JSON", "llmrt.v1", '{"type": "call", "id": ', "BAD_FRAME"),
    ("wrong types", "llmrt.v1", '{"type": "call", "id": 5, "request": "x"}', "BAD_FRAME"),
    ("not an object", "llmrt.v1", "[1, 2, 3]", "BAD_FRAME"),
    ("unknown frame type", "llmrt.v1", '{"type": "explode", "id": "u"}', "BAD_FRAME"),
    (
        "too large",
        "llmrt.v1",
        '{"type": "ping", "id": "big", "pad": "' + "x" * (MAX_FRAME_BYTES + 1) + '"}',
        "FRAME_TOO_LARGE",
    ),
    ("too deep JSON", "llmrt.v1", _DEEP_JSON, "BAD_FRAME"),
    ("too deep MessagePack", "llmrt.v1.msgpack", _DEEP_MSGPACK, "BAD_FRAME"),
    ("binary garbage on JSON", "llmrt.v1", bytes(range(256)) * 4, "BAD_FRAME"),
    ("binary garbage on MessagePack", "llmrt.v1.msgpack", b"\xc1" + bytes(range(256)), "BAD_FRAME"),
]


def _decode(subprotocol: str, message: str | bytes) -> Any:
    if subprotocol.endswith("msgpack"):
        return msgspec.msgpack.decode(message if isinstance(message, bytes) else message.encode())
    return msgspec.json.decode(message)


def _encode(subprotocol: str, frame: dict[str, Any]) -> str | bytes:
    if subprotocol.endswith("msgpack"):
        return msgspec.msgpack.encode(frame)
    return msgspec.json.encode(frame).decode()


async def send_malformed(
    ws: WebSocketConnection, subprotocol: str, message: str | bytes, code: str
) -> list[str]:
    problems = []
    await ws.send_message(message)
    reply = _decode(subprotocol, await ws.get_message())
    if reply.get("type") != "error" or reply.get("code") != code:
        problems.append(f"expected an error frame {code}, got {str(reply)[:200]}")
    # The connection lives on: it still answers a ping.
    await ws.send_message(_encode(subprotocol, {"type": "ping", "id": "alive"}))
    pong = _decode(subprotocol, await ws.get_message())
    if pong.get("type") != "pong" or pong.get("id") != "alive":
        problems.append(f"no pong after the bad frame: {str(pong)[:200]}")
    return problems


async def test_every_malformed_frame_class_against_the_gateway(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures: dict[str, list[str]] = {}
    async with deployment() as d:
        await take_baseline(d)
        # The gateway's own sockets: its listener and its one client's connection.
        # (A raw client whose connection the gateway drops may keep its end open
        # a while: that is the test's socket, not the gateway's.)
        gateway_sockets = open_sockets(d.server.port)
        for label, subprotocol, message, code in FRAMES:
            problems: list[str] = []
            with trio.move_on_after(CASE_BOUND) as scope:
                try:
                    async with open_websocket_url(
                        d.server.url,
                        subprotocols=[subprotocol],
                        max_message_size=4 * MAX_FRAME_BYTES,
                    ) as ws:
                        await ws.get_message()  # hello
                        problems += await send_malformed(ws, subprotocol, message, code)
                except Exception as exc:  # a closed socket is a finding, not a crash of the suite
                    problems.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            if scope.cancelled_caught:
                problems.append(f"no answer within {CASE_BOUND} s")
            if not await settle(lambda: d.server.connection_count == 1):
                problems.append(f"{d.server.connection_count - 1} extra gateway connections open")
            if not await settle(lambda: open_sockets(d.server.port) == gateway_sockets):
                extra = open_sockets(d.server.port) - gateway_sockets
                problems.append(f"{extra} extra gateway sockets open")
            problems += await leftovers(d, sockets=False)
            # A bad frame is the client's fault, not the gateway's: no traceback at ERROR.
            if any(r.levelno >= logging.ERROR and r.exc_info for r in caplog.records):
                problems.append("a traceback was logged at ERROR")
            caplog.clear()
            if problems:
                failures[label] = problems
        # The gateway still serves the client it had all along, and a fresh one.
        for client_label, client in [("old", d.client)]:
            async with client.stream(_request("openai")) as call:
                chunks = [chunk async for chunk in call]
            if problems := judge(Case("after frames", {}, None), "openai", chunks):
                failures[f"{client_label} client after the frames"] = problems
        async with open_gateway_client(d.server.url, msgpack=True) as fresh:
            async with fresh.stream(_request("anthropic")) as call:
                chunks = [chunk async for chunk in call]
            if problems := judge(Case("after frames", {}, None), "anthropic", chunks):
                failures["fresh client after the frames"] = problems
    assert not failures, "\n".join(f"{k}: {'; '.join(v)}" for k, v in failures.items())
