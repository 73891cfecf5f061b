"""The adapter contract every provider implementation fulfils."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence

from ._chunks import StreamChunk
from ._deadlines import RuntimeServices
from ._image_route import ImageRequestPolicy, ImageRequestPricing
from ._redact import Redactor
from ._request import GenerateOptions, ModelInfo, ProviderInfo, ResolvedModelInfo
from ._retry import ResolvedRetryPolicy

__all__ = ["Adapter"]


class Adapter(abc.ABC):
    """Turns one provider's wire format into llmrt chunks.

    Only `stream` is required. The rules every adapter obeys:

    * one `stream` call is one provider attempt (no library retries);
    * ``usage`` comes before the terminal ``finish`` and nothing follows it;
    * tool-call arguments stay raw JSON strings;
    * a failure either raises (ideally `LlmError`) or ends the stream with an
      ``error``/``aborted`` finish carrying an `LlmFailure`;
    * every HTTP request carries `attribution_headers()`;
    * no secret it holds reaches a log line or a ``repr``, and it declares
      its keys (build a `Redactor` from them and override `redactor`): the
      runtime removes them from every failure of its calls.

    Cancellation is structured: the runtime iterates `stream` in its own task
    and cancels it, then closes the iterator, so an adapter releases its
    resources in ``finally`` / ``async with`` blocks and needs no signal.

    An adapter instance belongs to one registration; the runtime calls
    `aclose` once after that registration's last call has ended.
    """

    @abc.abstractmethod
    def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        """Stream one model call as raw chunks (usually an async generator)."""

    def provider_info(self, provider: str) -> ProviderInfo:
        """Display metadata of one route this adapter owns; ``id`` must equal ``provider``."""
        return ProviderInfo(id=provider, name=provider)

    def provider_retry_policy(self, provider: str) -> ResolvedRetryPolicy | None:
        """The retry policy of one route, or ``None`` for the normal defaults."""
        return None

    async def list_models(self, provider: str) -> Sequence[ModelInfo]:
        """Models this adapter advertises for one route (advisory). Default: none."""
        return ()

    async def resolve_model(self, provider: str, model: str) -> ResolvedModelInfo:
        """Everything known about one exact model. Default: identity only (nothing known)."""
        return ResolvedModelInfo(provider=provider, id=model, name=model)

    def redactor(self) -> Redactor:
        """What removes this adapter's secrets (its API keys) from failure messages.

        The runtime applies it, once, to the failure of every call this
        adapter serves, raised or in an ``error``/``aborted`` finish, where
        the call receives it: before middleware, consumers or gateway frames
        see it (the one redaction point). Default: credential-looking
        phrases only.
        Not a checkpoint; never raises.
        """
        return Redactor()

    def connection_counts(self) -> tuple[int, int] | None:
        """Upstream connections this adapter holds now: (open, of which idle in its pool).

        None (the default) when it keeps none or cannot tell. Metrics read it
        at scrape time: it must be cheap and do no I/O.
        """
        return None

    def request_features(self, provider: str, model: str) -> frozenset[str]:
        """The optional request features this adapter sends for one route and model.

        Names from ``llmrt.vocabulary.REQUEST_FEATURES`` (``tool-choice``, ``json-schema``,
        ``json-object``, ``strict-tools``). The runtime refuses a request that
        needs a feature not listed here with ``INVALID_REQUEST`` before
        `stream` is called, so nothing is dropped silently. Default: none.
        Synchronous and without I/O; asked only of requests that need a feature.
        """
        return frozenset()

    def image_request_policy(self, provider: str, model: str) -> ImageRequestPolicy | None:
        """How one route takes images: the version it wants and what it leaves out.

        The runtime applies it before `stream` on image-capable models: the
        oldest images past the offload limits become placeholders, and each
        durable attachment becomes the host store's version for the target
        (inline ``data`` with its ``variant_id``). None (the default): the
        stored originals, no limits. Synchronous and without I/O.
        """
        return None

    def image_request_pricing(self, provider: str, model: str) -> ImageRequestPricing | None:
        """The visual-token pricing of one route, for a token meter; None: it charges none.

        Declared by adapters whose provider bills images as input tokens. The
        runtime resolves it synchronously (`LlmRuntime.image_request_pricing`)
        and fills in the route's `image_request_policy`, so the price
        reproduces the route's own offload decision. Synchronous and without I/O.
        """
        return None

    def attach_runtime(self, services: RuntimeServices) -> None:  # noqa: B027 - optional hook
        """Receive the runtime's services while a registration holds this adapter.

        Called by the registration once, before its first call: ``services``
        carries a nursery for the adapter's background tasks and a running
        `DeadlineHeap` for its timeouts (the HTTP adapters' transport watches
        its read deadlines there). An adapter used without a runtime is never
        attached and must work as well (it then keeps its own timers). Not a
        checkpoint. Default: nothing to use.
        """

    def detach_runtime(self) -> None:  # noqa: B027 - optional hook, empty by default
        """The services end: called once, after the registration's last call and before `aclose`."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Release the adapter's resources (HTTP clients, ...). Default: nothing to release."""
