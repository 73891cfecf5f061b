"""Model discovery through the runtime's discovery API, over real loopback.

The OpenAI-compatible adapter's `EndpointDiscovery` answers
``LlmRuntime.discover_models`` for its two settings namespaces:
``openai-compatible`` reads ``GET {base_url}/models`` (``/v1/models`` for
a ``/v1`` base URL), ``ollama`` reads Ollama's native ``GET /api/tags``.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from _ports import free_port

import llmrt
from llmrt import ErrorCode
from llmrt.adapter import DiscoveredModel, ModelDiscoveryRequest
from llmrt.adapters.openai_chat import (
    OLLAMA_NS,
    OPENAI_COMPATIBLE_NS,
    DiscoveryEndpoint,
    EndpointDiscovery,
)
from llmrt.testing import ErrorScript, RecordedRequest, SSEScript, open_upstream

KEY = "sk-discovery-test-0123456789abcdef"

#: What an Ollama server answers to ``GET /api/tags`` (trimmed to the fields read, plus a few).
OLLAMA_TAGS = {
    "models": [
        {
            "name": "llama3.2:latest",
            "model": "llama3.2:latest",
            "modified_at": "2025-05-04T17:37:44.706015396-07:00",
            "size": 2019393189,
            "digest": "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72",
            "details": {
                "parent_model": "",
                "format": "gguf",
                "family": "llama",
                "families": ["llama"],
                "parameter_size": "3.2B",
                "quantization_level": "Q4_K_M",
            },
        },
        {"name": "qwen2.5-coder:7b", "model": "qwen2.5-coder:7b", "details": {}},
        {"name": "old-server-only-name"},
    ]
}


def ollama_router(request: RecordedRequest) -> Any:
    if request.method == "GET" and request.path == "/api/tags":
        return ErrorScript(status=200, body=OLLAMA_TAGS)
    return None  # the upstream's own lists and 404s


def closed_port() -> int:
    """A loopback port nothing listens on (from this worker's slice: none of the run takes it)."""
    return free_port()


async def test_an_openai_compatible_endpoint_is_discovered_at_v1_models() -> None:
    async with open_upstream(SSEScript(events=()), models=("gpt-x", "gpt-y", "gpt-x")) as up:
        async with llmrt.open_runtime() as rt:
            await rt.register_model_discovery(OPENAI_COMPATIBLE_NS, EndpointDiscovery())
            request = ModelDiscoveryRequest(base_url=up.base_url + "/v1", api_key=KEY)
            found = await rt.discover_models(OPENAI_COMPATIBLE_NS, request)
    # Deduplicated, in endpoint order.
    assert found == (DiscoveredModel(id="gpt-x"), DiscoveredModel(id="gpt-y"))
    (sent,) = up.requests
    assert (sent.method, sent.path) == ("GET", "/v1/models")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["user-agent"] == llmrt.adapter.attribution_headers()["User-Agent"]
    assert KEY not in repr(request)


async def test_an_ollama_endpoint_is_discovered_at_api_tags() -> None:
    async with open_upstream(ollama_router) as up:
        async with llmrt.open_runtime() as rt:
            await rt.register_model_discovery(OLLAMA_NS, EndpointDiscovery(api="ollama"))
            # The preset's base URL ends in /v1; the native list is at the server's root.
            request = ModelDiscoveryRequest(base_url=up.base_url + "/v1/")
            found = await rt.discover_models(OLLAMA_NS, request)
    assert found == (
        DiscoveredModel(id="llama3.2:latest", name="llama3.2:latest"),
        DiscoveredModel(id="qwen2.5-coder:7b", name="qwen2.5-coder:7b"),
        DiscoveredModel(id="old-server-only-name", name="old-server-only-name"),
    )
    (sent,) = up.requests
    assert (sent.method, sent.path) == ("GET", "/api/tags")
    assert "authorization" not in sent.headers


async def test_the_request_api_overrides_the_namespace() -> None:
    async with open_upstream(ollama_router) as up:
        async with EndpointDiscovery() as discovery:
            found = await discovery(ModelDiscoveryRequest(base_url=up.base_url, api="ollama"))
    assert [m.id for m in found][:1] == ["llama3.2:latest"]
    assert up.requests[0].path == "/api/tags"


async def test_a_configured_route_is_asked_with_its_own_endpoint_and_key() -> None:
    async with open_upstream(SSEScript(events=()), models=("served",)) as up:
        async with EndpointDiscovery(
            routes={"mine": DiscoveryEndpoint(base_url=up.base_url, api_key_env="MY_KEY")},
            environ={"MY_KEY": KEY},
        ) as discovery:
            found = await discovery(ModelDiscoveryRequest(provider="mine"))
    assert found == (DiscoveredModel(id="served"),)
    assert up.requests[0].path == "/models"
    assert up.requests[0].headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (ModelDiscoveryRequest(provider="unknown"), ErrorCode.INVALID_REQUEST),
        (ModelDiscoveryRequest(base_url="ftp://h", api_key=KEY), ErrorCode.INVALID_REQUEST),
        (
            ModelDiscoveryRequest(base_url="http://127.0.0.1:1", api="grpc"),
            ErrorCode.INVALID_REQUEST,
        ),
    ],
)
async def test_requests_discovery_cannot_serve_are_refused_before_io(
    request_: ModelDiscoveryRequest, code: ErrorCode
) -> None:
    with pytest.raises(llmrt.LlmError) as info:
        async with EndpointDiscovery() as discovery:
            await discovery(request_)
    assert info.value.code == code
    assert KEY not in str(info.value)


async def test_failures_are_classified_and_never_echo_the_key() -> None:
    echoing = ErrorScript(status=401, body={"error": {"message": f"Invalid API key {KEY}"}})
    async with open_upstream(lambda request: echoing) as up:
        with pytest.raises(llmrt.LlmError) as info:
            async with EndpointDiscovery() as discovery:
                await discovery(ModelDiscoveryRequest(base_url=up.base_url, api_key=KEY))
    assert info.value.code == ErrorCode.AUTH and info.value.failure.status == 401
    assert KEY not in str(info.value) and KEY[:12] not in str(info.value)

    garbage = ErrorScript(status=200, body={"models": "not a list"})
    async with open_upstream(lambda request: garbage) as up:
        with pytest.raises(llmrt.LlmError) as info:
            async with EndpointDiscovery(api="ollama") as discovery:
                await discovery(ModelDiscoveryRequest(base_url=up.base_url))
    assert info.value.code == ErrorCode.PROTOCOL

    with pytest.raises(llmrt.LlmError) as info:
        request = ModelDiscoveryRequest(base_url=f"http://127.0.0.1:{closed_port()}", api_key=KEY)
        async with EndpointDiscovery() as discovery:
            await discovery(request)
    assert info.value.code == ErrorCode.NETWORK
    assert KEY not in str(info.value)


async def test_a_silent_endpoint_is_bounded_in_time(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0.02  # loopback I/O lands before the clock jumps
    slow = ErrorScript(status=200, body={"data": []}, first_byte_delay=3600)
    async with open_upstream(lambda request: slow) as up:
        start = trio.current_time()
        with pytest.raises(llmrt.LlmError) as info:
            async with EndpointDiscovery(timeout=5) as discovery:
                await discovery(ModelDiscoveryRequest(base_url=up.base_url))
        elapsed = trio.current_time() - start
    assert info.value.code == ErrorCode.TIMEOUT
    assert 5 <= elapsed < 6
    assert [r.path for r in up.requests] == ["/models"]  # it was asked, then given up on


def test_discovery_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown discovery api"):
        EndpointDiscovery(api="grpc")
    with pytest.raises(ValueError, match="timeout"):
        EndpointDiscovery(timeout=0)


async def test_the_plugins_discovery_is_made_at_its_first_ask() -> None:
    # What `llmrt.toml` registers per namespace: nothing of httpx is built (or
    # imported) until someone asks; then it asks the route's own endpoint.
    from llmrt.adapters._openai_chat_plugin import DeferredDiscovery

    with pytest.raises(ValueError, match="unknown discovery api"):
        DeferredDiscovery("grpc", {})
    never = DeferredDiscovery("openai", {})
    await never.aclose()
    assert not never.made
    async with open_upstream(SSEScript(events=()), models=("served",)) as up:
        async with llmrt.open_runtime() as rt:
            discovery = DeferredDiscovery(
                "openai", {"mine": (up.base_url, "MY_KEY")}, environ={"MY_KEY": KEY}
            )
            await rt.register_model_discovery(OPENAI_COMPATIBLE_NS, discovery)
            assert not discovery.made
            request = ModelDiscoveryRequest(provider="mine")
            found = await rt.discover_models(OPENAI_COMPATIBLE_NS, request)
            assert discovery.made
        # The runtime closed it with its offer, as it closes an EndpointDiscovery.
        assert not discovery.made
    assert found == (DiscoveredModel(id="served"),)
    assert up.requests[0].headers["authorization"] == f"Bearer {KEY}"
