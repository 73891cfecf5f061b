"""Registering a `Config` into a runtime: building each route's adapter and registering
it, declaring the configurable providers and offering one discovery per
settings namespace. The effects of configuration, all or nothing; what the
file means is decided before, without I/O (`_validate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec
import trio

import llmrt
from llmrt.adapters.plugin import AdapterPlugin

from ..._registry import DirectoryHandle, DiscoveryHandle, RegistrationHandle
from ..._runtime import LlmRuntime
from ...routing import GroupsHandle
from ._types import Config, NamespaceSpec, RouteSpec

__all__ = ["build_adapter", "register_config", "register_settings"]

#: Seconds `register_config` spends undoing a partial registration.
_CLEANUP_GRACE: Final = 5.0


def build_adapter(spec: RouteSpec, *, environ: Mapping[str, str] | None = None) -> llmrt.Adapter:
    """A new adapter instance for ``spec`` (no I/O; keys are read per call, from ``environ``).

    Raises `ValueError` for a spec without its adapter's config (one `load_config`
    did not produce) or one the adapter refuses.
    """
    if spec.config is None:
        raise ValueError(f"route {spec.route!r} has no adapter config to build from")
    return spec.config.build(key_env=spec.api_key_env, retry=spec.retry, environ=environ)


async def register_config(
    runtime: LlmRuntime, config: Config, *, environ: Mapping[str, str] | None = None
) -> list[RegistrationHandle | GroupsHandle]:
    """Build and register every route of ``config``, in order, with its idle timeout,
    then its routing groups (one handle for them all, last); then set its price
    table (``[[price]]``), when it has one.

    All or nothing: when one registration fails, the ones made so far are
    disposed and the error (`llmrt.LlmError` ``INVALID_PROVIDER`` or
    ``DUPLICATE_ADAPTER``, e.g. a route the runtime already serves) propagates.
    ``environ`` is where the adapters read their keys (default ``os.environ``).
    A checkpoint.
    """
    handles: list[RegistrationHandle | GroupsHandle] = []
    try:
        for spec in config.routes:
            adapter = build_adapter(spec, environ=environ)
            try:
                handle = await runtime.register_adapter(
                    spec.providers, adapter, stream_idle_timeout=spec.stream_idle_timeout
                )
            except BaseException:
                # Never registered, so nobody else will close its HTTP client.
                with trio.move_on_after(_CLEANUP_GRACE, shield=True):
                    await adapter.aclose()
                raise
            handles.append(handle)
        if config.groups:
            handles.append(await runtime.register_groups(config.groups, settings=config.routing))
        if config.prices:
            runtime.set_prices(config.prices)
    except BaseException:
        # Fresh registrations serve no calls yet: disposing them is quick.
        with trio.move_on_after(_CLEANUP_GRACE, shield=True):
            for made in reversed(handles):
                if isinstance(made, RegistrationHandle):
                    await made.dispose(drain_timeout=0)
        raise
    return handles


def _namespace_owner(config: Config, space: NamespaceSpec) -> AdapterPlugin | None:
    """The plugin whose discovery serves ``space``: the first that reads its list."""
    for plugin in config.plugins.adapters.values():
        if plugin.namespaces is not None and space.discovery in plugin.namespaces.apis:
            return plugin
    return None


async def register_settings(
    runtime: LlmRuntime, config: Config, *, environ: Mapping[str, str] | None = None
) -> list[DirectoryHandle | DiscoveryHandle]:
    """Declare ``config``'s configurable providers and offer one discovery per namespace.

    The directory lists every route of ``config`` whose adapter has settings
    namespaces (each name of it, in its namespace), then, dormant, the
    routes the plugins list although ``config`` does not register them (the
    hosted presets' zero-config routes, each with the key variable that would
    register it, ``key_env``). Each namespace of `Config.settings`
    gets its owning plugin's discovery, which knows its routes' endpoints and
    key variables (keys are read from ``environ`` per interrogation). All or
    nothing, like `register_config`: raises `llmrt.LlmError`
    ``DUPLICATE_ADAPTER`` when the runtime already has a directory entry or a
    discovery these collide with. A checkpoint.
    """
    entries = []
    routes: dict[str, dict[str, tuple[str, str | None]]] = {ns.name: {} for ns in config.settings}
    for index, spec in enumerate(config.routes):
        ns = spec.namespace
        plugin = config.plugins.adapters.get(spec.adapter)
        if ns is None or spec.config is None or plugin is None or plugin.namespaces is None:
            continue
        # The file's routes come first, in file order: the index is the entry's.
        path = ("provider", str(index)) if spec.source.startswith("config file") else ()
        base_url = spec.config.endpoint()
        for name in spec.providers:
            entries.append(plugin.namespaces.entry(name, spec.config, ns, path))
            if base_url is not None:
                routes[ns][name] = (base_url, spec.api_key_env)
    taken = {name for spec in config.routes for name in spec.providers}
    # The variable that registers a dormant route: a NO_ADAPTER message names it.
    key_envs: dict[str, str] = {}
    for _, found in config.plugins.detected():
        key_envs.setdefault(found.route, found.key_env)
    for plugin in config.plugins.adapters.values():
        if plugin.namespaces is None:
            continue
        for route, dormant in plugin.namespaces.dormant:
            if route not in taken:
                entry = plugin.namespaces.entry(route, dormant, None, ())
                if entry.key_env is None and route in key_envs:
                    entry = msgspec.structs.replace(entry, key_env=key_envs[route])
                entries.append(entry)
                taken.add(route)
    handles: list[DirectoryHandle | DiscoveryHandle] = []
    try:
        if entries:
            handles.append(await runtime.register_configurable_providers(entries))
        for space in config.settings:
            owner = _namespace_owner(config, space)
            if owner is None or owner.namespaces is None:
                continue
            default = None
            if space.base_url is not None:
                default = (space.base_url, space.api_key_env)
            discovery = owner.namespaces.discovery(
                space.discovery, routes[space.name], default, environ
            )
            handles.append(await runtime.register_model_discovery(space.name, discovery))
    except BaseException:
        with trio.move_on_after(_CLEANUP_GRACE, shield=True):
            for handle in reversed(handles):
                await handle.dispose()
        raise
    return handles
