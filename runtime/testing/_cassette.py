"""Cassettes: record a provider's wire exchanges once, replay them offline through the upstream.

`cassette(path, target=..., mode=...)` runs a local upstream (`serve_upstream`)
whose router answers each request in one of two ways:

- **record**: a script that forwards the request to `target` (the real
  provider, over TLS for ``https``) on an upstream connection of its own,
  one per client connection so keep-alive reuse is what the provider sees,
  and relays every read back to the client as it arrives, noting the bytes,
  the time and how the exchange ended (kept alive, closed, reset, or stalled
  until the client left);
- **replay**: a script that sends a recorded exchange's reads, one write
  each, at their recorded offsets from the request (`trio.sleep_until`, so
  a `MockClock` reproduces them exactly; `time_scale` stretches them in real
  time, 0 sends at once), then ends the connection as it ended.

A request no recorded exchange matches (modes ``once`` with a file, and
``none``) is answered 400 with a short JSON error, and the cassette raises
`CassetteMismatch` when the block ends, with a diff against the nearest
recorded request. The file is written when the block ends.
"""

from __future__ import annotations

import functools
import os
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Collection, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final, Literal, TypeAlias, get_args

import attrs
import h11
import trio

from llmrt._redact import REDACTED

from ._records import ConnectionRecord, RecordedRequest
from ._scripts import ErrorScript, HostileScript, Outcome, Script
from ._server import Upstream, serve_upstream
from ._tape import (
    FORMAT_VERSION,
    MATCH_FIELDS,
    MATCH_ON,
    SECRET_HEADERS,
    SECRET_QUERY,
    CassetteError,
    End,
    EndKind,
    Exchange,
    Request,
    Response,
    Scrubber,
    decode_cassette,
    encode_exchange,
    make_read,
    mismatch_report,
    request_matches,
)

__all__ = ["Cassette", "CassetteMismatch", "CassetteMode", "cassette"]

#: ``once``: replay the file if it exists, else record every request;
#: ``none``: replay only (the file must exist); ``new_episodes``: replay what
#: matches, record the rest and add it; ``all``: record everything anew.
CassetteMode: TypeAlias = Literal["once", "none", "new_episodes", "all"]

_RECEIVE_BYTES: Final = 64 * 1024
#: The most response bytes one exchange may record.
DEFAULT_MAX_EXCHANGE_BYTES: Final = 64 * 1024 * 1024
#: What a request that matches nothing is told (400: no client retries it).
_MISMATCH_STATUS: Final = 400


class CassetteMismatch(AssertionError):
    """A request matched no recorded exchange; the message diffs it against the nearest one."""


@attrs.define(eq=False)
class _Link:
    """One upstream connection to the target, kept for the client connection that opened it."""

    stream: trio.abc.Stream
    conn: h11.Connection


def _now_since(t0: float) -> float:
    return trio.current_time() - t0


def _head_end(data: bytes, heads: int) -> int:
    """Where the `heads`-th head (1xx heads first) ends in `data`; 0 if it does not."""
    end = 0
    for _ in range(max(heads, 1)):
        found = data.find(b"\r\n\r\n", end)
        if found < 0:
            return 0
        end = found + 4
    return end


@attrs.define(eq=False, repr=False)
class Cassette:
    """An open cassette: where to point the adapter (`base_url`) and what happened.

    Built by `cassette`; not constructed directly. `exchanges` are the ones
    read from the file, `recorded` the ones recorded in this session (in the
    order their requests arrived), `mismatches` one report per request that
    matched nothing.
    """

    path: Path
    mode: CassetteMode
    target: str | None
    exchanges: list[Exchange]
    _record: bool
    _replay: bool
    _secrets: tuple[str, ...]
    _secret_headers: frozenset[str]
    _secret_query: frozenset[str]
    _match_on: tuple[str, ...]
    _time_scale: float
    _ssl_context: ssl.SSLContext | None
    _max_exchange_bytes: int
    _connect_timeout: float
    _nursery: trio.Nursery
    mismatches: list[str] = attrs.field(init=False, factory=list)
    _slots: list[Exchange | None] = attrs.field(init=False, factory=list)
    _played: set[int] = attrs.field(init=False, factory=set)
    _links: dict[int, _Link] = attrs.field(init=False, factory=dict)
    _watched: set[int] = attrs.field(init=False, factory=set)
    _errors: list[CassetteError] = attrs.field(init=False, factory=list)
    _upstream: Upstream | None = attrs.field(init=False, default=None)

    def __repr__(self) -> str:
        # Never the secrets it holds, nor every exchange.
        return (
            f"Cassette(path={str(self.path)!r}, mode={self.mode!r}, "
            f"exchanges={len(self.exchanges)}, recorded={len(self.recorded)}, "
            f"played={self.played}, mismatches={len(self.mismatches)})"
        )

    @property
    def base_url(self) -> str:
        """The adapter's ``base_url``: this cassette's loopback address, with the target's path."""
        assert self._upstream is not None
        return self._upstream.base_url + self._target_path

    @property
    def upstream(self) -> Upstream:
        """The local upstream serving the cassette: its requests and connections."""
        assert self._upstream is not None
        return self._upstream

    @property
    def recorded(self) -> list[Exchange]:
        """The exchanges recorded in this session, in the order their requests arrived."""
        return [e for e in self._slots if e is not None]

    @property
    def played(self) -> int:
        """How many recorded exchanges were replayed."""
        return len(self._played)

    @property
    def _target_path(self) -> str:
        return urllib.parse.urlsplit(self.target).path.rstrip("/") if self.target else ""

    def _origin(self) -> str:
        if self.target:
            split = urllib.parse.urlsplit(self.target)
            return f"{split.scheme}://{split.netloc}"
        for exchange in self.exchanges:
            split = urllib.parse.urlsplit(exchange.request.url)
            return f"{split.scheme}://{split.netloc}"
        return "http://127.0.0.1"

    def _scrubber(self) -> Scrubber:
        return Scrubber(self._secrets, headers=self._secret_headers, query=self._secret_query)

    def _forwarded_headers(self, request: RecordedRequest) -> list[tuple[str, str]]:
        """The request's headers as they go to the target: its own ``Host``, the rest as sent."""
        host = urllib.parse.urlsplit(self._origin()).netloc
        return [("host", host)] + [(n, v) for n, v in request.headers.items_raw if n != "host"]

    # ---- routing: each request gets a replay, a recording or a refusal ------------------------

    def _route(self, request: RecordedRequest) -> Script:
        scrub = self._scrubber()
        headers = self._forwarded_headers(request)
        scrub.harvest(headers, request.target)
        url = self._origin() + request.target
        asked = scrub.request(request.method, url, headers, request.body)
        if self._replay:
            matching = [
                i
                for i, e in enumerate(self.exchanges)
                if request_matches(asked, e.request, self._match_on)
            ]
            for i in matching:
                if i not in self._played:
                    self._played.add(i)
                    return HostileScript("cassette-replay", functools.partial(self._play, i))
        else:
            matching = []
        if self._record:
            slot = len(self._slots)
            self._slots.append(None)
            serve = functools.partial(self._forward, slot, scrub, asked, headers)
            return HostileScript("cassette-record", serve)
        report = mismatch_report(
            asked, [e.request for e in self.exchanges], len(matching), self._match_on
        )
        self.mismatches.append(report)
        message = f"llmrt cassette: {report.splitlines()[0]} (see the test's cassette report)"
        return ErrorScript(
            _MISMATCH_STATUS, body={"error": {"message": message, "type": "cassette_mismatch"}}
        )

    # ---- replay ----------------------------------------------------------------------------------

    async def _play(self, index: int, stream: trio.abc.Stream, request: RecordedRequest) -> Outcome:
        exchange = self.exchanges[index]
        t0 = request.received_at
        scale = self._time_scale
        for read in exchange.reads:
            await trio.sleep_until(t0 + read.at * scale)
            await stream.send_all(read.data)
        await trio.sleep_until(t0 + exchange.end.at * scale)
        match exchange.end.kind:
            case "stall":
                await trio.sleep_forever()  # until the client leaves: the server cancels us
            case "keep-alive" | "close" | "reset" as kind:
                return kind
        raise AssertionError("unreachable")  # pragma: no cover

    # ---- record ----------------------------------------------------------------------------------

    async def _connect(self) -> _Link:
        assert self.target is not None
        split = urllib.parse.urlsplit(self.target)
        tls = split.scheme == "https"
        host = split.hostname or "127.0.0.1"
        port = split.port or (443 if tls else 80)
        with trio.fail_after(self._connect_timeout):
            stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
            if tls:
                context = self._ssl_context or ssl.create_default_context()
                stream = trio.SSLStream(
                    stream, context, server_hostname=host, https_compatible=True
                )
                await stream.do_handshake()
        return _Link(stream, h11.Connection(h11.CLIENT))

    def _park(self, connection: int, link: _Link) -> None:
        """Keep `link` for the connection's next request; close it when that connection closes."""
        self._links[connection] = link
        if connection not in self._watched and self._upstream is not None:
            self._watched.add(connection)
            record = self._upstream.connections[connection]
            self._nursery.start_soon(self._close_with, connection, record)

    async def _close_with(self, connection: int, record: ConnectionRecord) -> None:
        try:
            await record.closed.wait()
        finally:
            link = self._links.pop(connection, None)
            if link is not None:
                await trio.aclose_forcefully(link.stream)

    async def _forward(
        self,
        slot: int,
        scrub: Scrubber,
        asked: Request,
        headers: list[tuple[str, str]],
        stream: trio.abc.Stream,
        request: RecordedRequest,
    ) -> Outcome:
        t0 = request.received_at
        reads: list[tuple[float, bytes]] = []
        kind: EndKind = "stall"
        end_at: float | None = None
        status: int | None = None
        response_headers: list[tuple[str, str]] | None = None
        informational = 0
        link = self._links.pop(request.connection, None)
        keep = False
        try:
            try:
                if link is None or link.conn.our_state is not h11.IDLE:
                    if link is not None:
                        await trio.aclose_forcefully(link.stream)
                    link = await self._connect()
                out = link.conn.send(
                    h11.Request(method=request.method, target=request.target, headers=headers)
                )
                out = (out or b"") + (link.conn.send(h11.Data(data=request.body)) or b"")
                out += link.conn.send(h11.EndOfMessage()) or b""
                await link.stream.send_all(out)
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, h11.LocalProtocolError):
                # The target refused or dropped the request: the client sees a close, unanswered.
                kind, end_at = "close", _now_since(t0)
                return "close"
            parsing, total = True, 0
            while True:
                try:
                    data = bytes(await link.stream.receive_some(_RECEIVE_BYTES))
                except trio.BrokenResourceError:
                    kind, end_at = "reset", _now_since(t0)
                    return "reset"
                if not data:
                    kind, end_at = "close", _now_since(t0)
                    return "close"
                at = _now_since(t0)
                reads.append((at, data))
                total += len(data)
                if total > self._max_exchange_bytes:
                    self._errors.append(
                        CassetteError(
                            "TOO_LARGE",
                            f"{request.method} {request.target}: the response passed "
                            f"{self._max_exchange_bytes} bytes; recording stopped",
                        )
                    )
                    kind, end_at = "close", at
                    return "close"
                await stream.send_all(data)  # the client gone: the server sees to it
                if not parsing:
                    continue
                try:
                    link.conn.receive_data(data)
                    while (event := link.conn.next_event()) is not h11.NEED_DATA:
                        if isinstance(event, h11.InformationalResponse):
                            informational += 1
                        elif isinstance(event, h11.Response):
                            status = event.status_code
                            response_headers = [
                                (n.decode("latin-1"), v.decode("latin-1")) for n, v in event.headers
                            ]
                        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                            break
                except h11.RemoteProtocolError:
                    parsing = False  # relayed as it comes, to the end, like any other bytes
                    continue
                if link.conn.their_state is h11.DONE and link.conn.our_state is h11.DONE:
                    link.conn.start_next_cycle()
                    kind, end_at, keep = "keep-alive", at, True
                    return "keep-alive"
        finally:
            # Bookkeeping first, with no checkpoint: a client that left cancels us here.
            self._slots[slot] = self._exchange(
                scrub,
                asked,
                request.connection,
                reads,
                End(kind, _now_since(t0) if end_at is None else end_at),
                status,
                response_headers,
                informational,
            )
            if keep and link is not None:
                self._park(request.connection, link)
            elif link is not None:
                await trio.aclose_forcefully(link.stream)

    def _exchange(
        self,
        scrub: Scrubber,
        asked: Request,
        connection: int,
        reads: list[tuple[float, bytes]],
        end: End,
        status: int | None,
        headers: list[tuple[str, str]] | None,
        informational: int,
    ) -> Exchange:
        whole = b"".join(data for _, data in reads)
        masked = scrub.response(whole, _head_end(whole, informational + 1))
        cut, offset = [], 0
        for at, data in reads:
            cut.append(make_read(at, masked[offset : offset + len(data)]))
            offset += len(data)
        shown = None
        if headers is not None:
            shown = [
                (n, REDACTED)
                if n.lower() in self._secret_headers
                else (n, scrub.mask(v.encode("latin-1")).decode("latin-1"))
                for n, v in headers
            ]
        return Exchange(
            version=FORMAT_VERSION,
            request=asked,
            response=Response(status=status, headers=shown),
            reads=cut,
            end=end,
            connection=connection,
        )

    # ---- the end of the block --------------------------------------------------------------------

    def _problem(self) -> CassetteError | CassetteMismatch | None:
        """What the block must fail with: a recording error, a router failure, a mismatch."""
        if self._errors:
            return self._errors[0]
        if self._upstream is not None and self._upstream.errors:
            return CassetteError(
                "USAGE", f"{self.path}: the router failed: {self._upstream.errors}"
            )
        if self.mismatches:
            return CassetteMismatch(f"{self.path}:\n" + "\n\n".join(self.mismatches))
        return None

    async def _save(self) -> None:
        recorded = self.recorded
        if not recorded:
            return
        kept = self.exchanges if self.mode == "new_episodes" else []
        data = b"".join(encode_exchange(e) for e in [*kept, *recorded])
        path = trio.Path(self.path)
        await path.parent.mkdir(parents=True, exist_ok=True)
        temporary = trio.Path(f"{self.path}.tmp")
        await temporary.write_bytes(data)
        await temporary.replace(path)


def _check(mode: str, match_on: Iterable[str], time_scale: float) -> tuple[str, ...]:
    if mode not in get_args(CassetteMode):
        raise CassetteError("USAGE", f"mode must be one of {get_args(CassetteMode)}, not {mode!r}")
    fields = tuple(match_on)
    if unknown := set(fields) - MATCH_FIELDS:
        raise CassetteError(
            "USAGE", f"cannot match on {sorted(unknown)}; use {sorted(MATCH_FIELDS)}"
        )
    if not time_scale >= 0:
        raise CassetteError("USAGE", "time_scale must be a non-negative number")
    return fields


@asynccontextmanager
async def cassette(
    path: str | os.PathLike[str],
    *,
    target: str | None = None,
    mode: CassetteMode = "once",
    secrets: Iterable[str | None] = (),
    secret_headers: Collection[str] = SECRET_HEADERS,
    secret_query: Collection[str] = SECRET_QUERY,
    match_on: Iterable[str] = MATCH_ON,
    time_scale: float = 1.0,
    ssl_context: ssl.SSLContext | None = None,
    max_exchange_bytes: int = DEFAULT_MAX_EXCHANGE_BYTES,
    connect_timeout: float = 10.0,
) -> AsyncIterator[Cassette]:
    """Open the cassette at `path` for the block; yield it. Point the adapter at `base_url`.

    `target` is the provider's base URL the adapter would otherwise use
    (``https://api.openai.com/v1``): requests are recorded from it, and
    `Cassette.base_url` keeps its path. `mode` is a `CassetteMode`. `secrets` are
    values to remove besides those the requests carry under `secret_headers`
    and `secret_query`. Requests match recorded ones on `match_on` (a subset
    of ``method``, ``host``, ``path`` (with the query), ``body`` (JSON
    compared as values), ``headers``), each recorded exchange playing once, in
    order. Replayed reads keep their offsets times `time_scale`.

    Raises `CassetteError` when the file is missing in mode ``none``
    (``NOT_FOUND``), unreadable (``FORMAT``), when a request must be recorded
    without a `target` (``NO_TARGET``) or an exchange passes
    `max_exchange_bytes` (``TOO_LARGE``); `CassetteMismatch` at the end of the
    block if a request matched nothing. The file is written at the end of the
    block, whatever the block raised.
    """
    fields = _check(mode, match_on, time_scale)
    where = Path(path)
    exists = await trio.Path(where).exists()
    if mode == "none" and not exists:
        raise CassetteError(
            "NOT_FOUND", f"{where}: no such cassette, and mode 'none' never records"
        )
    loaded = []
    if exists and mode != "all":
        loaded = decode_cassette(await trio.Path(where).read_bytes(), source=str(where))
    record = mode in ("all", "new_episodes") or (mode == "once" and not exists)
    replay = mode != "all" and exists
    if record and not target:
        raise CassetteError("NO_TARGET", f"{where}: recording needs target= (the provider's URL)")
    tape: Cassette | None = None
    try:
        async with trio.open_nursery() as nursery:
            tape = Cassette(
                path=where,
                mode=mode,
                target=target,
                exchanges=loaded,
                record=record,
                replay=replay,
                secrets=tuple(s for s in secrets if s),
                secret_headers=frozenset(h.lower() for h in secret_headers),
                secret_query=frozenset(q.lower() for q in secret_query),
                match_on=fields,
                time_scale=time_scale,
                ssl_context=ssl_context,
                max_exchange_bytes=max_exchange_bytes,
                connect_timeout=connect_timeout,
                nursery=nursery,
            )
            serve = functools.partial(serve_upstream, tape._route, script_paths=None)
            tape._upstream = await nursery.start(serve)
            try:
                yield tape
            finally:
                nursery.cancel_scope.cancel()
                with trio.CancelScope(shield=True):
                    await tape._save()
    except BaseException as exc:
        # The cassette's own finding explains the block's failure (a refused request
        # makes the test's assertions fail): raise it, the failure as its context.
        # Never in place of a cancellation.
        problem = tape._problem() if tape is not None else None
        if problem is None or _cancelled(exc):
            raise
        raise problem from exc
    problem = tape._problem()
    if problem is not None:
        raise problem


def _cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(trio.Cancelled) is not None
    return isinstance(exc, trio.Cancelled)
