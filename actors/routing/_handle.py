"""Registering groups: validated whole, published atomically, withdrawn by a handle.

`register_groups` is what `LlmRuntime.register_groups` runs: it checks every
group of the set (`_spec.groups_problem`) against the routes registered now
and the groups other sets registered, starts the Redis state's task in the
runtime's nursery when the settings name Redis, and publishes the set.
`GroupsHandle.replace` swaps the whole set the same way (a call that already
started keeps the group it started with); `dispose` withdraws it.
"""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Callable, Collection, Mapping, Sequence

import attrs
import msgspec
import trio

from llmrt._errors import ErrorCode, LlmError

from ._redis import SharedState
from ._router import Router
from ._spec import (
    BUILTIN_STRATEGIES,
    Group,
    RoutingSettings,
    groups_problem,
    settings_problem,
)
from ._strategies import Strategy

__all__ = ["GroupsHandle", "register_groups"]


def _format(path: tuple[str | int, ...]) -> str:
    return "".join(
        f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path)
    )


def _checked(groups: Sequence[Group]) -> tuple[Group, ...]:
    """``groups`` decoded again: msgspec checks constraints on decoding, not on construction."""
    if isinstance(groups, Group) or not isinstance(groups, Sequence):
        raise TypeError("groups must be a sequence of llmrt.actors.routing.Group")
    out = []
    for index, group in enumerate(groups):
        if not isinstance(group, Group):
            raise TypeError(f"groups[{index}] is a {type(group).__name__}, not a Group")
        try:
            out.append(msgspec.convert(msgspec.to_builtins(group), Group))
        except (msgspec.ValidationError, TypeError) as exc:
            raise LlmError(ErrorCode.INVALID_PROVIDER, f"group[{index}]: {exc}") from None
    return tuple(out)


def _strategies(strategies: Mapping[str, Strategy] | None) -> Mapping[str, Strategy]:
    custom = dict(strategies or {})
    for name, strategy in custom.items():
        if name in BUILTIN_STRATEGIES:
            raise LlmError(ErrorCode.INVALID_PROVIDER, f"strategy {name!r} is a built-in name")
        if not callable(getattr(strategy, "choose", None)):
            raise TypeError(f"strategy {name!r} has no choose(candidates, rng) method")
    return custom


@attrs.define(eq=False)
class GroupsHandle:
    """A registered set of groups: `replace` it atomically, or `dispose` of it."""

    _router: Router
    _routes: Callable[[], Collection[str]]
    _strategies: Mapping[str, Strategy]
    _shared: SharedState | None
    _rng: random.Random
    _scope: trio.CancelScope | None = None
    _disposed: bool = attrs.field(default=False, init=False)

    @property
    def groups(self) -> tuple[str, ...]:
        """The names of this set's groups, as published now."""
        return self._router.owned(self)

    def _check(self, groups: Sequence[Group]) -> tuple[Group, ...]:
        """The set, validated whole; raises `LlmError` ``INVALID_PROVIDER``."""
        checked = _checked(groups)
        problem = groups_problem(
            checked,
            routes=self._routes(),
            taken=self._router.taken_by_others(self),
            strategies=(*BUILTIN_STRATEGIES, *self._strategies),
        )
        if problem is not None:
            path, reason = problem
            raise LlmError(ErrorCode.INVALID_PROVIDER, f"{_format(path)}: {reason}")
        return checked

    def _commit(self, groups: Sequence[Group]) -> None:
        self._router.commit(self, self._check(groups), self._strategies, self._shared, self._rng)

    async def replace(self, groups: Sequence[Group]) -> None:
        """Replace the whole set, all or nothing; state of kept deployments is kept.

        Raises `LlmError` ``INVALID_PROVIDER`` (the set is left as it was) or
        ``REGISTRATION_DISPOSED``. A checkpoint.
        """
        await trio.lowlevel.checkpoint()
        if self._disposed:
            raise LlmError(ErrorCode.REGISTRATION_DISPOSED, "these groups were disposed")
        self._commit(groups)

    async def dispose(self) -> None:
        """Withdraw the set's groups (new calls get ``NO_ADAPTER``) and stop its Redis client."""
        await trio.lowlevel.checkpoint()
        if self._disposed:
            return
        self._disposed = True
        self._router.withdraw(self)
        if self._scope is not None:
            self._scope.cancel()


async def register_groups(
    router: Router,
    nursery: trio.Nursery,
    routes: Callable[[], Collection[str]],
    groups: Sequence[Group],
    settings: RoutingSettings | None,
    strategies: Mapping[str, Strategy] | None,
) -> GroupsHandle:
    """Check and publish ``groups`` (see the module docstring); the handle that owns them."""
    await trio.lowlevel.checkpoint()
    settings = settings if settings is not None else RoutingSettings()
    if not isinstance(settings, RoutingSettings):
        raise TypeError("settings must be a RoutingSettings")
    try:
        settings = msgspec.convert(msgspec.to_builtins(settings), RoutingSettings)
    except msgspec.ValidationError as exc:
        raise LlmError(ErrorCode.INVALID_PROVIDER, f"routing: {exc}") from None
    problem = settings_problem(settings)
    if problem is not None:
        path, reason = problem
        raise LlmError(ErrorCode.INVALID_PROVIDER, f"{_format(path)}: {reason}")
    if settings.redis is not None and importlib.util.find_spec("coredis") is None:
        raise LlmError(
            ErrorCode.INVALID_PROVIDER,
            'routing.redis needs the Redis client: pip install "llmrt[redis]"',
        )
    shared = SharedState(settings) if settings.redis is not None else None
    rng = random.Random(settings.seed)
    handle = GroupsHandle(router, routes, _strategies(strategies), shared, rng)
    checked = handle._check(groups)  # before any task starts
    if shared is not None:
        scope = trio.CancelScope()
        handle._scope = scope

        async def run(*, task_status: trio.TaskStatus[None]) -> None:
            with scope:
                await shared.run(task_status=task_status)

        await nursery.start(run, name="llmrt.routing.redis")
    handle._commit(checked)
    return handle
