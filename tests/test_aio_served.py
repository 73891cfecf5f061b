"""docs/asyncio.md's Starlette app, served by a real uvicorn process: a client that leaves closes
the upstream.

The app is the page's block, as printed, written to a file and run with
``python -m uvicorn sse_app:app`` against an `llmrt.testing` upstream that
streams slowly. An HTTP client reads about half of the answer and hangs up;
the upstream must then see its connection closed by the client (the app's
call was aborted), long before the stream would have ended.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio
from _doc_examples import parse

from llmrt.testing import SSEScript, open_upstream, openai_events

pytestmark = pytest.mark.timeout(90)

DOC = Path(__file__).resolve().parent.parent / "docs" / "asyncio.md"
EVENTS = 100
READ = EVENTS // 2


def _app_source() -> str:
    (block,) = [e for e in parse("docs/asyncio.md", DOC.read_text()) if e.file_name == "sse_app.py"]
    return block.code


async def _port(stderr: trio.abc.ReceiveStream, seen: bytearray) -> int:
    """The port uvicorn announces (``Uvicorn running on http://127.0.0.1:PORT``)."""
    while True:
        data = await stderr.receive_some(4096)
        if not data:
            raise AssertionError(f"uvicorn exited before serving:\n{seen.decode()}")
        seen += data
        found = re.search(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)", seen)
        if found:
            return int(found.group(1))


async def _rest(stderr: trio.abc.ReceiveStream, seen: bytearray) -> None:
    while data := await stderr.receive_some(4096):
        seen += data


async def test_a_client_leaving_the_sse_stream_closes_the_upstream(tmp_path: Path) -> None:
    (tmp_path / "sse_app.py").write_text(_app_source(), encoding="utf-8")
    words = [f" w{i}" for i in range(EVENTS)]
    # 30 ms apart: the whole answer would take 3 s; the client leaves after half.
    script = SSEScript(events=openai_events(words), delay=0.03)
    with trio.fail_after(60):
        async with open_upstream(script) as upstream:
            env = {
                **os.environ,
                "LLM_BASE_URL": upstream.base_url + "/v1",
                "LLM_API_KEY": "sk-served-0123456789",
                "LLM_MODEL": "m-1",
            }
            command = [sys.executable, "-m", "uvicorn", "sse_app:app", "--port", "0"]
            process = await trio.lowlevel.open_process(
                command, cwd=tmp_path, env=env, stderr=subprocess.PIPE
            )
            log = bytearray()
            try:
                assert process.stderr is not None
                port = await _port(process.stderr, log)
                deltas = 0
                async with httpx.AsyncClient(timeout=30) as client:
                    url = f"http://127.0.0.1:{port}/chat?q=hello"
                    async with client.stream("GET", url) as reply:
                        assert reply.headers["content-type"].startswith("text/event-stream")
                        async for line in reply.aiter_lines():
                            if line.startswith('data: {"type":"text-delta"'):
                                deltas += 1
                                if deltas == READ:
                                    break  # leaving the block closes the connection
                record = await upstream.wait_connection_closed(0)
                sent_when_closed = len(upstream.requests)
            finally:
                # SIGTERM: uvicorn shuts down gracefully (the lifespan's exit runs),
                # then re-raises the signal, so the exit status is -SIGTERM.
                process.terminate()
                with trio.move_on_after(15):
                    assert process.stderr is not None
                    await _rest(process.stderr, log)
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
    assert deltas == READ
    assert record.closed_by == "client"
    assert sent_when_closed == 1
    # uvicorn shut down cleanly: the app's lifespan left llmrt.aio.open_runtime.
    text = log.decode()
    assert "Application shutdown complete." in text, text
    assert "Traceback" not in text, text
