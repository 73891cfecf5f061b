"""llmrt for asyncio programs: the trio runtime's API on an asyncio loop (``llmrt.aio``).

``async with llmrt.aio.open_runtime() as rt:`` inside ``asyncio.run(...)``
gives the names, arguments, types and chunk objects of `llmrt.open_runtime`;
the runtime's one trio run lives beside the loop (docs/asyncio.md).
"""

from llmrt.actors._misuse import ConcurrentIterationError as ConcurrentIterationError
from llmrt.actors._misuse import NotInAsyncioError as NotInAsyncioError

from ._abort import AbortController as AbortController
from ._abort import AbortSignal as AbortSignal
from ._call import Call as Call
from ._gateway import GatewayClient as GatewayClient
from ._gateway import open_gateway_client as open_gateway_client
from ._host import DEFAULT_HOST as DEFAULT_HOST
from ._host import HostMode as HostMode
from ._runtime import DirectoryHandle as DirectoryHandle
from ._runtime import DiscoveryHandle as DiscoveryHandle
from ._runtime import PreparedCall as PreparedCall
from ._runtime import RegistrationHandle as RegistrationHandle
from ._runtime import Runtime as Runtime
from ._runtime import open_runtime as open_runtime
from ._updates import Updates as Updates

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
    "Updates",
    "open_gateway_client",
    "open_runtime",
]
