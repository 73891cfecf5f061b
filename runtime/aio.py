"""llmrt for asyncio programs: ``async with llmrt.aio.open_runtime() as rt:`` (docs/asyncio.md).

The same API as the trio one (`llmrt.open_runtime`), the same chunk
objects; the runtime stays a trio program, run beside the asyncio loop.
Imported on first use (``import llmrt.aio``), so a trio program never loads it.
"""

from __future__ import annotations

from llmrt.actors.aio import DEFAULT_HOST as DEFAULT_HOST
from llmrt.actors.aio import AbortController as AbortController
from llmrt.actors.aio import AbortSignal as AbortSignal
from llmrt.actors.aio import Call as Call
from llmrt.actors.aio import ConcurrentIterationError as ConcurrentIterationError
from llmrt.actors.aio import DirectoryHandle as DirectoryHandle
from llmrt.actors.aio import DiscoveryHandle as DiscoveryHandle
from llmrt.actors.aio import GatewayClient as GatewayClient
from llmrt.actors.aio import HostMode as HostMode
from llmrt.actors.aio import NotInAsyncioError as NotInAsyncioError
from llmrt.actors.aio import PreparedCall as PreparedCall
from llmrt.actors.aio import RegistrationHandle as RegistrationHandle
from llmrt.actors.aio import Runtime as Runtime
from llmrt.actors.aio import open_gateway_client as open_gateway_client
from llmrt.actors.aio import open_runtime as open_runtime

__all__ = [
    "DEFAULT_HOST",
    "AbortController",
    "AbortSignal",
    "Call",
    "ConcurrentIterationError",
    "DirectoryHandle",
    "DiscoveryHandle",
    "GatewayClient",
    "HostMode",
    "NotInAsyncioError",
    "PreparedCall",
    "RegistrationHandle",
    "Runtime",
    "open_gateway_client",
    "open_runtime",
]
