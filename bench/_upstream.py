"""A fast local upstream for the scale runs: raw trio sockets, pre-framed events.

`llmrt.testing`'s server frames every response with h11 and is built to be
correct and scriptable, not cheap: at 5,000 concurrent streams it spends
about as much CPU per event as the client it serves, so a scale run would
measure the upstream. This one does the least a streaming server can: it
splits the request head by hand, reads ``Content-Length`` bytes of body, and
answers every ``POST .../chat/completions`` with the same event stream,
pre-encoded once in the chunked transfer coding, one ``send`` per event, at
``t0 + i * delay`` (a loaded server catches up rather than drifting). It
keeps connections alive, so a pooling client reuses them.

``GET /__stats`` answers with the same JSON as ``bench_http.py``'s upstream
(`bench_http._stats` over this module's records), so the scale section reads
CPU, peak open connections and spans the same way.

Bounds: a request head of at most 64 KiB and a body of at most 1 MiB; a
request past either, or one that is not HTTP/1.1-shaped, closes the
connection.
"""

from __future__ import annotations

import heapq
import json
import sys
from collections.abc import Callable
from typing import Any

import attrs
import trio
from _common import until_stdin_closes

MAX_HEAD = 64 * 1024
MAX_BODY = 1024 * 1024
READ = 65536
RESPONSE_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


@attrs.define(eq=False)
class Connection:
    """One accepted connection: the fields of `llmrt.testing.ConnectionRecord` the stats read."""

    opened_at: float
    closed_at: float | None = None
    closed_by: str | None = None
    closed: trio.Event = attrs.field(factory=trio.Event)


@attrs.define(eq=False)
class Request:
    body: bytes
    connection: int


@attrs.define(eq=False)
class Upstream:
    events: list[bytes]
    warm: list[bytes]
    delay: float
    warm_marker: bytes
    stats: Callable[[Any, str], dict[str, Any]]
    port: int = 0
    connections: list[Connection] = attrs.Factory(list)
    requests: list[Request] = attrs.Factory(list)


def chunked(events: list[bytes]) -> list[bytes]:
    """Each event as one chunk of the chunked coding; the last one carries the terminator."""
    framed = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    framed[-1] += b"0\r\n\r\n"
    return framed


async def _send(sock: trio.socket.SocketType, data: bytes) -> None:
    view = memoryview(data)
    while view:
        sent = await sock.send(view)
        view = view[sent:]


@attrs.define(eq=False)
class _Stream:
    """One response being paced out by the `_Pacer`."""

    sock: trio.socket.SocketType
    #: What is left of the event being written (a short send leaves some).
    pending: bytes = b""
    index: int = 0
    t0: float = 0.0
    done: trio.Event = attrs.field(factory=trio.Event)
    failed: bool = False


class _Pacer:
    """Writes every stream's events from one task: one tick, then every send that is due.

    A task per stream sleeping between events costs a timer wake-up and two
    scheduler passes per event; here an event costs one non-blocking
    ``send()`` call. A send that does not go out whole keeps its rest for the
    next tick.
    """

    def __init__(self, events: list[bytes], delay: float) -> None:
        self.events = events
        self.delay = delay
        self._heap: list[tuple[float, int, _Stream]] = []
        self._seq = 0
        self._wake = trio.Event()

    def add(self, stream: _Stream) -> None:
        stream.t0 = trio.current_time()
        self._push(stream.t0, stream)

    def _push(self, due: float, stream: _Stream) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, stream))
        self._wake.set()

    async def run(self) -> None:
        heap, events, delay = self._heap, self.events, self.delay
        while True:
            if not heap:
                self._wake = trio.Event()
                await self._wake.wait()
            # A stream added meanwhile is due at once: sleep at most one tick.
            await trio.sleep_until(min(heap[0][0], trio.current_time() + 0.001))
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                _, _, stream = heapq.heappop(heap)
                data = stream.pending or events[stream.index]
                try:
                    sent = stream.sock._sock.send(data)  # type: ignore[attr-defined]
                except BlockingIOError:
                    sent = 0
                except OSError:
                    stream.failed = True
                    stream.done.set()
                    continue
                if sent < len(data):
                    stream.pending = data[sent:]
                    self._seq += 1
                    heapq.heappush(heap, (now + 0.001, self._seq, stream))
                    continue
                stream.pending = b""
                stream.index += 1
                if stream.index == len(events):
                    stream.done.set()
                    continue
                self._seq += 1
                heapq.heappush(heap, (stream.t0 + stream.index * delay, self._seq, stream))


async def _handle(up: Upstream, pacer: _Pacer, sock: trio.socket.SocketType) -> None:
    index = len(up.connections)
    record = Connection(opened_at=trio.current_time())
    up.connections.append(record)
    closed_by = "client"
    buf = b""
    try:
        with sock:
            while True:
                # One request: head, then Content-Length bytes of body.
                while (end := buf.find(b"\r\n\r\n")) < 0:
                    if len(buf) > MAX_HEAD:
                        closed_by = "server"
                        return
                    data = await sock.recv(READ)
                    if not data:
                        return
                    buf += data
                head, buf = buf[:end], buf[end + 4 :]
                lines = head.split(b"\r\n")
                method, _, rest = lines[0].partition(b" ")
                target = rest.partition(b" ")[0]
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if length > MAX_BODY:
                    closed_by = "server"
                    return
                while len(buf) < length:
                    data = await sock.recv(READ)
                    if not data:
                        return
                    buf += data
                body, buf = buf[:length], buf[length:]
                path, _, query = target.partition(b"?")
                if path == b"/__stats":
                    payload = json.dumps(up.stats(up, query.decode())).encode()
                    await _send(
                        sock,
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload),
                    )
                    continue
                if method != b"POST" or not path.endswith(b"/chat/completions"):
                    await _send(sock, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                up.requests.append(Request(body, index))
                await _send(sock, RESPONSE_HEAD)
                if up.warm_marker in body:
                    await _send(sock, b"".join(up.warm))
                    continue
                stream = _Stream(sock)
                pacer.add(stream)
                await stream.done.wait()
                if stream.failed:
                    closed_by = "reset"
                    return
    except OSError:
        closed_by = "reset"
    finally:
        record.closed_at = trio.current_time()
        record.closed_by = closed_by
        record.closed.set()


async def serve(
    events: list[bytes],
    warm: list[bytes],
    delay: float,
    warm_marker: bytes,
    stats: Callable[[Any, str], dict[str, Any]],
    task_status: trio.TaskStatus[Upstream] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on a loopback port (0: any) and serve until cancelled."""
    up = Upstream(chunked(events), chunked(warm), delay, warm_marker, stats)
    listener = trio.socket.socket()
    listener.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
    await listener.bind(("127.0.0.1", 0))
    listener.listen(65535)  # capped by net.core.somaxconn
    up.port = listener.getsockname()[1]
    task_status.started(up)
    pacer = _Pacer(up.events, delay)
    raw = listener._sock  # type: ignore[attr-defined]
    with listener:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pacer.run)
            while True:
                await trio.lowlevel.wait_readable(raw)
                # Drain the accept queue on every wake: it holds at most somaxconn
                # connections (4096 here), and one accept per scheduler pass lets
                # 5,000 simultaneous connects overflow it, which costs the dropped
                # ones a SYN retransmit (1 s, then 3 s) and the run its timing.
                while True:
                    try:
                        conn, _ = raw.accept()
                    except BlockingIOError:
                        break
                    conn.setblocking(False)
                    sock = trio.socket.from_stdlib_socket(conn)
                    sock.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)
                    nursery.start_soon(_handle, up, pacer, sock)


async def _serve_until_stdin_closes(chunks: int, delay: float) -> None:
    from llmrt.testing import openai_events

    events = openai_events(["tok"] * chunks)
    async with trio.open_nursery() as nursery:
        up = await nursery.start(serve, events, events, delay, b"__warm__", lambda up, q: {})
        print(up.port, flush=True)
        await until_stdin_closes()
        nursery.cancel_scope.cancel()


def main() -> None:
    """``python _upstream.py CHUNKS DELAY``: the upstream in a process of its own.

    It prints its port on a line, then serves ``CHUNKS`` text deltas
    ``DELAY`` seconds apart per stream until its standard input closes.
    """
    trio.run(_serve_until_stdin_closes, int(sys.argv[1]), float(sys.argv[2]))


if __name__ == "__main__":
    main()
