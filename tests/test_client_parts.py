"""The Python client's reassembly of ``part`` frames, against a hostile fake gateway.

A small websocket server on loopback (port 0) says ``hello`` and then sends
whatever ``part`` frames the test chooses. The client's bound counts the
UTF-8 bytes of ids and data, and the frames partly received: past it the
client closes the connection (1009) and every open call ends with a
``PROTOCOL`` error finish; below it a frame in parts arrives whole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs
import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest, serve_websocket

import llmrt
from llmrt import ErrorCode, Finish, FinishError, FinishStop, TextDelta, user_message
from llmrt.actors.gateway import Limits
from llmrt.actors.gateway import client as client_module
from llmrt.actors.gateway._protocol import JSON, ChunksFrame, HelloFrame, PartFrame
from llmrt.actors.gateway._reassembly import PartsOverflow, Reassembly
from llmrt.actors.gateway.client import open_gateway_client

OPTIONS = llmrt.GenerateOptions(provider="p", model="m", messages=(user_message("hi"),))
#: Every test ends well within this (a hang is the failure being tested for).
BOUND = 10.0

Script = Callable[[WebSocketConnection, str], Awaitable[None]]


@attrs.define
class Fake:
    """What the fake gateway saw: the close code the client sent."""

    close_code: int | None = None
    closed: trio.Event = attrs.field(factory=trio.Event)


async def run_call(script: Script) -> tuple[list[object], Fake]:
    """One call through a fake gateway that answers its ``call`` frame with ``script``."""
    fake = Fake()

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept(subprotocol="llmrt.v1")
        hello = HelloFrame(protocol="llmrt.v1", server="fake", limits=Limits().announce())
        await ws.send_message(JSON.encode(hello))
        call = JSON.decode_client(await ws.get_message())
        await script(ws, call.id)
        try:
            while ws.closed is None:
                await ws.get_message()
        except ConnectionClosed as exc:
            fake.close_code = exc.reason.code if exc.reason is not None else None
        fake.closed.set()

    with trio.fail_after(BOUND):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(serve_websocket, handler, "127.0.0.1", 0, None)
            async with open_gateway_client(f"ws://127.0.0.1:{server.port}/") as client:
                async with client.stream(OPTIONS) as call:
                    chunks = [chunk async for chunk in call]
            await fake.closed.wait()
            nursery.cancel_scope.cancel()
    return chunks, fake


def failure_code(chunks: Sequence[object]) -> str:
    last = chunks[-1]
    assert isinstance(last, Finish) and isinstance(last.reason, FinishError), last
    return last.reason.failure.code


async def test_parts_of_too_many_frames_with_empty_data_close_the_connection() -> None:
    # Today's attack: many frames in parts, each with a large id and no data at all.
    async def script(ws: WebSocketConnection, call_id: str) -> None:
        for n in range(client_module.MAX_PARTIAL_FRAMES + 1):
            part = PartFrame(id=f"{n:04d}" + "x" * 65536, data="", more=True)
            await ws.send_message(JSON.encode(part))

    chunks, fake = await run_call(script)
    assert failure_code(chunks) == ErrorCode.PROTOCOL
    assert fake.close_code == 1009


async def test_the_ids_of_parts_count_against_the_byte_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_module, "MAX_ASSEMBLED_BYTES", 100_000)

    async def script(ws: WebSocketConnection, call_id: str) -> None:
        # Two frames partly received, well under the frame count, with ids
        # of 60,000 bytes each and empty data.
        for n in range(2):
            await ws.send_message(
                JSON.encode(PartFrame(id=f"{n}" + "i" * 60_000, data="", more=True))
            )

    chunks, fake = await run_call(script)
    assert failure_code(chunks) == ErrorCode.PROTOCOL
    assert fake.close_code == 1009


async def test_parts_are_counted_in_utf8_bytes_not_characters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_module, "MAX_ASSEMBLED_BYTES", 100_000)

    async def script(ws: WebSocketConnection, call_id: str) -> None:
        # 30,000 four-byte characters: 120,000 bytes, though only 30,000 characters.
        for _ in range(3):
            await ws.send_message(JSON.encode(PartFrame(id=call_id, data="😀" * 10_000, more=True)))

    chunks, fake = await run_call(script)
    assert failure_code(chunks) == ErrorCode.PROTOCOL
    assert fake.close_code == 1009


async def test_a_frame_in_parts_below_the_bound_arrives_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_module, "MAX_ASSEMBLED_BYTES", 100_000)
    text = "😀" * 20_000  # 80,000 bytes: under the bound, though held in parts

    async def script(ws: WebSocketConnection, call_id: str) -> None:
        frame = ChunksFrame(
            id=call_id,
            chunks=(TextDelta(index=0, text=text), Finish(reason=FinishStop())),
        )
        whole = JSON.encode(frame)
        assert isinstance(whole, str)
        slices = [whole[i : i + 7_000] for i in range(0, len(whole), 7_000)]
        for i, piece in enumerate(slices):
            more = i < len(slices) - 1
            await ws.send_message(JSON.encode(PartFrame(id=call_id, data=piece, more=more)))

    chunks, _ = await run_call(script)
    assert chunks == [TextDelta(index=0, text=text), Finish(reason=FinishStop())]


def test_the_reassembly_holds_parts_within_its_bounds_without_a_socket() -> None:
    # The client's reassembly is sans-I/O: frames in, the whole frame out.
    parts = Reassembly(max_bytes=20, max_frames=1)
    assert parts.add(PartFrame(id="a", data="whole")) == "whole"  # one part: nothing held
    assert parts.add(PartFrame(id="a", data="ab", more=True)) is None
    assert parts.add(PartFrame(id="a", data="cd")) == "abcd"
    assert parts.add(PartFrame(id="a", data="ef", more=True)) is None
    with pytest.raises(PartsOverflow, match="more than 1 frames"):
        parts.add(PartFrame(id="b", data="", more=True))
    with pytest.raises(PartsOverflow, match="above 20 bytes"):
        parts.add(PartFrame(id="a", data="😀" * 5, more=True))  # 5 characters, 20 bytes
    parts.clear()
    assert parts.add(PartFrame(id="b", data="x", more=True)) is None  # the bound is free again
