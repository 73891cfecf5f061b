"""A real ``llmrt serve`` process for the HTTP API tests, with local upstreams behind adapters.

`served_gateway` (a context manager for a module-scoped fixture) runs, for
the whole module:

* one `llmrt.testing` upstream in a thread of its own (its own trio loop),
  answering OpenAI chat completions and Anthropic Messages by the last user
  text of each request (`script_for`): ``think`` reasons first, ``tool``
  calls ``get_weather`` (and a request holding the tool's result is
  answered in text), ``long`` ends at the output cap, ``stall`` sends two
  events and holds the response open, and the error words (``ratelimit``,
  ``badkey``, ``overload``, ``context``, ``broken``) get the provider's error;
* ``llmrt serve`` as a child process, its routes ``oa`` (openai_chat),
  ``an`` (anthropic), ``gm`` (gemini, text only) and ``rs``
  (openai_responses, text only) on that upstream beside ``demo``, a group
  ``pool`` of ``oa``, an alias ``fast`` for ``oa/gpt-4.1-mini``, no retries.

Tests talk to it with the official SDKs (sync clients: no event loop of
their own in the test) and read the upstream's records through
`Gateway.upstream_call`. Every wait is bounded.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from llmrt.testing import (
    ErrorScript,
    RecordedRequest,
    Script,
    SSEScript,
    Upstream,
    anthropic_events,
    open_upstream,
    openai_events,
    sse_data,
)

STARTUP = 30.0
TOKEN = "http-api-test-token"
WEATHER = '{"city": "Paris"}'


def _last_user_text(request: RecordedRequest) -> str:
    body = request.json or {}
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return " ".join(part.get("text", "") for part in content or () if isinstance(part, dict))
    return ""


def _has_tool_result(request: RecordedRequest) -> bool:
    for message in (request.json or {}).get("messages", []):
        if message.get("role") == "tool":
            return True
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(p, dict) and p.get("type") == "tool_result" for p in content
        ):
            return True
    return False


def _error(anthropic: bool, status: int, kind: str, message: str, **more: Any) -> ErrorScript:
    if anthropic:
        body: Any = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        body = {"error": {"message": message, "type": kind, "code": more.pop("code", None)}}
    return ErrorScript(status=status, body=body, headers=more.get("headers", ()))


def _gemini_text(texts: list[str]) -> list[bytes]:
    events = [
        sse_data(
            {"candidates": [{"index": 0, "content": {"role": "model", "parts": [{"text": t}]}}]}
        )
        for t in texts
    ]
    usage = {"promptTokenCount": 12, "candidatesTokenCount": len(texts), "totalTokenCount": 14}
    done = {
        "candidates": [{"index": 0, "content": {"parts": []}, "finishReason": "STOP"}],
        "usageMetadata": usage,
    }
    return [*events, sse_data(done)]


def _responses_text(texts: list[str]) -> list[bytes]:
    events = [
        sse_data({"type": "response.output_text.delta", "output_index": 0, "delta": t})
        for t in texts
    ]
    usage = {"input_tokens": 12, "output_tokens": len(texts), "total_tokens": 12 + len(texts)}
    done = {
        "type": "response.completed",
        "response": {"id": "resp_up", "status": "completed", "usage": usage},
    }
    return [*events, sse_data(done)]


def script_for(request: RecordedRequest) -> Script | None:
    """The upstream's answer to one request (see the module docstring)."""
    if request.method != "POST":
        return None
    if request.path.endswith(":streamGenerateContent"):
        return SSEScript(events=_gemini_text(["Hello", " there"]))
    if request.path == "/v1/responses":
        return SSEScript(events=_responses_text(["Hello", " there"]))
    anthropic = request.path == "/v1/messages"
    text = _last_user_text(request)
    events: Callable[..., list[bytes]] = anthropic_events if anthropic else openai_events
    if _has_tool_result(request):
        return SSEScript(events=events(["It is sunny", " in Paris."]))
    if "ratelimit" in text:
        return _error(
            anthropic, 429, "rate_limit_error" if anthropic else "requests", "slow down",
            headers=(("retry-after", "3"),),
        )  # fmt: skip
    if "badkey" in text:
        return _error(anthropic, 401, "authentication_error", "invalid x-api-key")
    if "overload" in text:
        return _error(anthropic, 529 if anthropic else 503, "overloaded_error", "overloaded")
    if "context" in text:
        return _error(
            anthropic, 400, "invalid_request_error",
            "prompt is too long: 300000 tokens > 200000 maximum",
            code="context_length_exceeded",
        )  # fmt: skip
    if "broken" in text:
        return _error(anthropic, 500, "api_error", "internal failure")
    if "stall" in text:
        return SSEScript(events=events(["one", "two", "three"]), stall_after=3)
    if "tool" in text:
        spec = ("call_w1", "get_weather", ['{"city":', ' "Paris"}'])
        key = "tool_uses" if anthropic else "tool_calls"
        return SSEScript(events=events(["Checking."], **{key: [spec]}))
    if "long" in text:
        key, value = ("stop_reason", "max_tokens") if anthropic else ("finish_reason", "length")
        return SSEScript(events=events(["Once upon", " a time"], **{key: value}))
    if "think" in text:
        key = "thinking_chunks" if anthropic else "reasoning_chunks"
        return SSEScript(events=events(["Forty-two."], **{key: ["Let me ", "think."]}))
    return SSEScript(events=events(["Hello", " there"]))


CONFIG = """\
[[provider]]
route = "oa"
adapter = "openai_chat"
preset = "openai-compatible"
base_url = "{base}/v1"
api_key_env = "HTTP_API_TEST_OA_KEY"
models = [ {{ id = "gpt-4.1-mini", image_input = true }} ]
retry = {{ max_retries = 0 }}

[[provider]]
route = "an"
adapter = "anthropic"
base_url = "{base}"
api_key_env = "HTTP_API_TEST_AN_KEY"
retry = {{ max_retries = 0 }}

[[provider]]
route = "gm"
adapter = "gemini"
base_url = "{base}"
api_key_env = "HTTP_API_TEST_GM_KEY"
retry = {{ max_retries = 0 }}

[[provider]]
route = "rs"
adapter = "openai_responses"
base_url = "{base}/v1"
api_key_env = "HTTP_API_TEST_RS_KEY"
retry = {{ max_retries = 0 }}

[[provider]]
route = "demo"
adapter = "demo"

[[group]]
name = "pool"
[[group.deployment]]
route = "oa"
model = "gpt-4.1-mini"

[aliases]
"fast" = "oa/gpt-4.1-mini"
"""


@attrs.define(eq=False)
class Gateway:
    """The running gateway: its port, the upstream, and a way to await in the upstream's loop."""

    port: int
    upstream: Upstream
    token: trio.lowlevel.TrioToken
    proc: subprocess.Popen[bytes]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def upstream_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``await fn(*args)`` in the upstream's loop, bounded by 10 s."""

        async def bounded() -> Any:
            with trio.fail_after(10):
                return await fn(*args)

        return trio.from_thread.run(bounded, trio_token=self.token)


def _upstream_thread(ready: queue.Queue[Any]) -> None:
    async def main() -> None:
        stop = trio.Event()
        async with open_upstream(script_for) as upstream:
            ready.put((upstream, trio.lowlevel.current_trio_token(), stop))
            await stop.wait()

    try:
        trio.run(main)
    except BaseException as exc:  # reported to the fixture rather than lost in the thread
        ready.put(exc)


@contextmanager
def served_gateway(directory: Path, *extra: str, token: str | None = None) -> Iterator[Gateway]:
    """``llmrt serve`` on a free port with the routes above; stopped (SIGTERM) at the end."""
    ready: queue.Queue[Any] = queue.Queue()
    thread = threading.Thread(target=_upstream_thread, args=(ready,), daemon=True)
    thread.start()
    got = ready.get(timeout=STARTUP)
    if isinstance(got, BaseException):
        raise got
    upstream, trio_token, stop = got
    config = directory / "llmrt.toml"
    config.write_text(CONFIG.format(base=upstream.base_url))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("LLMRT_GATEWAY_TOKEN", None)
    env.update(
        PYTHONUNBUFFERED="1",
        HTTP_API_TEST_OA_KEY="sk-test-oa",
        HTTP_API_TEST_AN_KEY="sk-test-an",
        HTTP_API_TEST_GM_KEY="AIzaTest-0123456789abcdef",
        HTTP_API_TEST_RS_KEY="sk-test-rs",
    )
    if token is not None:
        env["LLMRT_GATEWAY_TOKEN"] = token
    command = [sys.executable, "-m", "llmrt.actors.app.cli", "serve", "--port", "0"]
    proc = subprocess.Popen(
        [*command, "--config", str(config), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + STARTUP
        port = None
        seen: list[str] = []
        while port is None and time.monotonic() < deadline:
            line = proc.stdout.readline().decode()
            if not line:
                break
            seen.append(line)
            found = re.search(r"listening on ws://127\.0\.0\.1:(\d+)/", line)
            if found:
                port = int(found.group(1))
        assert port is not None, f"llmrt serve did not start: {''.join(seen)}"
        # The rest of its output is read (and dropped) so that it never blocks on a full pipe.
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        yield Gateway(port, upstream, trio_token, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        trio.from_thread.run_sync(stop.set, trio_token=trio_token)
        thread.join(timeout=10)
