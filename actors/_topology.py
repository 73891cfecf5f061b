"""The immutable topology snapshot the registry publishes and the hot path reads."""

from __future__ import annotations

import difflib
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType

import attrs

from llmrt._request import (
    ConfigurableProvider,
    DiscoveredModel,
    ModelDiscoveryRequest,
    ProviderInfo,
)
from llmrt._retry import ResolvedRetryPolicy

from ._registration import Registration

__all__ = ["Route", "Topology", "Discover", "EMPTY_TOPOLOGY", "check_provider_name"]

Discover = Callable[[ModelDiscoveryRequest], Awaitable[Sequence[DiscoveredModel]]]

#: Routes a ``NO_ADAPTER`` message lists; the rest are counted.
_LISTED_ROUTES = 12
#: Names a ``NO_ADAPTER`` suggestion is chosen from: the failure path stays cheap
#: however many routes there are (a gateway client can ask for any name).
_SUGGEST_FROM = 1000

#: Route names: letters, digits and ``._:-``, starting with a letter or digit, at most 128.
_PROVIDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def check_provider_name(name: object) -> str | None:
    """Why ``name`` is not a valid provider route name, or None when it is."""
    if not isinstance(name, str):
        return f"a provider route name must be a string, not {type(name).__name__}"
    if not _PROVIDER_NAME.fullmatch(name):
        return (
            f"invalid provider route name {name!r}: use 1-128 letters, digits, '.', '_', ':' "
            "or '-', starting with a letter or digit"
        )
    return None


@attrs.frozen
class Route:
    """One provider route: who serves it, its display metadata, its captured retry policy."""

    provider: str
    info: ProviderInfo
    registration: Registration
    retry_policy: ResolvedRetryPolicy
    #: Seconds a call may wait for its adapter's next chunk.
    idle_timeout: float


@attrs.frozen
class Topology:
    """What is registered, as of one registry commit. Never mutated once published."""

    version: int
    #: Routes in registration order.
    routes: Mapping[str, Route]
    configurable: tuple[ConfigurableProvider, ...]
    discovery: Mapping[str, Discover]
    #: Registrations the registry holds, routed or not (one with no routes counts).
    registration_count: int = 0

    @property
    def registrations(self) -> frozenset[Registration]:
        return frozenset(route.registration for route in self.routes.values())

    def no_adapter_message(self, provider: str) -> str:
        """Why no adapter serves ``provider``, and what would: the ``NO_ADAPTER`` message.

        Names the registered routes (the first few), the closest registered
        name, and, when the directory knows a key variable that registers
        ``provider`` (or a close name), that variable. Only names: route
        names, and environment variable names, never their values.
        """
        shown = provider if len(provider) <= 128 else provider[:128] + "..."
        message = f"no adapter is registered for provider {shown!r}"
        dormant = {e.provider: e.key_env for e in self.configurable if e.key_env}
        hint = dormant.get(provider)
        names = list(self.routes)
        if hint is not None:
            message += f"; set {hint} to register it"
        elif check_provider_name(provider) is None:
            close = difflib.get_close_matches(provider, names[:_SUGGEST_FROM], n=1)
            if close:
                message += f"; did you mean {close[0]!r}?"
            else:
                close = difflib.get_close_matches(provider, list(dormant)[:_SUGGEST_FROM], n=1)
                if close:
                    message += (
                        f"; did you mean {close[0]!r} (set {dormant[close[0]]} to register it)?"
                    )
        if not names:
            return message + " (no provider is registered)"
        listed = ", ".join(names[:_LISTED_ROUTES])
        more = len(names) - _LISTED_ROUTES
        return message + f" (registered: {listed}{f' and {more} more' if more > 0 else ''})"


EMPTY_TOPOLOGY = Topology(
    version=0, routes=MappingProxyType({}), configurable=(), discovery=MappingProxyType({})
)
