"""The ``openai_chat`` plugin (an ``llmrt.adapters`` entry point): keys, presets, namespaces.

Every ``llmrt`` command loads every installed plugin, so this module imports
only the plugin interface and the presets' data (`llmrt.adapters._presets`);
the adapter and the model discovery, with httpx and the wire code, are
imported when `OpenAIChatConfig.build` builds an adapter, or when a
namespace's discovery is first asked (`DeferredDiscovery`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import attrs
import trio

from llmrt import Adapter, ResolvedRetryPolicy
from llmrt.adapter import ConfigurableProvider, DiscoveredModel, ModelDiscoveryRequest

from ._presets import (
    DISCOVERY_APIS,
    OLLAMA_NS,
    OPENAI_COMPATIBLE_NS,
    PRESET_ALIASES,
    PRESETS,
    Preset,
    discovery_api_of,
    find_preset,
    settings_ns_of,
    unknown_preset,
)
from .plugin import (
    AdapterConfig,
    AdapterPlugin,
    Detected,
    Discover,
    HttpAdapterConfig,
    ModelSpec,
    Namespaces,
    Problem,
)

if TYPE_CHECKING:
    from ._openai_chat_adapter import EndpointDiscovery

__all__ = ["PLUGIN", "DeferredDiscovery", "OpenAIChatConfig", "configurable_provider"]


def configurable_provider(
    route: str,
    *,
    preset: str | None,
    settings_ns: str | None = None,
    settings_path: tuple[str, ...] = (),
    display_name: str | None = None,
) -> ConfigurableProvider:
    """The directory entry of one OpenAI-compatible route.

    ``declared`` is True for the ``openai-compatible`` preset (the adapter
    knows the endpoint only from configuration), False for a named preset.
    """
    found = find_preset(preset or "openai-compatible")
    assert found is not None, preset
    return ConfigurableProvider(
        provider=route,
        display_name=display_name or found.display_name,
        settings_ns=settings_ns or settings_ns_of(preset),
        settings_path=settings_path,
        declared=found.name == "openai-compatible",
    )


class OpenAIChatConfig(HttpAdapterConfig, tag="openai_chat", frozen=True):
    """A ``[[provider]]`` entry with ``adapter = "openai_chat"``."""

    #: The preset (`PRESETS`, or an alias); None: ``openai-compatible``.
    preset: str | None = None
    #: The settings namespace the route belongs to (``[settings.NAME]`` or a built-in one).
    settings_ns: str | None = None

    def _preset(self) -> Preset | None:
        return find_preset(self.preset or "openai-compatible")

    def key_env(self) -> str | None:
        if self.api_key_env is not None:
            return self.api_key_env
        found = self._preset()
        return found.api_key_env if found is not None else None

    def preset_name(self) -> str | None:
        return self.preset or "openai-compatible"

    def check(self) -> Problem | None:
        preset = self.preset or "openai-compatible"
        found = find_preset(preset)
        if found is None:
            return ("preset",), unknown_preset(preset)
        if self.base_url is None and found.base_url is None:
            return (), f"preset {preset!r} needs `base_url` (the server's http(s) URL)"
        return None

    def known_models(self) -> tuple[ModelSpec, ...]:
        found = self._preset()
        merged = {m.id: m for m in (*(found.models if found else ()), *self.models)}
        return tuple(merged.values())

    def default_model(self) -> str | None:
        if self.models:
            return self.models[0].id
        found = self._preset()
        name = found.name if found is not None else None
        if name is not None and name in _DEFAULT_MODELS:
            return _DEFAULT_MODELS[name]
        return found.models[0].id if found is not None and found.models else None

    def namespace(self) -> str | None:
        return self.settings_ns or settings_ns_of(self.preset)

    def endpoint(self) -> str | None:
        found = self._preset()
        return self.base_url or (found.base_url if found is not None else None)

    def build(
        self,
        *,
        key_env: str | None,
        retry: ResolvedRetryPolicy | None,
        environ: Mapping[str, str] | None,
    ) -> Adapter:
        from ._openai_chat_adapter import OpenAIChatAdapter

        return OpenAIChatAdapter(
            preset=self.preset or "openai-compatible",
            base_url=self.base_url,
            api_key_env=key_env,
            models=self.models,
            display_name=self.display_name,
            retry_policy=retry,
            environ=environ,
        )


#: ``llmrt call``'s model for presets whose table does not start with the everyday model.
_DEFAULT_MODELS: Final[Mapping[str, str]] = {
    "deepseek-official": "deepseek-chat",
    "openai": "gpt-4.1-mini",
}


def _directory_entry(
    route: str, config: AdapterConfig, settings_ns: str | None, path: tuple[str, ...]
) -> ConfigurableProvider:
    assert isinstance(config, OpenAIChatConfig), config
    return configurable_provider(
        route,
        preset=config.preset,
        settings_ns=settings_ns,
        settings_path=path,
        display_name=config.display_name,
    )


@attrs.define(eq=False)
class DeferredDiscovery:
    """One namespace's `EndpointDiscovery`, made when the namespace is first asked.

    Every command that opens a runtime offers the namespaces' discoveries;
    made at once, each would import httpx for a command that may never
    discover anything. ``routes`` maps each route to its endpoint and key
    variable, ``default`` is the namespace's own endpoint. `aclose` closes
    the connections the discovery kept, if it was ever made (a checkpoint).
    Raises `ValueError` for an ``api`` not in `DISCOVERY_APIS`, as
    `EndpointDiscovery` does.
    """

    api: str
    routes: Mapping[str, tuple[str, str | None]]
    default: tuple[str, str | None] | None = None
    environ: Mapping[str, str] | None = attrs.field(default=None, repr=False)
    _made: EndpointDiscovery | None = attrs.field(default=None, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.api not in DISCOVERY_APIS:
            raise ValueError(f"unknown discovery api {self.api!r}; known: {DISCOVERY_APIS}")

    @property
    def made(self) -> bool:
        """Whether it holds an `EndpointDiscovery` (made at the first ask, let go by `aclose`)."""
        return self._made is not None

    async def __call__(self, request: ModelDiscoveryRequest) -> tuple[DiscoveredModel, ...]:
        if self._made is None:
            from ._openai_chat_adapter import DiscoveryEndpoint, EndpointDiscovery

            self._made = EndpointDiscovery(
                api=self.api,
                routes={name: DiscoveryEndpoint(u, k) for name, (u, k) in self.routes.items()},
                default=DiscoveryEndpoint(*self.default) if self.default is not None else None,
                environ=self.environ,
            )
        return await self._made(request)

    async def aclose(self) -> None:
        made, self._made = self._made, None
        if made is not None:
            await made.aclose()
        else:
            await trio.lowlevel.checkpoint()


def _discovery(
    api: str,
    routes: Mapping[str, tuple[str, str | None]],
    default: tuple[str, str | None] | None,
    environ: Mapping[str, str] | None,
) -> Discover:
    return DeferredDiscovery(api, routes, default, environ)


def _detected(preset: Preset) -> Detected:
    assert preset.api_key_env is not None and preset.route is not None
    # DeepSeek, then OpenAI, come first; every other hosted preset after the
    # other adapters' routes, in preset order.
    rank = {"deepseek-official": 10, "openai": 20}.get(preset.name, 100)
    return Detected(preset.api_key_env, preset.route, OpenAIChatConfig(preset=preset.name), rank)


PLUGIN = AdapterPlugin(
    config=OpenAIChatConfig,
    summary="OpenAI-compatible chat completions (hosted presets and local servers)",
    detect=tuple(
        _detected(preset) for preset in PRESETS.values() if preset.api_key_env and preset.route
    ),
    presets={
        **{name: name for name in PRESETS},
        **PRESET_ALIASES,
    },
    namespaces=Namespaces(
        builtin=(
            (OPENAI_COMPATIBLE_NS, discovery_api_of(OPENAI_COMPATIBLE_NS)),
            (OLLAMA_NS, discovery_api_of(OLLAMA_NS)),
        ),
        apis=DISCOVERY_APIS,
        entry=_directory_entry,
        discovery=_discovery,
        dormant=tuple(
            (preset.route, OpenAIChatConfig(preset=preset.name))
            for preset in PRESETS.values()
            if preset.route is not None
        ),
    ),
)
