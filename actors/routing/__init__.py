"""Routing: groups of deployments called as one provider (docs/routing.md).

``await rt.register_groups([Group(name="chat", deployments=(...))])`` makes
``chat`` a provider name: ``rt.stream(GenerateOptions(provider="chat", ...))``
picks a deployment by the group's tiers and strategy, checks its cooldown and
budgets first, fails over before the first content chunk (never after), and
says on the finish (`llmrt.Routing`) which deployment served. State is kept
in the process, or in Redis with ``RoutingSettings(redis="redis://...")``.
"""

from .._statistics import DeploymentStatistics as DeploymentStatistics
from .._statistics import GroupStatistics as GroupStatistics
from .._statistics import RoutingStatistics as RoutingStatistics
from .._statistics import SharedStateStatistics as SharedStateStatistics
from ._handle import GroupsHandle as GroupsHandle
from ._routed import RoutedCall as RoutedCall
from ._spec import BUILTIN_STRATEGIES as BUILTIN_STRATEGIES
from ._spec import DEFAULT_FAILOVER_CODES as DEFAULT_FAILOVER_CODES
from ._spec import Deployment as Deployment
from ._spec import Group as Group
from ._spec import RoutingSettings as RoutingSettings
from ._state import DeploymentState as DeploymentState
from ._strategies import FewestInFlight as FewestInFlight
from ._strategies import LowestLatency as LowestLatency
from ._strategies import MostHeadroom as MostHeadroom
from ._strategies import Ordered as Ordered
from ._strategies import Strategy as Strategy
from ._strategies import Weighted as Weighted

__all__ = [
    "BUILTIN_STRATEGIES",
    "DEFAULT_FAILOVER_CODES",
    "Deployment",
    "DeploymentState",
    "DeploymentStatistics",
    "FewestInFlight",
    "Group",
    "GroupStatistics",
    "GroupsHandle",
    "LowestLatency",
    "MostHeadroom",
    "Ordered",
    "RoutedCall",
    "RoutingSettings",
    "RoutingStatistics",
    "SharedStateStatistics",
    "Strategy",
    "Weighted",
]
