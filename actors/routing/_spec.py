"""Routing groups as values: `Group`, `Deployment`, `RoutingSettings`, and their checks. No I/O.

A group is a name clients call as a provider; it maps to deployments, each a
registered route and a model, with a weight, a priority tier and limits.
The same Structs are the Python API and the ``[[group]]`` / ``[routing]``
tables of ``llmrt.toml`` (``forbid_unknown_fields``: a typo is an error):
in the file a group's deployments are its ``[[group.deployment]]`` tables.

`group_problem` holds every check types cannot express (names, routes,
codes, the context fallback); it returns the path of the offending value
and the reason, so the config loader reports ``FILE:LINE`` and
`LlmRuntime.register_groups` an ``INVALID_PROVIDER`` error, from one place.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Annotated, Literal

import msgspec

from llmrt._errors import ErrorCode

from .._topology import check_provider_name

__all__ = [
    "BUILTIN_STRATEGIES",
    "DEFAULT_FAILOVER_CODES",
    "Deployment",
    "Group",
    "RoutingSettings",
    "group_problem",
    "groups_problem",
    "settings_problem",
]

#: Codes that move a call to the next deployment by default (before any content).
DEFAULT_FAILOVER_CODES: tuple[str, ...] = (
    ErrorCode.RATE_LIMIT,
    ErrorCode.OVERLOADED,
    ErrorCode.SERVER_ERROR,
    ErrorCode.TIMEOUT,
    ErrorCode.NETWORK,
    ErrorCode.EMPTY_RESPONSE,
)
#: The strategies every router knows; an application adds its own by name.
BUILTIN_STRATEGIES: tuple[str, ...] = (
    "ordered",
    "weighted",
    "fewest-in-flight",
    "lowest-latency",
    "most-headroom",
)
#: Codes no policy may fail over on: the caller asked for the end.
_NEVER_FAILED_OVER = frozenset({ErrorCode.ABORTED})

_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
_Seconds = Annotated[float, msgspec.Meta(gt=0)]
_Count = Annotated[int, msgspec.Meta(ge=1)]
_Path = tuple[str | int, ...]


class _Value(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class Deployment(_Value, frozen=True):
    """One deployment of a group: a registered route and the model it is asked for.

    ``weight`` (the ``weighted`` strategy), ``tier`` (1 first; a later tier
    is used only when no deployment of the earlier ones is available), and
    limits checked before dispatch: ``max_in_flight`` calls at once,
    ``rpm`` requests and ``tpm`` tokens per window (a minute by default,
    `Group.window`). A second key for the same provider is a second route.
    """

    route: _Name
    model: _Name
    weight: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    tier: _Count = 1
    max_in_flight: _Count | None = None
    rpm: _Count | None = None
    tpm: _Count | None = None

    @property
    def id(self) -> str:
        """``route/model``: how statistics, metrics and Redis keys name the deployment."""
        return f"{self.route}/{self.model}"


class Group(_Value, frozen=True):
    """A routing group: a provider name whose calls go to one of its deployments.

    A request's ``model`` is the group's choice, whatever the caller sent.
    See docs/routing.md for every setting; times are seconds.
    """

    name: _Name
    #: In the file: the group's ``[[group.deployment]]`` tables.
    deployments: tuple[Deployment, ...] = msgspec.field(default=(), name="deployment")
    #: ``ordered``, ``weighted``, ``fewest-in-flight``, ``lowest-latency``,
    #: ``most-headroom``, or a strategy the application registered by name.
    strategy: _Name = "ordered"
    #: A deployment that sends no chunk within this long is left for the next (None: no deadline).
    first_chunk_timeout: _Seconds | None = None
    #: Failure codes that move a call (before any content) to the next deployment.
    failover_on: tuple[str, ...] = DEFAULT_FAILOVER_CODES
    #: The group a ``CONTEXT_WINDOW_EXCEEDED`` call moves to (a larger context), if any.
    context_fallback: _Name | None = None
    #: Nothing available (all cooling, budgets spent): ``wait`` (bounded) or ``fail`` at once.
    when_unavailable: Literal["wait", "fail"] = "wait"
    #: The longest a call waits for a deployment, then ``RATE_LIMIT`` with the delay.
    max_wait: Annotated[float, msgspec.Meta(ge=0)] = 30.0
    #: Calls that may wait at once (FIFO); one more ends ``RATE_LIMIT`` at once.
    max_queue: Annotated[int, msgspec.Meta(ge=0)] = 1000
    #: A deployment is cooled after ``cooldown_after`` failures within ``cooldown_window``,
    #: or at once on a failure with a provider delay (``Retry-After``).
    cooldown_after: _Count = 3
    cooldown_window: _Seconds = 60.0
    #: The first cooldown; each further one in a row doubles, up to ``max_cooldown``.
    cooldown: _Seconds = 5.0
    max_cooldown: _Seconds = 300.0
    #: The window of ``rpm`` and ``tpm`` (a minute; shorter in tests).
    window: _Seconds = 60.0
    #: ``lowest-latency``: the share of calls sent to another deployment than the fastest.
    explore: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.05
    #: The weight of the newest time to first chunk in the latency average.
    latency_alpha: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.3
    #: Output tokens charged to ``tpm`` before the finish when a request sets no ``max_tokens``.
    output_estimate: Annotated[int, msgspec.Meta(ge=0)] = 1024


class RoutingSettings(_Value, frozen=True):
    """Where routing state lives: in the process (default), or in Redis (``[routing]``).

    ``redis``: ``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://``
    (``rediss+cluster://``) or ``redis+sentinel://HOST:PORT[,HOST:PORT]/SERVICE[/DB]``.
    """

    redis: str | None = None
    #: The prefix of every key (keys of one group share one cluster hash slot).
    key_prefix: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] = "llmrt"
    #: The bound on one Redis round trip; past it the call goes on with local state.
    redis_timeout: _Seconds = 0.25
    #: After Redis failed, calls use local state this long before Redis is tried again.
    redis_retry: _Seconds = 5.0
    #: An in-flight count a process never released (it died) expires after this long.
    in_flight_lease: _Seconds = 600.0
    #: How often a waiting call asks Redis again (other processes free capacity silently).
    redis_poll: _Seconds = 0.25
    #: Seeds the random choices (``weighted``, ``lowest-latency`` exploration): a replayable run.
    seed: int | None = None


def _finite(value: float | None) -> bool:
    return value is None or math.isfinite(value)


def group_problem(
    group: Group,
    index: int,
    *,
    routes: Collection[str],
    groups: Collection[str],
    strategies: Collection[str],
) -> tuple[_Path, str] | None:
    """Why ``group`` (entry ``index`` of a list) cannot be registered, or None.

    ``routes``: the provider routes deployments may name; ``groups``: every
    group name of the new set and of the runtime (fallback targets); names
    in ``strategies`` are known. The path is the file's (``group[i].deployment[j]``).
    """
    at: _Path = ("group", index)
    problem = check_provider_name(group.name)
    if problem is not None:
        return (*at, "name"), problem.replace("provider route name", "group name")
    if group.name in routes:
        return (*at, "name"), f"group {group.name!r} has the name of a provider route"
    if not group.deployments:
        return at, f"group {group.name!r} has no deployment ([[group.deployment]])"
    seen: set[str] = set()
    for n, deployment in enumerate(group.deployments):
        where: _Path = (*at, "deployment", n)
        if deployment.route not in routes:
            known = ", ".join(sorted(routes)[:20]) or "none"
            return (*where, "route"), (
                f"deployment route {deployment.route!r} is not a provider route (known: {known})"
            )
        if deployment.id in seen:
            return where, f"deployment {deployment.id!r} is listed twice in group {group.name!r}"
        seen.add(deployment.id)
        if not math.isfinite(deployment.weight):
            return (*where, "weight"), "weight must be a finite number"
    if group.strategy not in strategies:
        return (*at, "strategy"), (
            f"unknown strategy {group.strategy!r}; known: {', '.join(strategies)}"
        )
    for n, code in enumerate(group.failover_on):
        if code not in ErrorCode.__members__.values():
            return (*at, "failover_on", n), f"unknown error code {code!r}"
        if code in _NEVER_FAILED_OVER:
            return (*at, "failover_on", n), f"{code} never fails over (the caller asked for it)"
    fallback = group.context_fallback
    if fallback is not None and (fallback == group.name or fallback not in groups):
        return (*at, "context_fallback"), f"context_fallback {fallback!r} is not another group"
    for field in (
        "first_chunk_timeout",
        "max_wait",
        "cooldown_window",
        "cooldown",
        "max_cooldown",
        "window",
    ):
        if not _finite(getattr(group, field)):
            return (*at, field), f"{field} must be a finite number of seconds"
    if group.max_cooldown < group.cooldown:
        return (*at, "max_cooldown"), "max_cooldown must be at least cooldown"
    return None


def groups_problem(
    groups: Sequence[Group],
    *,
    routes: Collection[str],
    taken: Collection[str],
    strategies: Collection[str],
) -> tuple[_Path, str] | None:
    """The first problem of a whole set of groups (see `group_problem`), or None.

    ``taken``: group names registered already (elsewhere); a set may not reuse one.
    """
    names = [group.name for group in groups]
    for index, group in enumerate(groups):
        if group.name in taken or group.name in names[:index]:
            return ("group", index, "name"), f"group {group.name!r} is declared twice"
        problem = group_problem(
            group, index, routes=routes, groups={*names, *taken}, strategies=strategies
        )
        if problem is not None:
            return problem
    return None


def settings_problem(settings: RoutingSettings) -> tuple[_Path, str] | None:
    """Why ``settings`` are unusable (the Redis URL's scheme, a bound), or None."""
    at: _Path = ("routing",)
    url = settings.redis
    if url is not None:
        from ._redis_url import url_problem

        problem = url_problem(url)
        if problem is not None:
            return (*at, "redis"), problem
    for field in ("redis_timeout", "redis_retry", "in_flight_lease", "redis_poll"):
        if not math.isfinite(getattr(settings, field)):
            return (*at, field), f"{field} must be a finite number of seconds"
    return None
