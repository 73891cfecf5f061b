"""The floor for a gateway's added latency: a raw trio byte relay, one process hop.

``python _relay.py UPSTREAM_PORT`` prints its own port on a line, then relays
each client connection to a connection of its own to the upstream, copying
bytes both ways until either side closes; it parses nothing. Upstream
connections are opened ahead (a few spare), so a request pays no connect on
its way, as a pooling gateway pays none. What it adds over ``direct`` is what
any gateway process in the path costs on this machine before it does any
work: two more cross-process wake-ups and four more socket calls per event.
Serves until its standard input closes.
"""

from __future__ import annotations

import sys

import trio
from _common import until_stdin_closes

SPARE = 8


async def _pipe(source: trio.SocketStream, sink: trio.SocketStream) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        sink.socket.close()


async def _serve(port: int) -> None:
    spare_send, spare_receive = trio.open_memory_channel[trio.SocketStream](SPARE)

    async def open_ahead() -> None:
        while True:
            await spare_send.send(await trio.open_tcp_stream("127.0.0.1", port))

    async def handle(client: trio.SocketStream) -> None:
        upstream = await spare_receive.receive()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pipe, client, upstream)
            nursery.start_soon(_pipe, upstream, client)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(open_ahead)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        print(listeners[0].socket.getsockname()[1], flush=True)
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        await until_stdin_closes()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(_serve, int(sys.argv[1]))
