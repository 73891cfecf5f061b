"""What a validated ``llmrt.toml`` is: the routes to register (`RouteSpec`), the settings
namespaces (`NamespaceSpec`), the whole (`Config`), and the one error (`ConfigError`).

Values only: `_validate` makes them from a file's text, `_register` registers
them into a runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

from llmrt import ResolvedRetryPolicy
from llmrt.adapters.plugin import AdapterConfig, ModelSpec

from ..._pricing import ModelPrice
from ...call_log._settings import CallLogSettings
from ...routing import Group, RoutingSettings
from ..plugins import Plugins, installed
from ._schema import GatewayTable

__all__ = [
    "CONFIG_ENV_VAR",
    "CONFIG_INVALID",
    "DEFAULT_CONFIG_FILE",
    "Config",
    "ConfigError",
    "NamespaceSpec",
    "RouteSpec",
    "builtin_namespaces",
]

#: The file `load_config` reads when no path is given and ``$LLMRT_CONFIG`` is unset.
DEFAULT_CONFIG_FILE: Final = "llmrt.toml"
#: The environment variable naming a config file.
CONFIG_ENV_VAR: Final = "LLMRT_CONFIG"
#: `ConfigError.code` of every problem in the file itself.
CONFIG_INVALID: Final = "CONFIG_INVALID"


class ConfigError(ValueError):
    """A config file problem: ``str(err)`` is ``FILE:LINE: REASON``.

    ``file`` is the path as given (or None), ``line`` (and ``column`` for TOML
    syntax errors) is 1-based or None when unknown, ``reason`` the message
    alone; it names the value's path (``$.provider[1].adapter``) when there is one.
    ``code`` is `CONFIG_INVALID`, or ``ADAPTER_PLUGIN`` when the entry's adapter
    is installed but unusable (see `llmrt.actors.app.plugins`).
    """

    def __init__(
        self,
        file: str | None,
        line: int | None,
        reason: str,
        *,
        column: int | None = None,
        code: str = CONFIG_INVALID,
    ) -> None:
        self.file = file
        self.line = line
        self.column = column
        self.reason = reason
        self.code = code
        where = file if file is not None else "<config>"
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        super().__init__(f"{where}: {reason}")


@attrs.frozen
class RouteSpec:
    """One provider route: how to build its adapter and register it.

    ``config`` is the entry decoded into its adapter's config Struct (or the
    plugin's own, for a detected or built-in route); the adapter's own keys
    read through to it (``spec.tokens_per_second``). ``api_key_env`` is the
    effective variable (a preset's default filled in); ``stream_idle_timeout``
    the effective one (``[defaults]`` filled in; None: the runtime's default).
    ``source`` says where the route came from: ``"config file line N"``,
    ``"environment DEEPSEEK_API_KEY"`` or ``"built-in"``.
    """

    route: str
    adapter: str
    source: str
    aliases: tuple[str, ...] = ()
    preset: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    display_name: str | None = None
    stream_idle_timeout: float | None = None
    models: tuple[ModelSpec, ...] = ()
    retry: ResolvedRetryPolicy | None = None
    # Not compared: the fields above are what the route is; this is how it was written.
    config: AdapterConfig | None = attrs.field(default=None, eq=False, repr=False)

    def __getattr__(self, name: str) -> object:
        # Only reached for names that are not RouteSpec's own: the adapter's keys.
        if name.startswith("_") or name == "config":
            raise AttributeError(name)
        config = self.config
        if config is None or name not in config.__struct_fields__:
            raise AttributeError(name)
        return getattr(config, name)

    @property
    def providers(self) -> tuple[str, ...]:
        """Every route name this entry registers: ``route`` first, then its aliases."""
        return (self.route, *self.aliases)

    @property
    def namespace(self) -> str | None:
        """The settings namespace of the route (None: its adapter has no model discovery).

        ``settings_ns`` when the file gives one, else the adapter's built-in
        one for the route (``ollama`` for the Ollama preset, say).
        """
        return self.config.namespace() if self.config is not None else None


@attrs.frozen
class NamespaceSpec:
    """One settings namespace: the list its endpoints are asked for, and a default endpoint.

    ``source`` is ``"built-in"`` or ``"config file line N"``.
    """

    name: str
    discovery: str = "openai"
    base_url: str | None = None
    api_key_env: str | None = None
    source: str = "built-in"


def builtin_namespaces(plugins: Plugins) -> tuple[NamespaceSpec, ...]:
    """The namespaces the installed adapters always own (a file may redefine them)."""
    return tuple(
        NamespaceSpec(name, api)
        for plugin in plugins.adapters.values()
        if plugin.namespaces is not None
        for name, api in plugin.namespaces.builtin
    )


@attrs.frozen
class Config:
    """A validated configuration: the routes to register, in registration order.

    ``file`` is the file read (None when there was none); ``keys_set`` the
    names of the routes' key variables that were set and non-empty at load
    time (names only, never values).
    """

    routes: tuple[RouteSpec, ...]
    file: str | None = None
    keys_set: frozenset[str] = frozenset()
    #: The ``[gateway]`` table (``llmrt serve``'s settings); defaults when absent.
    gateway: GatewayTable = attrs.field(factory=GatewayTable)
    #: The settings namespaces: the built-in ones, then the file's, by name.
    settings: tuple[NamespaceSpec, ...] = attrs.field(
        factory=lambda: builtin_namespaces(installed())
    )
    #: The adapters this configuration was made with (the installed ones by default).
    plugins: Plugins = attrs.field(factory=installed, eq=False, repr=False)
    #: Routing groups (``[[group]]``), registered after the routes, and ``[routing]``.
    groups: tuple[Group, ...] = ()
    routing: RoutingSettings = attrs.field(factory=RoutingSettings)
    #: ``[call_log]`` (None: off unless ``llmrt serve --call-log DIR``).
    call_log: CallLogSettings | None = None
    #: The price table (``[[price]]``): (route, model) to its price, in the file's order.
    prices: Mapping[tuple[str, str], ModelPrice] = attrs.field(factory=dict)

    def namespace(self, name: str) -> NamespaceSpec | None:
        """The settings namespace called ``name``, or None."""
        for spec in self.settings:
            if spec.name == name:
                return spec
        return None

    def route(self, name: str) -> RouteSpec | None:
        """The spec that serves route (or alias) ``name``, or None."""
        for spec in self.routes:
            if name in spec.providers:
                return spec
        return None
