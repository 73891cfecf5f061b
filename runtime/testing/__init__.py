"""Test and benchmark helpers: a local upstream server speaking provider SSE over loopback.

    async with open_upstream(SSEScript(events=openai_events(["Hi", "!"]))) as upstream:
        async with httpx.AsyncClient(base_url=upstream.base_url) as client:
            ...
        await upstream.wait_all_closed()

Scripts (`SSEScript`, `ErrorScript`) say what to send; a route is one
script, a sequence of scripts consumed in order, or a router function.
`hostile(name)` is a script committing one of the named misbehaviours in
`MISBEHAVIOURS` (endless heads, gzip bombs, echoed keys, resets, ...), for
testing that a host survives a hostile upstream. Requests are parsed and
well-formed responses framed by h11, not by llmrt's own HTTP codec.
`Upstream` records every request and connection and lets a test wait for a
connection to close, which is how an abort is proved to reach the socket.
`cassette(path, target=..., mode=...)` records a provider's exchanges at the
wire once and replays them offline through the same server (docs/testing.md).
"""

from __future__ import annotations

from ._cassette import Cassette as Cassette
from ._cassette import CassetteMismatch as CassetteMismatch
from ._cassette import CassetteMode as CassetteMode
from ._cassette import cassette as cassette
from ._events import OPENAI_DONE as OPENAI_DONE
from ._events import anthropic_events as anthropic_events
from ._events import openai_events as openai_events
from ._events import sse_comment as sse_comment
from ._events import sse_data as sse_data
from ._events import sse_event as sse_event
from ._hostile import MISBEHAVIOURS as MISBEHAVIOURS
from ._hostile import SECRET_PHRASINGS as SECRET_PHRASINGS
from ._hostile import Misbehaviour as Misbehaviour
from ._hostile import hostile as hostile
from ._records import ConnectionRecord as ConnectionRecord
from ._records import Headers as Headers
from ._records import RecordedRequest as RecordedRequest
from ._scripts import ErrorScript as ErrorScript
from ._scripts import EventLike as EventLike
from ._scripts import HostileScript as HostileScript
from ._scripts import Script as Script
from ._scripts import SSEScript as SSEScript
from ._scripts import split_events as split_events
from ._server import DEFAULT_MODELS as DEFAULT_MODELS
from ._server import DEFAULT_SCRIPT_PATHS as DEFAULT_SCRIPT_PATHS
from ._server import Route as Route
from ._server import Router as Router
from ._server import Upstream as Upstream
from ._server import open_upstream as open_upstream
from ._server import serve_upstream as serve_upstream
from ._tape import FORMAT_VERSION as FORMAT_VERSION
from ._tape import CassetteError as CassetteError
from ._tape import End as End
from ._tape import Exchange as Exchange
from ._tape import Read as Read
from ._tape import decode_cassette as decode_cassette
from ._tape import encode_exchange as encode_exchange

__all__ = [
    "FORMAT_VERSION",
    "Cassette",
    "CassetteError",
    "CassetteMismatch",
    "CassetteMode",
    "End",
    "Exchange",
    "Read",
    "cassette",
    "decode_cassette",
    "encode_exchange",
    "DEFAULT_MODELS",
    "DEFAULT_SCRIPT_PATHS",
    "OPENAI_DONE",
    "ConnectionRecord",
    "ErrorScript",
    "EventLike",
    "Headers",
    "HostileScript",
    "MISBEHAVIOURS",
    "Misbehaviour",
    "RecordedRequest",
    "SECRET_PHRASINGS",
    "Route",
    "Router",
    "SSEScript",
    "Script",
    "Upstream",
    "anthropic_events",
    "open_upstream",
    "openai_events",
    "serve_upstream",
    "hostile",
    "split_events",
    "sse_comment",
    "sse_data",
    "sse_event",
]
