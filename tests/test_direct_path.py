"""The native exchange (`TrioTransport`) against a wrapped httpx transport, over loopback.

`stream_events` goes through one interface (`Exchanger.exchange`):
`TrioTransport` speaks it natively, skipping httpx's request/response
objects; any other httpx transport is wrapped (`HttpxExchange`) and gets
an ``httpx.Request``. A foreign transport that hands requests to a
`TrioTransport` through httpx's public transport API compares the two on
one upstream: the request the upstream receives, the chunks, and the errors
must be the same.
"""

from __future__ import annotations

import httpx
import pytest
import trio

import llmrt
from llmrt import Finish, FinishError, GenerateOptions, StreamChunk
from llmrt.adapters._exchange import MAX_ROUTES, Upstream
from llmrt.adapters._http import make_client
from llmrt.adapters._transport import TrioTransport
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.gemini import GeminiAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import ErrorScript, SSEScript, open_upstream, openai_events

pytestmark = pytest.mark.timeout(30)

KEY = "sk-direct-path-0123456789"


class ThroughClient(httpx.AsyncBaseTransport):
    """A foreign httpx transport (wrapped by `HttpxExchange`) over a `TrioTransport`."""

    def __init__(self) -> None:
        self.inner = TrioTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _adapter(kind: str, base_url: str, transport: httpx.AsyncBaseTransport) -> llmrt.Adapter:
    env = {"K": KEY}
    if kind == "openai":
        return OpenAIChatAdapter(
            base_url=base_url + "/v1", api_key_env="K", environ=env, transport=transport
        )
    if kind == "anthropic":
        return AnthropicAdapter(
            base_url=base_url, api_key_env="K", environ=env, transport=transport
        )
    return GeminiAdapter(base_url=base_url, api_key_env="K", environ=env, transport=transport)


async def _run(
    kind: str, script: object, transport: httpx.AsyncBaseTransport
) -> tuple[list[StreamChunk], object]:
    async with open_upstream(script) as upstream:  # type: ignore[arg-type]
        adapter = _adapter(kind, upstream.base_url, transport)
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter)
            options = GenerateOptions(
                provider="p", model="m-1", messages=(llmrt.user_message("hi"),)
            )
            async with rt.stream(options) as call:
                chunks = [chunk async for chunk in call]
        await adapter.aclose()
        (request,) = upstream.requests
        return chunks, request


def _comparable(request: object) -> tuple[object, ...]:
    # Each run has its own upstream port: the Host header is compared as present.
    raw = request.headers.items_raw  # type: ignore[attr-defined]
    headers = sorted((k, "127.0.0.1:PORT" if k == "host" else v) for k, v in raw)
    return (request.method, request.target, headers, request.body)  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
async def test_the_direct_path_sends_what_httpx_sends_and_yields_the_same_chunks(
    kind: str,
) -> None:
    if kind == "openai":
        script = SSEScript(events=openai_events(["Hel", "lo"]))
    else:
        script = ErrorScript(200, body={"not": "an event stream"})
    direct_chunks, direct_request = await _run(kind, script, TrioTransport())
    client_chunks, client_request = await _run(kind, script, ThroughClient())
    assert _comparable(direct_request) == _comparable(client_request)
    assert direct_chunks == client_chunks
    # The request carried the key and the attribution headers the client adds.
    headers = direct_request.headers  # type: ignore[attr-defined]
    assert "user-agent" in headers and "host" in headers and "content-length" in headers
    assert KEY in headers.get("authorization", "") + headers.get("x-api-key", "") + headers.get(
        "x-goog-api-key", ""
    )


@pytest.mark.parametrize(
    "script",
    [
        ErrorScript(429, body={"error": {"message": f"slow down {KEY}", "type": "rate"}}),
        ErrorScript(401, body={"error": {"message": "bad key", "type": "auth"}}),
        ErrorScript(200, body="<html>a proxy page</html>"),
    ],
)
async def test_error_answers_are_classified_alike_on_both_paths(script: ErrorScript) -> None:
    direct, _ = await _run("openai", script, TrioTransport())
    through, _ = await _run("openai", script, ThroughClient())
    assert direct == through
    finish = direct[-1]
    assert type(finish) is Finish and type(finish.reason) is FinishError
    assert KEY not in finish.reason.failure.message


def _upstream() -> Upstream:
    return make_client("http://127.0.0.1:9/v1", transport=TrioTransport())


async def test_a_header_with_a_line_break_is_refused_before_any_io() -> None:
    async with _upstream() as upstream:
        with pytest.raises(llmrt.LlmError) as caught:
            upstream.request(b"POST", "/", {"X-Evil": "a\r\nInjected: 1"}, 0)
        assert caught.value.code == "INVALID_REQUEST"
        fine = upstream.request(b"POST", "/", {"X-Fine": "a"}, 2)
        assert fine.head.endswith(b"Content-Length: 2\r\n\r\n")


async def test_the_route_cache_is_bounded_per_client() -> None:
    async with _upstream() as c:
        for i in range(MAX_ROUTES + 10):
            c.route(b"POST", f"/models/m{i}:stream", ("Authorization",))
        assert c.route_count <= MAX_ROUTES
        route = c.route(b"POST", "/chat/completions", ("Accept",))
        assert route.prefix.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:9")
        assert b"\r\nAccept:" not in route.prefix  # the request's own Accept replaces the client's
    await trio.lowlevel.checkpoint()
