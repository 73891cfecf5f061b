"""llmrt's actors: the runtime facade, registry, registrations and calls."""

from ._abort import AbortController as AbortController
from ._abort import AbortSignal as AbortSignal
from ._call import Call as Call
from ._call import Middleware as Middleware
from ._call import Next as Next
from ._misuse import CallNotEnteredError as CallNotEnteredError
from ._misuse import NotInTrioError as NotInTrioError
from ._registry import DirectoryHandle as DirectoryHandle
from ._registry import DiscoveryHandle as DiscoveryHandle
from ._registry import RegistrationHandle as RegistrationHandle
from ._runtime import LlmRuntime as LlmRuntime
from ._runtime import PreparedCall as PreparedCall
from ._runtime import open_runtime as open_runtime
from ._runtime import retry_policy_of as retry_policy_of
from ._stats import ConnectionPool as ConnectionPool
from ._stats import HistogramSnapshot as HistogramSnapshot
from ._stats import ProviderStatistics as ProviderStatistics
from ._stats import RuntimeStatistics as RuntimeStatistics

__all__ = [
    "AbortController",
    "AbortSignal",
    "Call",
    "CallNotEnteredError",
    "ConnectionPool",
    "DirectoryHandle",
    "DiscoveryHandle",
    "HistogramSnapshot",
    "LlmRuntime",
    "Middleware",
    "Next",
    "NotInTrioError",
    "PreparedCall",
    "ProviderStatistics",
    "RegistrationHandle",
    "RuntimeStatistics",
    "open_runtime",
    "retry_policy_of",
]
