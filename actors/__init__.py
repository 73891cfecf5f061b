"""llmrt's actors: the runtime facade, registry, registrations and calls."""

from ._abort import AbortController as AbortController
from ._abort import AbortSignal as AbortSignal
from ._call import Call as Call
from ._call import Middleware as Middleware
from ._call import Next as Next
from ._misuse import CallNotEnteredError as CallNotEnteredError
from ._misuse import NotInTrioError as NotInTrioError
from ._pricing import ModelPrice as ModelPrice
from ._registry import DirectoryHandle as DirectoryHandle
from ._registry import DiscoveryHandle as DiscoveryHandle
from ._registry import RegistrationHandle as RegistrationHandle
from ._runtime import LlmRuntime as LlmRuntime
from ._runtime import PreparedCall as PreparedCall
from ._runtime import open_runtime as open_runtime
from ._runtime import retry_policy_of as retry_policy_of
from ._statistics import ConnectionPool as ConnectionPool
from ._statistics import FinishedCount as FinishedCount
from ._statistics import GatewayStatistics as GatewayStatistics
from ._statistics import HistogramSnapshot as HistogramSnapshot
from ._statistics import ModelCost as ModelCost
from ._statistics import ModelHistogram as ModelHistogram
from ._statistics import ProviderStatistics as ProviderStatistics
from ._statistics import RuntimeStatistics as RuntimeStatistics

__all__ = [
    "AbortController",
    "AbortSignal",
    "Call",
    "CallNotEnteredError",
    "ConnectionPool",
    "DirectoryHandle",
    "DiscoveryHandle",
    "FinishedCount",
    "GatewayStatistics",
    "HistogramSnapshot",
    "LlmRuntime",
    "Middleware",
    "ModelCost",
    "ModelHistogram",
    "ModelPrice",
    "Next",
    "NotInTrioError",
    "PreparedCall",
    "ProviderStatistics",
    "RegistrationHandle",
    "RuntimeStatistics",
    "open_runtime",
    "retry_policy_of",
]
