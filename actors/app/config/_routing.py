"""``[[group]]`` and ``[routing]`` of ``llmrt.toml``: routing groups from the file. Pure: no I/O.

The tables decode straight into `llmrt.actors.routing.Group` and
`RoutingSettings` (the schema, with ``forbid_unknown_fields``, is theirs);
`check_routing` applies the checks types cannot express, the same ones
`LlmRuntime.register_groups` applies (`groups_problem`), against every
route the configuration registers, and reports each at its line
(`_register.register_config` registers the groups after the routes).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from ...routing import BUILTIN_STRATEGIES, Group, RoutingSettings
from ...routing._spec import groups_problem, settings_problem
from ._schema import Path

__all__ = ["check_routing"]


def check_routing(
    error: Callable[[Path, str], Exception],
    groups: Sequence[Group],
    settings: RoutingSettings,
    routes: Collection[str],
) -> tuple[tuple[Group, ...], RoutingSettings]:
    """The file's groups and routing settings, checked; raises ``error(path, reason)``."""
    problem = groups_problem(groups, routes=routes, taken=(), strategies=BUILTIN_STRATEGIES)
    if problem is None:
        problem = settings_problem(settings)
    if problem is not None:
        raise error(*problem)
    return tuple(groups), settings
