"""Cassettes: every HTTP adapter recorded through the cassette proxy and replayed offline.

The "real provider" is the local upstream. Each case records a call, then
replays it with the provider gone, and compares what the consumer saw: the
same chunks, at the same times on trio's mock clock, ending the same way.
"""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

import llmrt
from llmrt import ErrorCode, Finish, FinishError, GenerateOptions, StreamChunk
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.gemini import GeminiAdapter
from llmrt.adapters.openai_chat import OpenAIChatAdapter
from llmrt.adapters.openai_responses import OpenAIResponsesAdapter
from llmrt.testing import (
    CassetteError,
    CassetteMismatch,
    Script,
    SSEScript,
    anthropic_events,
    cassette,
    decode_cassette,
    encode_exchange,
    hostile,
    open_upstream,
    openai_events,
    sse_data,
)

KEY = "sk-test-cassette-0123456789abcdef"
ENV = {"TEST_KEY": KEY}
KINDS = ["openai", "deepseek", "anthropic", "gemini", "responses"]
GEMINI_MODEL = "gemini-2.5-flash"
#: Every delay is a binary fraction, so offsets add up exactly in floating point.
TICK = 0.25
#: Where a replay says the provider is: nothing listens there.
NOWHERE = "http://provider.invalid"


def adapter_for(kind: str, base_url: str, **kw: Any) -> llmrt.Adapter:
    common: dict[str, Any] = {"api_key_env": "TEST_KEY", "environ": ENV, **kw}
    match kind:
        case "anthropic":
            return AnthropicAdapter(base_url=base_url, **common)
        case "gemini":
            return GeminiAdapter(base_url=base_url, **common)
        case "responses":
            return OpenAIResponsesAdapter(base_url=base_url, **common)
        case _:
            preset = "deepseek-official" if kind == "deepseek" else "openai-compatible"
            return OpenAIChatAdapter(preset=preset, base_url=base_url, **common)


def model_of(kind: str) -> str:
    return {"gemini": GEMINI_MODEL, "responses": "o4-mini"}.get(kind, "m")


def prefix_of(kind: str) -> str:
    """The path the adapter's base URL carries (the cassette keeps it in `base_url`)."""
    return "/v1" if kind == "responses" else ""


def events_of(kind: str, texts: list[str]) -> list[bytes]:
    if kind == "anthropic":
        return anthropic_events(texts)
    if kind in ("openai", "deepseek"):
        return openai_events(texts)
    if kind == "gemini":
        parts = [
            sse_data({"candidates": [{"index": 0, "content": {"parts": [{"text": t}]}}]})
            for t in texts
        ]
        done = {"candidates": [{"index": 0, "content": {"parts": []}, "finishReason": "STOP"}]}
        return [*parts, sse_data(done)]
    deltas = [
        sse_data({"type": "response.output_text.delta", "output_index": 0, "delta": t})
        for t in texts
    ]
    done = {"type": "response.completed", "response": {"id": "r", "status": "completed"}}
    return [*deltas, sse_data(done)]


def script_for(kind: str, case: str) -> Script:
    texts = ["Hel", "lo", ", ", "world"]
    match case:
        case "stream":
            return SSEScript(events_of(kind, texts), delay=TICK, first_byte_delay=TICK)
        case "reset":
            return SSEScript(events_of(kind, texts), delay=TICK, disconnect_after=3, reset=True)
        case _:
            return hostile(case)


Timed = list[tuple[float, StreamChunk]]


async def run_call(kind: str, base_url: str, prompt: str = "hello") -> Timed:
    """One call through `kind`'s adapter at `base_url`: each chunk with its offset from start."""
    options = GenerateOptions(
        provider="p", model=model_of(kind), messages=(llmrt.user_message(prompt),)
    )
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter_for(kind, base_url))
        with trio.fail_after(60):
            start = trio.current_time()
            async with rt.stream(options) as call:
                return [(_ns(trio.current_time() - start), chunk) async for chunk in call]


def _ns(seconds: float) -> float:
    """A mock-clock offset to the nanosecond: offsets taken from different starts (a scripted
    ``trio.sleep(0.05)``) agree to the float's precision, not always to its last bit."""
    return round(seconds, 9)


async def record(kind: str, script: Script, path: Path) -> Timed:
    async with open_upstream(script, script_paths=None) as provider:
        target = provider.base_url + prefix_of(kind)
        async with cassette(path, target=target) as tape:
            seen = await run_call(kind, tape.base_url)
        assert tape.recorded, "the first run records"
        assert len(provider.requests) == len(tape.recorded)
        # No connection to the provider outlives the cassette.
        with trio.fail_after(5):
            await provider.wait_all_closed()
    return seen


async def replay(kind: str, path: Path, mode: Any = "none") -> Timed:
    async with cassette(path, target=NOWHERE + prefix_of(kind), mode=mode) as tape:
        seen = await run_call(kind, tape.base_url)
    assert tape.recorded == [], "a replay records nothing"
    assert tape.played == len(tape.exchanges)
    return seen


def code_of(seen: Timed) -> str | None:
    finish = seen[-1][1]
    assert isinstance(finish, Finish)
    return finish.reason.failure.code if isinstance(finish.reason, FinishError) else None


# ---- record, then replay offline: the same chunks at the same times -----------------------------


@pytest.mark.parametrize("case", ["stream", "reset", "broken-chunked"])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_replay_gives_the_recorded_chunks_times_and_failure(
    kind: str, case: str, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "tape.jsonl"
    recorded = await record(kind, script_for(kind, case), path)
    replayed = await replay(kind, path)
    assert replayed == recorded
    expected = {"stream": None, "reset": ErrorCode.NETWORK, "broken-chunked": ErrorCode.PROTOCOL}
    assert code_of(replayed) == expected[case]
    if case == "stream":
        # The scripted timing reached the consumer: first byte after one tick, then one per tick.
        texts = [t for t, c in recorded if isinstance(c, llmrt.TextDelta)]
        assert texts[0] >= TICK and texts[-1] - texts[0] >= 3 * TICK


@pytest.mark.parametrize("name", ["trickle", "reset-mid-body", "garbage-status", "deep-nesting"])
async def test_hostile_upstreams_replay_as_they_recorded(
    name: str, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "tape.jsonl"
    recorded = await record("openai", hostile(name), path)
    replayed = await replay("openai", path)
    assert replayed == recorded
    assert code_of(replayed) == llmrt.testing.MISBEHAVIOURS[name].expected_code


async def test_a_reset_is_recorded_as_one_and_replayed_as_one(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "tape.jsonl"
    await record("openai", script_for("openai", "reset"), path)
    exchanges = decode_cassette(path.read_bytes())
    # The adapter does not retry a stream that already sent content: one exchange.
    (exchange,) = exchanges
    assert exchange.end.kind == "reset"
    assert exchange.response.status == 200
    async with cassette(path, target=NOWHERE, mode="none") as tape:
        await run_call("openai", tape.base_url)
        with trio.fail_after(5):
            connection = await tape.upstream.wait_connection_closed(0)
    assert connection.closed_by == "server"


async def test_a_stall_is_held_until_the_client_leaves(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "tape.jsonl"
    script = SSEScript(openai_events(["a", "b", "c"]), delay=TICK, stall_after=2)

    async def call(base_url: str) -> Timed:
        options = GenerateOptions(provider="p", model="m", messages=(llmrt.user_message("hi"),))
        async with llmrt.open_runtime() as rt:
            adapter = adapter_for("openai", base_url)
            await rt.register_adapter(["p"], adapter, stream_idle_timeout=2.0)
            start = trio.current_time()
            async with rt.stream(options) as c:
                return [(_ns(trio.current_time() - start), chunk) async for chunk in c]

    async with open_upstream(script, script_paths=None) as provider:
        async with cassette(path, target=provider.base_url) as tape:
            recorded = await call(tape.base_url)
    (exchange,) = decode_cassette(path.read_bytes())
    assert exchange.end.kind == "stall"
    assert exchange.end.at >= 2.0
    async with cassette(path, target=NOWHERE, mode="none") as tape:
        replayed = await call(tape.base_url)
    assert replayed == recorded
    assert code_of(replayed) == ErrorCode.TIMEOUT


async def test_a_10000_chunk_stream_round_trips_exactly(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    texts = [f"t{i} " for i in range(10_000)]
    script = SSEScript(openai_events(texts), delay=2**-10)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    recorded = await record("openai", script, first)
    (exchange,) = decode_cassette(first.read_bytes())
    # Byte for byte what the provider sent, one read per write (each at its own time).
    plan = script.plan
    assert b"".join(r.data for r in exchange.reads) == plan.head_keep_alive + b"".join(plan.writes)
    assert len(exchange.reads) == len(plan.writes)
    assert [r.at for r in exchange.reads[1:]] == [i * 2**-10 for i in range(1, len(plan.writes))]
    # Recording the replay gives the same reads, at the same offsets, ending the same way.
    async with cassette(first, target=NOWHERE, mode="none") as source:
        async with cassette(second, target=source.base_url, mode="all") as tape:
            replayed = await run_call("openai", tape.base_url)
    (again,) = decode_cassette(second.read_bytes())
    assert again.reads == exchange.reads
    assert again.end == exchange.end
    assert (again.request.method, again.request.text) == (
        exchange.request.method,
        exchange.request.text,
    )
    assert replayed == recorded
    assert sum(isinstance(c, llmrt.TextDelta) for _, c in replayed) == 10_000
    # The file itself round-trips.
    data = first.read_bytes()
    assert b"".join(encode_exchange(e) for e in decode_cassette(data)) == data


async def test_time_scale_zero_replays_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "tape.jsonl"
    recorded = await record("openai", script_for("openai", "stream"), path)
    async with cassette(path, target=NOWHERE, mode="none", time_scale=0) as tape:
        replayed = await run_call("openai", tape.base_url)
    assert [c for _, c in replayed] == [c for _, c in recorded]
    assert recorded[-1][0] >= 4 * TICK
    assert all(t == 0 for t, _ in replayed)


async def test_time_scale_stretches_the_offsets(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "tape.jsonl"
    recorded = await record("openai", script_for("openai", "stream"), path)
    async with cassette(path, target=NOWHERE, mode="none", time_scale=0.5) as tape:
        replayed = await run_call("openai", tape.base_url)
    assert [(t / 2, c) for t, c in recorded] == replayed


async def calls_on_one_client(base_url: str, n: int) -> list[Timed]:
    """`n` calls through one adapter, one after another: its pool reuses the connection."""
    options = GenerateOptions(provider="p", model="m", messages=(llmrt.user_message("hi"),))
    results = []
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], adapter_for("openai", base_url))
        for _ in range(n):
            with trio.fail_after(30):
                start = trio.current_time()
                async with rt.stream(options) as call:
                    results.append([(_ns(trio.current_time() - start), c) async for c in call])
    return results


async def test_connection_reuse_reaches_the_provider_as_it_happened(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # stale-keep-alive answers a connection once, then closes it unanswered when it is reused.
    path = tmp_path / "tape.jsonl"
    async with open_upstream(hostile("stale-keep-alive"), script_paths=None) as provider:
        async with cassette(path, target=provider.base_url) as tape:
            recorded = await calls_on_one_client(tape.base_url, 2)
        assert len(provider.connections) == 2
    ends = [(e.connection, e.end.kind, len(e.reads)) for e in decode_cassette(path.read_bytes())]
    # The reused connection met the provider's close, and the client sent again on a new one.
    assert ends == [(0, "keep-alive", 1), (0, "close", 0), (1, "keep-alive", 1)]
    async with cassette(path, target=NOWHERE, mode="none") as tape:
        replayed = await calls_on_one_client(tape.base_url, 2)
        assert len(tape.upstream.connections) == 2
    assert replayed == recorded
    assert [code_of(r) for r in replayed] == [None, None]


async def test_an_https_target_is_recorded_over_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    path = tmp_path / "tape.jsonl"
    script = SSEScript(openai_events(["over", " tls"]))
    async with open_upstream(script, script_paths=None, ssl_context=server) as provider:
        assert provider.base_url.startswith("https://")
        async with cassette(path, target=provider.base_url, ssl_context=client) as tape:
            recorded = await run_call("openai", tape.base_url)
    (exchange,) = decode_cassette(path.read_bytes())
    assert exchange.request.url == provider.base_url + "/chat/completions"
    assert exchange.reads[0].data.startswith(b"HTTP/1.1 200 OK\r\n")
    async with cassette(path, target="https://provider.invalid", mode="none") as tape:
        replayed = await run_call("openai", tape.base_url)
    assert [c for _, c in replayed] == [c for _, c in recorded]
    assert "".join(c.text for _, c in replayed if isinstance(c, llmrt.TextDelta)) == "over tls"


# ---- secrets --------------------------------------------------------------------------------


async def test_no_key_reaches_the_cassette_even_when_the_provider_echoes_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "tape.jsonl"
    extra = "private-value-the-test-names-7f3a"
    async with open_upstream(hostile("echo-secrets", phrasing="json"), script_paths=None) as up:
        async with cassette(path, target=up.base_url, secrets=[extra]) as tape:
            recorded = await run_call("openai", tape.base_url, prompt=f"say {extra}")
    text = path.read_text()
    assert KEY not in text and extra not in text
    assert extra not in repr(tape)
    assert KEY not in base64.b64decode(base64.b64encode(text.encode())).decode()
    (exchange,) = decode_cassette(path.read_bytes())
    assert dict(exchange.request.headers)["authorization"] == "Bearer [redacted]"
    assert "[redacted]" in (exchange.request.text or "")
    # The masked body keeps its length, so its Content-Length still frames it on replay.
    assert "*" * len(KEY) in exchange.reads[0].data.decode()
    async with cassette(path, target=NOWHERE, mode="none", secrets=[extra]) as tape:
        replayed = await run_call("openai", tape.base_url, prompt=f"say {extra}")
    assert code_of(replayed) == code_of(recorded) == ErrorCode.AUTH


def test_query_secrets_and_secret_headers_are_replaced() -> None:
    from llmrt.testing._tape import Scrubber

    scrub = Scrubber()
    headers = [("x-goog-api-key", KEY), ("user-agent", f"ua {KEY}")]
    scrub.harvest(headers, f"/v1/models?key={KEY}&alt=sse")
    request = scrub.request("GET", f"https://h/v1/models?key={KEY}&alt=sse", headers, b"")
    assert request.url == "https://h/v1/models?key=[redacted]&alt=sse"
    assert request.headers == [("x-goog-api-key", "[redacted]"), ("user-agent", "ua [redacted]")]
    head = f"HTTP/1.1 200 OK\r\nset-cookie: s={KEY}\r\n\r\nbody {KEY}".encode()
    masked = scrub.response(head, head.index(b"\r\n\r\n") + 4)
    assert len(masked) == len(head) and KEY.encode() not in masked


# ---- modes and mismatches -------------------------------------------------------------------


async def test_a_request_no_exchange_matches_fails_with_a_diff(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "tape.jsonl"
    await record("openai", script_for("openai", "stream"), path)
    with pytest.raises(CassetteMismatch) as raised:
        async with cassette(path, target=NOWHERE, mode="once") as tape:
            seen = await run_call("openai", tape.base_url, prompt="goodbye")
            assert code_of(seen) == ErrorCode.INVALID_REQUEST
    report = str(raised.value)
    assert "no recorded exchange matches POST /chat/completions" in report
    assert '-      "content": "hello",' in report
    assert '+      "content": "goodbye",' in report
    assert KEY not in report


async def test_each_recorded_exchange_plays_once_in_order(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "tape.jsonl"
    scripts = [SSEScript(openai_events(["one"])), SSEScript(openai_events(["two"]))]
    async with open_upstream(scripts, script_paths=None) as provider:
        async with cassette(path, target=provider.base_url) as tape:
            first = await run_call("openai", tape.base_url)
            second = await run_call("openai", tape.base_url)
    async with cassette(path, target=NOWHERE, mode="none") as tape:
        assert await run_call("openai", tape.base_url) == first
        assert await run_call("openai", tape.base_url) == second
    with pytest.raises(CassetteMismatch, match="2 matching exchange"):
        async with cassette(path, target=NOWHERE, mode="none") as tape:
            for _ in range(3):
                await run_call("openai", tape.base_url)


async def test_new_episodes_replays_what_matches_and_records_the_rest(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "tape.jsonl"
    await record("openai", script_for("openai", "stream"), path)
    async with open_upstream(SSEScript(openai_events(["new"])), script_paths=None) as provider:
        async with cassette(path, target=provider.base_url, mode="new_episodes") as tape:
            await run_call("openai", tape.base_url, prompt="hello")
            await run_call("openai", tape.base_url, prompt="another")
        assert len(provider.requests) == 1  # only the new request went upstream
    bodies = [json.loads(e.request.text or "") for e in decode_cassette(path.read_bytes())]
    assert [b["messages"][-1]["content"] for b in bodies] == ["hello", "another"]


async def test_mode_none_without_a_file_and_a_bad_file_are_errors(tmp_path: Path) -> None:
    with pytest.raises(CassetteError, match="never records") as missing:
        async with cassette(tmp_path / "absent.jsonl", mode="none"):
            pass
    assert missing.value.code == "NOT_FOUND"
    with pytest.raises(CassetteError, match="target=") as no_target:
        async with cassette(tmp_path / "absent.jsonl"):
            pass
    assert no_target.value.code == "NO_TARGET"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"version": 99, "request": {}}\n')
    with pytest.raises(CassetteError, match=r"bad\.jsonl:1") as unreadable:
        async with cassette(bad, mode="none"):
            pass
    assert unreadable.value.code == "FORMAT"
    with pytest.raises(CassetteError, match="mode must be"):
        async with cassette(bad, mode="sometimes"):  # type: ignore[arg-type]
            pass
