"""What implementing an `Adapter` needs beyond the vocabulary.

The contract itself is `llmrt.Adapter` (``docs/adapters.md``). An adapter
describes its models (`ModelContext`, `ModelModality`, `ModelReasoningInfo`,
`ReasoningEffortInfo` inside `llmrt.ResolvedModelInfo`) and its providers
(`ProviderInfo`); a host offers configurable providers and model discovery
(`ConfigurableProvider`, `ModelDiscoveryRequest`, `DiscoveredModel`). An
adapter that holds a secret returns a `Redactor` for it (`REDACTED`,
`looks_like_secret`), names itself on every request (`attribution_headers`,
`app_identity`, `AppIdentity`), may register a close to run at the stop
(`close_on_stop`), and receives the runtime's services while registered
(`RuntimeServices`: a nursery, a `DeadlineHeap`; `Adapter.attach_runtime`).
Request features and block-type checks are in `llmrt.vocabulary`, images
in `llmrt.images`.
"""

from ._adapter import Adapter as Adapter
from ._deadlines import DeadlineHeap as DeadlineHeap
from ._deadlines import RuntimeServices as RuntimeServices
from ._identity import AppIdentity as AppIdentity
from ._identity import app_identity as app_identity
from ._identity import attribution_headers as attribution_headers
from ._redact import REDACTED as REDACTED
from ._redact import Redactor as Redactor
from ._redact import looks_like_secret as looks_like_secret
from ._request import ConfigurableProvider as ConfigurableProvider
from ._request import DiscoveredModel as DiscoveredModel
from ._request import ModelContext as ModelContext
from ._request import ModelDiscoveryRequest as ModelDiscoveryRequest
from ._request import ModelModality as ModelModality
from ._request import ModelReasoningInfo as ModelReasoningInfo
from ._request import ProviderInfo as ProviderInfo
from ._request import ReasoningEffortInfo as ReasoningEffortInfo
from ._stop_hooks import close_on_stop as close_on_stop

__all__ = [
    "REDACTED",
    "Adapter",
    "AppIdentity",
    "ConfigurableProvider",
    "DeadlineHeap",
    "DiscoveredModel",
    "ModelContext",
    "ModelDiscoveryRequest",
    "ModelModality",
    "ModelReasoningInfo",
    "ProviderInfo",
    "ReasoningEffortInfo",
    "Redactor",
    "RuntimeServices",
    "app_identity",
    "attribution_headers",
    "close_on_stop",
    "looks_like_secret",
]
