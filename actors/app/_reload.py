"""Reading ``llmrt.toml`` again while serving: what ``llmrt serve`` does on SIGHUP and on
a ``reload`` frame (docs/configuration.md, "Reloading").

`served_config` registers a configuration into a new runtime and yields a
`ServedConfig`; its `ServedConfig.reload` reads the file again and moves the
runtime to it through the registry's public changes alone (a registration's
``replace`` and ``dispose``, ``register_adapter``, the groups' ``replace``,
the settings' handles), so it does not depend on how the registry commits
them. A file that does not load is refused with its ``FILE:LINE`` error and
nothing changes. A valid one:

* routes whose entry is unchanged keep their registration (and its adapter,
  connections and statistics);
* a changed entry (another ``base_url``, model table, aliases...) gets a new
  adapter: the old registration's routes are withdrawn (``replace([])``), the
  new one is registered under them, and the old one is disposed in the
  background, so calls that started on it finish there (within the runtime's
  drain timeout) while new calls reach the new adapter;
* a new entry is registered; a removed one is withdrawn and disposed the same way;
* the routing groups are replaced as a whole (``replace`` when ``[routing]``
  is unchanged; otherwise disposed and registered again);
* the provider directory and model discoveries are declared again.

When a step is refused (a route the runtime holds otherwise, an adapter that
refuses its facts), the steps made are undone and the report says why: the
old configuration serves on. Reloads take turns. The commits are shielded:
a reload that started runs to its end.

What a reload cannot change is reported, not applied: the ``[gateway]``
table (and the command line: the listen address, ``--workers``) takes a restart.
Between withdrawing a changed route and registering its new adapter the
registry passes one checkpoint: a call that starts exactly then gets
``NO_ADAPTER``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Final

import attrs
import trio

import llmrt
from llmrt import LlmError, LlmFailure

from .._registry import DirectoryHandle, DiscoveryHandle, RegistrationHandle
from ..call_log import CallLogSettings
from ..gateway._protocol import ReloadReport, WorkerReload
from ..routing import GroupsHandle
from . import config as configuration
from .config import Config, ConfigError, RouteSpec

__all__ = ["ServedConfig", "served_config", "describe_reload"]

log = logging.getLogger("llmrt.reload")

#: Seconds spent undoing a refused reload (each registration's undo is one commit).
_UNDO_GRACE: Final = 5.0
#: Bound on closing an adapter that was built but never registered.
_CLOSE_GRACE: Final = 5.0


@attrs.define(eq=False)
class _Served:
    """One registered route entry: its spec and its registration."""

    spec: RouteSpec
    handle: RegistrationHandle


def _same(a: RouteSpec, b: RouteSpec) -> bool:
    """Whether two entries register the same adapter: every fact but where it was written."""
    return attrs.evolve(a, source="") == attrs.evolve(b, source="") and a.config == b.config


async def _close(adapter: llmrt.Adapter) -> None:
    with trio.move_on_after(_CLOSE_GRACE, shield=True):
        try:
            await adapter.aclose()
        except Exception:
            log.exception("closing adapter %r failed", type(adapter).__name__)


@attrs.define(eq=False)
class ServedConfig:
    """A runtime serving a configuration file, and what moves it to the file's new text."""

    runtime: llmrt.LlmRuntime
    #: The configuration serving now.
    config: Config
    #: The file to read again (None: as `load_config` finds it: ``$LLMRT_CONFIG``, ...).
    path: str | None
    environ: Mapping[str, str]
    #: The slot under ``llmrt serve --workers N`` (None for a single process).
    worker: int | None = None
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    _routes: dict[str, _Served] = attrs.field(factory=dict, init=False)
    _groups: GroupsHandle | None = attrs.field(default=None, init=False)
    _settings: list[DirectoryHandle | DiscoveryHandle] = attrs.field(factory=list, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    def registration(self, route: str) -> RegistrationHandle | None:
        """The registration serving the file's entry named ``route`` now (None: no such entry)."""
        served = self._routes.get(route)
        return served.handle if served is not None else None

    async def _register_settings(self, config: Config) -> None:
        self._settings = await configuration.register_settings(
            self.runtime, config, environ=self.environ
        )

    async def _dispose_settings(self) -> None:
        for handle in reversed(self._settings):
            await handle.dispose()
        self._settings = []

    def _retire(self, handle: RegistrationHandle) -> None:
        """Dispose of a withdrawn registration in the background: its calls finish there."""
        assert self._nursery is not None
        self._nursery.start_soon(handle.dispose)

    async def reload(self) -> WorkerReload:
        """Read the file again and serve it (see the module docstring); never raises for
        a bad file: the report says what happened."""
        async with self._lock:
            load = functools.partial(
                configuration.load_config,
                self.path,
                environ=self.environ,
                plugins=self.config.plugins,
            )
            try:
                new = await trio.to_thread.run_sync(load)
            except ConfigError as exc:
                log.warning("reload refused, the old configuration serves on: %s", exc)
                return WorkerReload(
                    ok=False, worker=self.worker, error=LlmFailure(message=str(exc), code=exc.code)
                )
            with trio.CancelScope(shield=True):
                result = await self._apply(new)
            if result.error is not None:
                log.warning(
                    "reload refused, the old configuration serves on: %s", result.error.message
                )
            return result

    async def _apply(self, new: Config) -> WorkerReload:
        old = self.config
        runtime = self.runtime
        names = {spec.route for spec in new.routes}
        kept: dict[str, _Served] = {}
        fresh: list[RouteSpec] = []
        for spec in new.routes:
            served = self._routes.get(spec.route)
            if served is not None and _same(served.spec, spec):
                kept[spec.route] = served
            else:
                fresh.append(spec)
        stale = [served for name, served in self._routes.items() if name not in kept]
        added = tuple(spec.route for spec in fresh if spec.route not in self._routes)
        changed = tuple(spec.route for spec in fresh if spec.route in self._routes)
        removed = tuple(name for name in self._routes if name not in names)
        groups_change = new.groups != old.groups or new.routing != old.routing
        settings_change = bool(fresh or stale) or new.settings != old.settings

        # Building is pure: an adapter that refuses its facts refuses the reload here.
        built: list[tuple[RouteSpec, llmrt.Adapter]] = []
        try:
            for spec in fresh:
                built.append((spec, configuration.build_adapter(spec, environ=self.environ)))
        except ValueError as exc:
            for _, adapter in built:
                await _close(adapter)
            return WorkerReload(
                ok=False,
                worker=self.worker,
                error=LlmFailure(message=str(exc), code=llmrt.ErrorCode.INVALID_PROVIDER),
            )

        undo: list[Callable[[], Awaitable[object]]] = []
        registered: dict[str, _Served] = {}
        pending = list(built)
        try:
            if settings_change:
                await self._dispose_settings()

                async def restore_settings() -> None:
                    await self._dispose_settings()
                    await self._register_settings(old)

                undo.append(restore_settings)
                await self._register_settings(new)
            for served in stale:
                await served.handle.replace([])
                undo.append(functools.partial(served.handle.replace, served.spec.providers))
            while pending:
                spec, adapter = pending[0]
                handle = await runtime.register_adapter(
                    spec.providers, adapter, stream_idle_timeout=spec.stream_idle_timeout
                )
                pending.pop(0)
                registered[spec.route] = _Served(spec, handle)

                async def withdraw(handle: RegistrationHandle = handle) -> None:
                    await handle.replace([])
                    self._retire(handle)

                undo.append(withdraw)
            if groups_change:
                await self._move_groups(old, new, undo)
        except LlmError as exc:
            with trio.move_on_after(_UNDO_GRACE):
                for step in reversed(undo):
                    try:
                        await step()
                    except LlmError as failure:  # pragma: no cover - undoing a commit made
                        log.error("undoing a refused reload failed: %s", failure)
            for _, adapter in pending:
                await _close(adapter)
            return WorkerReload(
                ok=False, worker=self.worker, error=LlmFailure(message=str(exc), code=exc.code)
            )
        for served in stale:
            self._retire(served.handle)
        self._routes = {
            spec.route: kept.get(spec.route) or registered[spec.route] for spec in new.routes
        }
        if new.prices != old.prices:
            runtime.set_prices(new.prices)
        self.config = new
        restart = tuple(
            table
            for table, differs in (
                ("gateway", new.gateway != old.gateway),
                ("call_log", new.call_log != old.call_log),
            )
            if differs
        )
        return WorkerReload(
            ok=True,
            worker=self.worker,
            added=added,
            removed=removed,
            changed=changed,
            groups=groups_change,
            restart_needed=restart,
        )

    async def _move_groups(
        self, old: Config, new: Config, undo: list[Callable[[], Awaitable[object]]]
    ) -> None:
        runtime = self.runtime
        current = self._groups
        if current is not None and new.groups and new.routing == old.routing:
            await current.replace(new.groups)
            undo.append(functools.partial(current.replace, old.groups))
            return
        if current is not None:
            await current.dispose()
            self._groups = None

            async def again() -> None:
                if self._groups is not None:
                    await self._groups.dispose()
                self._groups = await runtime.register_groups(old.groups, settings=old.routing)

            undo.append(again)
        if new.groups:
            self._groups = await runtime.register_groups(new.groups, settings=new.routing)


@asynccontextmanager
async def served_config(
    config: Config,
    *,
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    worker: int | None = None,
    call_log: CallLogSettings | None = None,
) -> AsyncIterator[ServedConfig]:
    """A runtime serving ``config`` (read from ``path``), ready to `ServedConfig.reload`.

    Keys are read from ``environ`` (default ``os.environ``), now and after a reload.
    ``call_log``: where its calls are recorded (`call_log_settings`); None: not recorded.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    async with llmrt.open_runtime(call_log=call_log) as rt, trio.open_nursery() as nursery:
        served = ServedConfig(
            runtime=rt,
            config=config,
            path=os.fspath(path) if path is not None else None,
            environ=env,
            worker=worker,
        )
        served._nursery = nursery
        handles = await configuration.register_config(rt, config, environ=env)
        for spec, handle in zip(config.routes, handles, strict=False):
            assert isinstance(handle, RegistrationHandle)
            served._routes[spec.route] = _Served(spec, handle)
        if config.groups:
            groups = handles[-1]
            assert isinstance(groups, GroupsHandle)
            served._groups = groups
        await served._register_settings(config)
        try:
            yield served
        finally:
            # Disposals still draining end with the runtime, which drains them all.
            nursery.cancel_scope.cancel()


def single_report(result: WorkerReload) -> ReloadReport:
    """The report of a process serving alone."""
    return ReloadReport(ok=result.ok, workers=(result,))


def describe_reload(result: WorkerReload) -> str:
    """One line for a process's outcome, as ``llmrt serve`` and ``llmrt reload`` print it."""
    who = f"worker {result.worker}" if result.worker is not None else "reload"
    if result.worker is not None:
        who += " reload"
    if not result.ok:
        message = result.error.message if result.error is not None else "refused"
        return f"{who}: refused, the old configuration serves on: {message}"
    parts = [
        f"{what} {', '.join(names)}"
        for what, names in (
            ("added", result.added),
            ("changed", result.changed),
            ("removed", result.removed),
        )
        if names
    ]
    if result.groups:
        parts.append("groups replaced")
    line = f"{who}: applied ({'; '.join(parts) or 'no change'})"
    if result.restart_needed:
        line += f"; needs a restart to apply: [{'], ['.join(result.restart_needed)}]"
    return line
