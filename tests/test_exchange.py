"""The one transport interface (`Exchanger.exchange`): native, wrapped, and what they share.

`TrioTransport` speaks it natively; any other httpx transport is wrapped
once (`HttpxExchange`). Over real loopback sockets: the same bytes and
chunks natively and wrapped (a foreign transport, httpx's own httpcore
transport, ``httpx.MockTransport``), the same `LlmError` for the same
failure, and a cancelled consumer closes the upstream connection on both.
And: the adapters reach no private attribute of httpx (read with `ast`).
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

import llmrt
from llmrt import ErrorCode, Finish, FinishStop, GenerateOptions, StreamChunk
from llmrt.adapter import RuntimeServices
from llmrt.adapters._exchange import Exchanger, HttpxExchange, Upstream
from llmrt.adapters._http import make_client
from llmrt.adapters._transport import TrioTransport
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import ErrorScript, SSEScript, open_upstream, openai_events

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-exchange-0123456789"
WORDS = ["Hel", "lo", ", ", "wor", "ld"]


class Foreign(httpx.AsyncBaseTransport):
    """A user's httpx transport: hands each request to a `TrioTransport` (httpx's public API)."""

    def __init__(self) -> None:
        self.inner = TrioTransport()
        self.requests = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


#: The transports compared: name -> a fresh httpx transport (or None: the default).
TRANSPORTS: dict[str, Callable[[], httpx.AsyncBaseTransport | None]] = {
    "native": lambda: None,
    "foreign": Foreign,
    "httpcore": lambda: httpx.AsyncHTTPTransport(),
}


def _adapter(base_url: str, transport: httpx.AsyncBaseTransport | None) -> OpenAIChatAdapter:
    return OpenAIChatAdapter(
        base_url=base_url,
        api_key_env="K",
        environ={"K": KEY},
        http2=False,
        transport=transport,
    )


def _options() -> GenerateOptions:
    return GenerateOptions(provider="p", model="m", messages=(llmrt.user_message("hi"),))


async def _chunks(adapter: llmrt.Adapter) -> list[StreamChunk]:
    """The adapter's chunks, iterated directly (no runtime), or the `LlmError` it raised."""
    out: list[StreamChunk] = []
    with trio.fail_after(10):
        async for chunk in adapter.stream(_options()):
            out.append(chunk)
    await adapter.aclose()
    return out


async def _raw_body(client: Upstream) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    request = client.request(b"POST", "/chat/completions", {"Accept": "text/event-stream"}, 2)
    async with client.transport.exchange(request, b"{}") as response:
        body = bytearray()
        while data := await response.receive():
            body += data
        assert response.done
        return response.status, list(response.headers), bytes(body)


def test_the_wrapping_happens_once_and_only_for_foreign_transports() -> None:
    native = make_client("http://127.0.0.1:9", http2=False)
    assert type(native.transport) is TrioTransport
    given = TrioTransport()
    assert make_client("http://127.0.0.1:9", transport=given).transport is given
    foreign = Foreign()
    wrapped = make_client("http://127.0.0.1:9", transport=foreign).transport
    assert isinstance(wrapped, HttpxExchange) and wrapped.transport is foreign
    # An exchanger given (a recorder, say) is used as it is, not wrapped again.
    assert make_client("http://127.0.0.1:9", transport=wrapped).transport is wrapped  # type: ignore[arg-type]
    _check: Exchanger = wrapped  # both satisfy the one interface
    _check = native.transport


async def test_native_and_wrapped_exchanges_read_the_same_bytes() -> None:
    script = SSEScript(events=openai_events(WORDS), delay=0.001)
    seen = []
    async with open_upstream(script) as upstream:
        for make in TRANSPORTS.values():
            async with make_client(upstream.base_url, http2=False, transport=make()) as client:
                seen.append(await _raw_body(client))
        requests = [(r.method, r.target, r.body) for r in upstream.requests]
    assert len({repr(s) for s in seen}) == 1, "the same status, headers and body bytes"
    status, _, body = seen[0]
    assert status == 200 and body.count(b"data:") == len(openai_events(WORDS))
    assert requests == [("POST", "/chat/completions", b"{}")] * len(TRANSPORTS)


@pytest.mark.parametrize("name", sorted(TRANSPORTS))
async def test_every_transport_streams_the_same_chunks(name: str) -> None:
    script = SSEScript(events=openai_events(WORDS))
    async with open_upstream(script) as upstream:
        native = await _chunks(_adapter(upstream.base_url, None))
        other = await _chunks(_adapter(upstream.base_url, TRANSPORTS[name]()))
    assert other == native
    assert "".join(getattr(c, "text", "") for c in native) == "".join(WORDS)
    assert isinstance(native[-1], Finish) and isinstance(native[-1].reason, FinishStop)


async def test_a_mock_transport_streams_what_the_wire_did() -> None:
    script = SSEScript(events=openai_events(WORDS))
    async with open_upstream(script) as upstream:
        async with make_client(upstream.base_url, http2=False) as client:
            _, headers, body = await _raw_body(client)
        wire = await _chunks(_adapter(upstream.base_url, None))
    kept = [(k, v) for k, v in headers if k.lower() != b"transfer-encoding"]

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {KEY}"
        return httpx.Response(200, headers=kept, content=body)

    mocked = await _chunks(_adapter("http://mock.invalid", httpx.MockTransport(answer)))
    assert mocked == wire


def _failure(run: list[StreamChunk] | llmrt.LlmError) -> tuple[str, str]:
    if isinstance(run, llmrt.LlmError):
        return run.code, "raised"
    last = run[-1]
    assert isinstance(last, Finish)
    failure = getattr(last.reason, "failure", None)
    assert failure is not None, last
    return failure.code, "finish"


async def _outcome(base_url: str, make: Callable[[], httpx.AsyncBaseTransport | None]) -> object:
    try:
        return _failure(await _chunks(_adapter(base_url, make())))
    except llmrt.LlmError as exc:
        return _failure(exc)


@pytest.mark.parametrize(
    ("script", "code"),
    [
        (
            ErrorScript(429, body={"error": {"message": "slow down", "type": "rate"}}),
            ErrorCode.RATE_LIMIT,
        ),
        (ErrorScript(401, body={"error": {"message": "bad key", "type": "auth"}}), None),
        (ErrorScript(200, body="<html>a proxy page</html>"), ErrorCode.PROTOCOL),
        (SSEScript(events=openai_events(WORDS), disconnect_after=2), ErrorCode.NETWORK),
    ],
)
async def test_failures_map_to_the_same_error_on_every_transport(
    script: object, code: str | None
) -> None:
    async with open_upstream(script) as upstream:  # type: ignore[arg-type]
        outcomes = [await _outcome(upstream.base_url, make) for make in TRANSPORTS.values()]
    assert len({repr(o) for o in outcomes}) == 1, outcomes
    if code is not None:
        assert outcomes[0][0] == code  # type: ignore[index]


async def test_a_refused_connection_is_a_network_error_on_every_transport() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    outcomes = [await _outcome(f"http://127.0.0.1:{port}", m) for m in TRANSPORTS.values()]
    assert outcomes == [(ErrorCode.NETWORK, "raised")] * len(TRANSPORTS)


@pytest.mark.parametrize("name", sorted(TRANSPORTS))
async def test_a_cancelled_consumer_closes_the_upstream_connection(name: str) -> None:
    script = SSEScript(events=openai_events(["a"] * 200), delay=0.05)
    async with open_upstream(script) as upstream:
        adapter = _adapter(upstream.base_url, TRANSPORTS[name]())
        with trio.fail_after(10):
            with trio.CancelScope() as scope:
                async for _ in adapter.stream(_options()):
                    scope.cancel()  # the consumer leaves after the first chunk
            record = await upstream.wait_connection_closed(0)
        assert record.closed_by == "client"
        await adapter.aclose()


async def test_a_registration_lends_the_transport_its_deadline_heap() -> None:
    transport = TrioTransport()
    script = SSEScript(events=openai_events(["a", "b"]), delay=0.01)
    async with open_upstream(script) as upstream:
        adapter = OpenAIChatAdapter(
            base_url=upstream.base_url, api_key_env="K", environ={"K": KEY}, transport=transport
        )
        assert transport._deadlines is None  # used alone: a cancel scope per waiting read
        async with llmrt.open_runtime() as rt:
            handle = await rt.register_adapter(["p"], adapter)
            heap = transport._deadlines
            # The runtime's one heap: its idle watchdog's.
            assert heap is rt._core.watchdog and heap.running
            async with rt.stream(_options()) as call:
                assert [c async for c in call][-1] == Finish(reason=FinishStop())
            await handle.dispose()
            # Taken back from the adapter; the heap stays the runtime's.
            assert transport._deadlines is None and heap.running
        assert not heap.running


async def test_the_deadline_heap_fires_moves_and_forgets(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0
    fired: list[tuple[str, float]] = []
    due = {"a": 1.0, "b": 2.0, "c": 3.0}

    def check(item: object, now: float) -> float | None:
        name = str(item)
        if due[name] > now:
            return due[name]  # moved meanwhile: back on the heap
        fired.append((name, now))
        return None

    async with trio.open_nursery() as nursery:
        services = await RuntimeServices.start(nursery)
        heap = services.deadlines
        entries = {name: heap.push(name, 1.0, check) for name in due}
        heap.forget(entries["c"])
        await trio.sleep(5)
        assert fired == [("a", 1.0), ("b", 2.0)]
        assert entries["c"][2] is None and len(heap) == 0
        nursery.cancel_scope.cancel()
    assert not heap.running


# ---- no private attribute of httpx ----------------------------------------------------------


def _httpx_private_names() -> set[str]:
    """Private attribute names of httpx's public classes, instances included."""
    names: set[str] = set()
    for _, cls in inspect.getmembers(httpx, inspect.isclass):
        for klass in cls.__mro__:
            if klass.__module__.startswith("httpx"):
                names.update(vars(klass))
    for instance in (
        httpx.AsyncClient(),
        httpx.Request("GET", "http://x"),
        httpx.Response(200),
        httpx.URL("http://x"),
        httpx.Headers(),
        httpx.AsyncHTTPTransport(),
        httpx.Timeout(1.0),
    ):
        names.update(getattr(instance, "__dict__", {}))
        names.update(getattr(type(instance), "__slots__", ()))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_no_private_attribute_of_httpx_is_touched() -> None:
    private = _httpx_private_names()
    assert {"_transport", "_merge_url"} <= private  # what the check looks for
    found = []
    for folder in ("runtime", "actors", "adapters"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            where = f"{path.relative_to(ROOT)}"
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module:
                    if node.module.split(".")[0] == "httpx" and "._" in "." + node.module:
                        found.append(f"{where}:{node.lineno}: from {node.module} import")
                    if node.module == "httpx" and any(a.name.startswith("_") for a in node.names):
                        found.append(f"{where}:{node.lineno}: a private name from httpx")
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.startswith("httpx._"):
                            found.append(f"{where}:{node.lineno}: import {alias.name}")
                elif isinstance(node, ast.Attribute) and node.attr in private:
                    # An object's own state (``self._transport``) is its own; any other
                    # ``x._name`` that httpx also defines is suspect.
                    owner = node.value
                    if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                        found.append(f"{where}:{node.lineno}: .{node.attr}")
    assert found == [], found


def test_the_adapters_start_no_system_task_and_keep_no_run_global() -> None:
    found = []
    for path in sorted((ROOT / "adapters").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
            if name in ("spawn_system_task", "RunVar", "WeakKeyDictionary"):
                found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}: {name}")
    assert found == [], found
