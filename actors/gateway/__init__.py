"""The websocket gateway: serves an `LlmRuntime`'s calls to remote clients.

    async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
        server = await nursery.start(serve_gateway, rt, "127.0.0.1", 8765)
        ...  # clients connect to server.url; see docs/protocol.md

The Python client is `llmrt.actors.gateway.client.open_gateway_client`.
"""

from ._protocol import JSON_SUBPROTOCOL as JSON_SUBPROTOCOL
from ._protocol import MSGPACK_SUBPROTOCOL as MSGPACK_SUBPROTOCOL
from ._protocol import PROTOCOL as PROTOCOL
from ._protocol import GatewayErrorCode as GatewayErrorCode
from ._protocol import Limits as Limits
from ._protocol import ReloadReport as ReloadReport
from ._protocol import WorkerReload as WorkerReload
from ._server import GatewayServer as GatewayServer
from ._server import serve_gateway as serve_gateway

__all__ = [
    "JSON_SUBPROTOCOL",
    "MSGPACK_SUBPROTOCOL",
    "PROTOCOL",
    "GatewayErrorCode",
    "GatewayServer",
    "Limits",
    "ReloadReport",
    "WorkerReload",
    "serve_gateway",
]
