"""HTTPS through the adapters' transport, against the local upstream speaking TLS.

The certificates come from `trustme` (a test dependency): a throwaway CA
that the client trusts, and a server certificate for 127.0.0.1.
"""

from __future__ import annotations

import pathlib
import ssl

import pytest
import trio
import trustme

import llmrt
from llmrt import ErrorCode, Finish, FinishError, FinishStop, GenerateOptions
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.testing import SSEScript, open_upstream

WIRE = pathlib.Path(__file__).parent / "wire"
REQUEST = GenerateOptions(provider="p", model="m", messages=(llmrt.user_message("hi"),))


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    return context


def client_context(ca: trustme.CA | None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if ca is not None:
        ca.configure_trust(context)
    return context


async def calls(base_url: str, context: ssl.SSLContext, n: int) -> list[list[llmrt.StreamChunk]]:
    adapter = OpenAIChatAdapter(
        base_url=base_url,
        api_key_env="K",
        environ={"K": "sk-test-123"},
        ssl_context=context,
        http2=False,  # HTTP/1.1 through TrioTransport, even where h2 is installed
    )
    results = []
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter)
        for _ in range(n):
            async with rt.stream(REQUEST) as call:
                results.append([chunk async for chunk in call])
    return results


async def test_https_streams_and_reuses_its_connection(
    ca: trustme.CA, server_context: ssl.SSLContext
) -> None:
    script = SSEScript.from_transcript(WIRE / "openai_text.sse")
    async with open_upstream([script, script], ssl_context=server_context) as upstream:
        assert upstream.base_url.startswith("https://")
        with trio.fail_after(20):
            results = await calls(upstream.base_url, client_context(ca), 2)
    for chunks in results:
        assembler = llmrt.BlockAssembler()
        for chunk in chunks:
            assembler.push(chunk)
        assert assembler.blocks() == (llmrt.TextBlock(text="The capital of France is Paris."),)
        assert assembler.finish == FinishStop()
    assert len(upstream.requests) == 2
    assert len(upstream.connections) == 1  # the second call reused the TLS connection


async def test_an_untrusted_certificate_is_a_network_error(server_context: ssl.SSLContext) -> None:
    script = SSEScript.from_transcript(WIRE / "openai_text.sse")
    async with open_upstream(script, ssl_context=server_context) as upstream:
        with trio.fail_after(20):
            (chunks,) = await calls(upstream.base_url, client_context(None), 1)
    last = chunks[-1]
    assert isinstance(last, Finish) and isinstance(last.reason, FinishError)
    assert last.reason.failure.code == ErrorCode.NETWORK
    assert upstream.requests == []
