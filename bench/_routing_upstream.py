"""Two local upstreams in a process of their own, for ``bench_routing.py``'s failover runs.

``a`` answers every chat request with a 429 (no ``Retry-After``), ``b``
streams a short answer at once. Each request's arrival is stamped with
``time.monotonic()`` (one clock for every process of the machine), so the
benchmark measures the failover as the upstreams see it: from ``a``'s 429 to
``b``'s first byte. Prints ``{"a": URL, "b": URL}`` when listening; each
``stamps`` line on stdin prints (and clears) the stamps; EOF ends it.

Its own process, so that neither client (llmrt under trio, LiteLLM under
asyncio) shares an interpreter lock or a loop with the servers it measures.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import trio

from llmrt.testing import (
    ErrorScript,
    RecordedRequest,
    Script,
    SSEScript,
    open_upstream,
    openai_events,
)

LIMITED = ErrorScript(
    429, body={"error": {"message": "Rate limit reached", "type": "requests", "code": None}}
)
ANSWER = SSEScript(events=openai_events(["Hello", " there"]))


async def main() -> None:
    stamps: dict[str, list[float]] = {"a": [], "b": []}

    def stamped(name: str, script: Script) -> Callable[[RecordedRequest], Script | None]:
        def route(request: RecordedRequest) -> Script | None:
            if not request.path.endswith("/chat/completions"):
                return None  # model lists and the like
            stamps[name].append(time.monotonic())
            return script

        return route

    async with open_upstream(stamped("a", LIMITED)) as a, open_upstream(stamped("b", ANSWER)) as b:
        print(json.dumps({"a": a.base_url, "b": b.base_url}), flush=True)
        stdin = trio.lowlevel.FdStream(0)
        pending = b""
        while data := await stdin.receive_some(4096):
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if line.strip() == b"stamps":
                    print(json.dumps(stamps), flush=True)
                    stamps = {"a": [], "b": []}


if __name__ == "__main__":
    trio.run(main)
    sys.exit(0)
