"""The adapters' direct path on `TrioTransport` against httpx's own path, over loopback.

`stream_events` skips httpx's request/response objects on the default
transport. A subclass of `TrioTransport` goes through ``client.send`` like
any other transport, so the two paths can be compared on one upstream: the
request the upstream receives, the chunks, and the errors must be the same.
"""

from __future__ import annotations

import httpx
import pytest
import trio

import llmrt
from llmrt import Finish, FinishError, GenerateOptions, StreamChunk
from llmrt.adapters import _http
from llmrt.adapters._transport import TrioTransport
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.gemini import GeminiAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import ErrorScript, SSEScript, open_upstream, openai_events

pytestmark = pytest.mark.timeout(30)

KEY = "sk-direct-path-0123456789"


class ThroughClient(TrioTransport):
    """The same transport, but not exactly `TrioTransport`: httpx's ``client.send`` path."""


def _adapter(kind: str, base_url: str, transport: TrioTransport) -> llmrt.Adapter:
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
    kind: str, script: object, transport: TrioTransport
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


async def test_a_header_with_a_line_break_is_refused_before_any_io() -> None:
    route = _http._Route((b"http", "127.0.0.1", 1), b"POST / HTTP/1.1\r\nHost: x", {})
    with pytest.raises(llmrt.LlmError) as caught:
        _http._direct_head(route, {"X-Evil": "a\r\nInjected: 1"}, 0)
    assert caught.value.code == "INVALID_REQUEST"
    assert _http._direct_head(route, {"X-Fine": "a"}, 2).endswith(b"Content-Length: 2\r\n\r\n")


async def test_the_route_cache_is_bounded_per_client() -> None:
    async with httpx.AsyncClient(base_url="http://127.0.0.1:9/v1", transport=TrioTransport()) as c:
        for i in range(_http._MAX_ROUTES + 10):
            _http._route(c, f"/models/m{i}:stream", ("Authorization",))
        assert len(_http._ROUTES[c]) <= _http._MAX_ROUTES
        route = _http._route(c, "/chat/completions", ("Accept",))
        assert route.prefix.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:9")
        assert b"\r\nAccept:" not in route.prefix  # the request's own Accept replaces the client's
    await trio.lowlevel.checkpoint()
