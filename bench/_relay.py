"""The floor for a gateway's added latency: a raw trio byte relay, one process hop.

``python _relay.py UPSTREAM_PORT`` prints its own port on a line, then relays
each client connection to a connection of its own to the upstream, copying
bytes both ways until either side closes; it parses nothing. Upstream
connections are opened ahead (a few spare), so a request pays no connect on
its way, as a pooling gateway pays none (when none is spare, the request
opens its own, as a pool miss does). A used one is replaced once the first
bytes of its response have gone to the client, not when the request
arrives, or the replacement's connect (and the upstream's accept) would fall
inside the very first-event latency the floor is for. What it adds over
``direct`` is what any gateway process in the path costs on this machine
before it does any work: two more cross-process wake-ups and four more
socket calls per event.
Serves until its standard input closes.
"""

from __future__ import annotations

import sys

import trio
from _common import until_stdin_closes

SPARE = 8


async def _pipe(
    source: trio.SocketStream, sink: trio.SocketStream, first: trio.Event | None = None
) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
            if first is not None:
                first.set()
                first = None
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        if first is not None:
            first.set()  # a stream that ended before any answer: its replacement may go
        sink.socket.close()


async def _serve(port: int) -> None:
    spare_send, spare_receive = trio.open_memory_channel[trio.SocketStream](SPARE)

    async def open_ahead() -> None:
        for _ in range(SPARE):
            await spare_send.send(await trio.open_tcp_stream("127.0.0.1", port))

    async def replace(answered: trio.Event) -> None:
        await answered.wait()
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        try:
            spare_send.send_nowait(stream)
        except trio.WouldBlock:
            await stream.aclose()

    async def handle(client: trio.SocketStream) -> None:
        answered = trio.Event()
        async with trio.open_nursery() as nursery:
            try:
                upstream = spare_receive.receive_nowait()
            except trio.WouldBlock:
                upstream = await trio.open_tcp_stream("127.0.0.1", port)
            else:
                nursery.start_soon(replace, answered)
            nursery.start_soon(_pipe, client, upstream)
            nursery.start_soon(_pipe, upstream, client, answered)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(open_ahead)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        print(listeners[0].socket.getsockname()[1], flush=True)
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        await until_stdin_closes()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(_serve, int(sys.argv[1]))
