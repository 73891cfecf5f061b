"""A gateway in the test's own trio loop with a scripted route, and a raw HTTP/1.1 client.

`api_gateway` serves route ``s``: a `ScriptedAdapter` whose script is chosen
by the last user text (`SCRIPTS`: ``tool``, ``fail``, ``long``, ``stall``,
``big``, else the text script). `exchange` sends bytes on a fresh loopback
connection and reads the whole answer in reads of 1 to 7 bytes, parsed by
h11 (an independent HTTP codec), so the framing is checked too.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import h11
import msgspec
import trio
from _api_support import failing_script, length_script, text_script, tool_script

import llmrt
from llmrt import BlockStart, GenerateOptions, TextBlock, TextDelta
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.adapters.scripted import Delay, ScriptedAdapter, Stall, Step

#: How many steps of `big_script` the adapter has taken so far (over all calls).
PRODUCED = [0]
BIG = 20_000


def big_script() -> Iterator[Step]:
    """Far more output than loopback socket buffers hold: 20,000 deltas of 1 KiB, lazily."""
    piece = "x" * 1024
    yield BlockStart(index=0, block_type="text")
    for _ in range(BIG):
        PRODUCED[0] += 1
        yield TextDelta(index=0, text=piece)
    yield from text_script()[4:]


def quiet_script() -> list[Step]:
    """Text, half a second of silence (five ping intervals of the tests), more text."""
    return [*text_script()[:2], Delay(0.5), *text_script()[2:]]


def silent_start_script() -> list[Step]:
    """A block start that encodes to nothing, half a second of silence, then the text."""
    return [text_script()[0], Delay(0.5), *text_script()[1:]]


def late_script() -> list[Step]:
    """Nothing at all until the call is given up."""
    return [Stall()]


def stall_script() -> list[Step]:
    return [BlockStart(index=0, block_type="text"), TextDelta(index=0, text="Hel"), Stall()]


SCRIPTS: dict[str, Any] = {
    "tool": tool_script,
    "fail": failing_script,
    "long": length_script,
    "stall": stall_script,
    "big": big_script,
    "quiet": quiet_script,
    "silent-start": silent_start_script,
    "late": late_script,
}


def last_text(options: GenerateOptions) -> str:
    for message in reversed(options.messages):
        for block in message.content:
            if isinstance(block, TextBlock):
                return block.text
    return ""


def script_of(options: GenerateOptions) -> Iterable[Step]:
    return SCRIPTS.get(last_text(options), text_script)()  # type: ignore[no-any-return]


@asynccontextmanager
async def api_gateway(
    limits: Limits | None = None,
    *,
    script: Any = script_of,
    retry_policy: Any = None,
    middleware: Any = None,
    **options: Any,
) -> AsyncIterator[tuple[GatewayServer, llmrt.LlmRuntime, ScriptedAdapter]]:
    adapter = ScriptedAdapter(script, models=("m",), retry_policy=retry_policy)
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["s"], adapter)
        if middleware is not None:
            rt.use(middleware)
        async with trio.open_nursery() as nursery:
            limits = limits or Limits(shutdown_grace=0.2)
            server = await nursery.start(partial(serve_gateway, rt, limits=limits, **options))
            try:
                yield server, rt, adapter
            finally:
                nursery.cancel_scope.cancel()


@attrs.frozen
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return msgspec.json.decode(self.body)


def request_bytes(
    path: str,
    body: bytes | None = None,
    *,
    method: str = "POST",
    headers: Sequence[tuple[str, str]] = (),
    content_type: str | None = "application/json",
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if content_type is not None and body is not None:
        lines.append(f"Content-Type: {content_type}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def read_reply(stream: trio.SocketStream, rng: random.Random | None = None) -> Reply:
    """Read one whole answer from ``stream`` in random 1 to 7 byte reads."""
    rng = rng or random.Random(7)
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    status = 0
    headers: dict[str, str] = {}
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(rng.randint(1, 7)))
        elif isinstance(event, h11.InformationalResponse):
            continue
        elif isinstance(event, h11.Response):
            status = event.status_code
            headers = {k.decode(): v.decode() for k, v in event.headers}
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            return Reply(status, headers, bytes(body))


async def exchange(port: int, data: bytes, *, seed: int = 7) -> Reply:
    """Send ``data`` on a new connection and read the answer (bounded by 10 s)."""
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(data)
            return await read_reply(stream, random.Random(seed))


def chat_body(text: str = "Hello", **more: Any) -> bytes:
    body = {"model": "s/m", "messages": [{"role": "user", "content": text}], **more}
    return msgspec.json.encode(body)


def responses_body(text: str = "Hello", **more: Any) -> bytes:
    return msgspec.json.encode({"model": "s/m", "input": text, **more})


def messages_body(text: str = "Hello", **more: Any) -> bytes:
    body = {"model": "s/m", "max_tokens": 100, "messages": [{"role": "user", "content": text}]}
    return msgspec.json.encode({**body, **more})
