"""The immutable topology snapshot the registry publishes and the hot path reads."""

from __future__ import annotations

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

    @property
    def registrations(self) -> frozenset[Registration]:
        return frozenset(route.registration for route in self.routes.values())


EMPTY_TOPOLOGY = Topology(
    version=0, routes=MappingProxyType({}), configurable=(), discovery=MappingProxyType({})
)
