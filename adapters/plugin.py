"""The adapter plugin interface: what an adapter package declares so llmrt can configure it.

An adapter package names an `AdapterPlugin` in the ``llmrt.adapters``
entry-point group (the built-in adapters register themselves the same
way, in llmrt's own ``pyproject.toml``)::

    [project.entry-points."llmrt.adapters"]
    echo = "llmrt_echo:PLUGIN"

The entry point's name is the adapter's kind, the ``adapter = "echo"`` of a
``[[provider]]`` entry in ``llmrt.toml``. The plugin declares:

* its config Struct, a subclass of `AdapterConfig` (or `HttpAdapterConfig`)
  tagged with the kind: the keys a ``[[provider]]`` entry of this adapter
  may hold, with their types and constraints (``Literal``, ``msgspec.Meta``).
  The file is decoded straight into it; any other key is an error. The
  Struct also builds the adapter (`AdapterConfig.build`);
* its key variables: the default one (``default_key_env``) and the
  zero-config routes a set variable adds (`Detected`);
* its presets (names a ``preset`` key accepts), if it has any, and the
  settings namespaces it owns for model discovery (`Namespaces`).

Nothing here does I/O, and nothing here imports the runtime's actors: both
the adapters and the application (`llmrt.actors.app`) import this module,
and the application imports concrete adapters only through the entry points.
See ``docs/adapters.md``, "Writing an adapter package".
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

import attrs
import msgspec

from llmrt import Adapter, ResolvedModelInfo, ResolvedRetryPolicy
from llmrt.adapter import (
    ConfigurableProvider,
    DiscoveredModel,
    ModelContext,
    ModelDiscoveryRequest,
    ModelReasoningInfo,
    ReasoningEffortInfo,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "AdapterConfig",
    "AdapterPlugin",
    "Detected",
    "Discover",
    "HttpAdapterConfig",
    "MaxTokensField",
    "ModelSpec",
    "Namespaces",
    "Path",
    "Problem",
    "RetryTable",
]

#: The entry-point group adapters are found in.
ENTRY_POINT_GROUP = "llmrt.adapters"

#: A value's position in the parsed file: table keys and array indexes.
Path = tuple[str | int, ...]
#: A problem `AdapterConfig.check` found: the path (within the entry) and the reason.
Problem = tuple[Path, str]
#: What a settings namespace's model discovery is: one interrogation per request.
Discover = Callable[[ModelDiscoveryRequest], Awaitable[Sequence[DiscoveredModel]]]

_Positive = Annotated[int, msgspec.Meta(ge=1)]
#: The request field a model's output cap goes in.
MaxTokensField = Literal["max_tokens", "max_completion_tokens"]


class ModelSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What an adapter knows about one model of its endpoint (a preset's or a file's row).

    Also the schema of one entry of a provider's ``models`` list in ``llmrt.toml``.
    """

    id: Annotated[str, msgspec.Meta(min_length=1)]
    name: str | None = None
    context_window: _Positive | None = None
    default_max_tokens: _Positive | None = None
    #: Whether the model takes images; text-only routes get text placeholders.
    image_input: bool = False
    #: Reasoning efforts the model accepts, in display order.
    efforts: tuple[str, ...] = ()
    default_effort: str | None = None
    #: The output-cap field: OpenAI's reasoning models want ``max_completion_tokens``.
    max_tokens_field: MaxTokensField = "max_tokens"

    def resolved(self, provider: str) -> ResolvedModelInfo:
        reasoning = None
        if self.efforts:
            reasoning = ModelReasoningInfo(
                efforts=tuple(ReasoningEffortInfo(id=e, name=e) for e in self.efforts),
                default_effort=self.default_effort,
            )
        return ResolvedModelInfo(
            provider=provider,
            id=self.id,
            name=self.name or self.id,
            input_modalities=("text", "image") if self.image_input else ("text",),
            context=ModelContext(context_window=self.context_window)
            if self.context_window
            else None,
            default_max_tokens=self.default_max_tokens,
            reasoning=reasoning,
        )


class RetryTable(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[provider.retry]``: the route's retry policy. Unset keys take the policy's defaults."""

    mode: Literal["normal", "always"] = "normal"
    max_retries: int | None = None
    initial_delay_ms: float | None = None
    max_delay_ms: float | None = None
    jitter_ratio: float | None = None
    retryable_codes: tuple[str, ...] | None = None


class AdapterConfig(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="adapter"
):
    """One ``[[provider]]`` entry: the keys every adapter's entry has.

    A plugin subclasses it (``class EchoConfig(AdapterConfig, tag="echo",
    frozen=True)``), adds its own keys as fields and overrides `build`, and,
    where it applies, the other methods.
    """

    route: str | None = None
    routes: tuple[str, ...] | None = None
    stream_idle_timeout: float | None = None

    #: The key variable read when the entry names none (None: the adapter needs no key).
    default_key_env: ClassVar[str | None] = None

    def key_env(self) -> str | None:
        """The variable this route's key is read from (names only; never the value)."""
        return self.default_key_env

    def preset_name(self) -> str | None:
        """The preset this entry uses, by its canonical name (None: presets do not apply)."""
        return None

    def check(self) -> Problem | None:
        """A problem types cannot say (an unknown preset, say), or None. No I/O."""
        return None

    def known_models(self) -> tuple[ModelSpec, ...]:
        """The models the route knows without asking its endpoint (a preset's, the file's)."""
        return ()

    def default_model(self) -> str | None:
        """The model ``llmrt call`` uses when ``--model`` is not given (None: it is required)."""
        models = self.known_models()
        return models[0].id if models else None

    def namespace(self) -> str | None:
        """The settings namespace of this route, for model discovery (None: it has none)."""
        return None

    def endpoint(self) -> str | None:
        """The base URL model discovery asks for this route (None: not discoverable)."""
        return None

    def build(
        self,
        *,
        key_env: str | None,
        retry: ResolvedRetryPolicy | None,
        environ: Mapping[str, str] | None,
    ) -> Adapter:
        """A new adapter for this entry; no I/O (keys are read per call from ``environ``).

        ``key_env`` is `key_env`'s answer; ``retry`` the entry's ``[retry]``
        table resolved (None: the adapter's own policy).
        """
        raise NotImplementedError(f"{type(self).__name__} must define build()")


class HttpAdapterConfig(AdapterConfig, frozen=True):
    """The keys of an adapter that talks to an HTTP endpoint."""

    #: The endpoint (``http://`` or ``https://``); None: the adapter's (or preset's) own.
    base_url: str | None = None
    #: The NAME of the environment variable holding the key (never the key itself).
    api_key_env: str | None = None
    display_name: str | None = None
    models: tuple[ModelSpec, ...] = ()
    retry: RetryTable | None = None

    #: The model ``llmrt call`` uses when the entry lists none (None: it is required).
    fallback_model: ClassVar[str | None] = None
    #: The adapter class, ``"package.module:Class"``, for the default `build`: imported
    #: when the first adapter is built, so loading the plugin imports no HTTP stack.
    adapter_class: ClassVar[str | None] = None

    def key_env(self) -> str | None:
        return self.api_key_env or self.default_key_env

    def known_models(self) -> tuple[ModelSpec, ...]:
        return self.models

    def default_model(self) -> str | None:
        return self.models[0].id if self.models else self.fallback_model

    def build(
        self,
        *,
        key_env: str | None,
        retry: ResolvedRetryPolicy | None,
        environ: Mapping[str, str] | None,
    ) -> Adapter:
        """`adapter_class` built from `adapter_kwargs` (without one: define ``build()``)."""
        if self.adapter_class is None:
            return super().build(key_env=key_env, retry=retry, environ=environ)
        module, _, name = self.adapter_class.partition(":")
        cls = getattr(importlib.import_module(module), name)
        adapter: Adapter = cls(**self.adapter_kwargs(key_env=key_env, retry=retry, environ=environ))
        return adapter

    def adapter_kwargs(
        self,
        *,
        key_env: str | None,
        retry: ResolvedRetryPolicy | None,
        environ: Mapping[str, str] | None,
    ) -> dict[str, Any]:
        """The keyword arguments of an HTTP adapter built from this entry (for `build`).

        Keys the entry leaves unset are left out, so they keep the adapter's
        own defaults; the key variable falls back to `default_key_env`.
        """
        kwargs: dict[str, Any] = {
            "api_key_env": key_env or self.default_key_env,
            "models": self.models,
            "retry_policy": retry,
            "environ": environ,
        }
        if self.base_url is not None:
            kwargs["base_url"] = self.base_url
        if self.display_name is not None:
            kwargs["display_name"] = self.display_name
        return kwargs


@attrs.frozen
class Detected:
    """A zero-config route: when ``key_env`` is set, ``route`` is served by ``config``.

    ``rank`` orders the detected routes of every plugin (lower first; equal
    ranks keep plugin order): llmrt's own go from 10 to 100, so a real
    provider comes before a plugin's unless the plugin says otherwise.
    """

    key_env: str
    route: str
    config: AdapterConfig
    rank: int = 100


@attrs.frozen
class Namespaces:
    """The settings namespaces an adapter owns: model discovery for its routes.

    ``builtin`` names the namespaces that always exist, each with the list
    (one of ``apis``) its endpoints are asked for; a ``[settings.NAME]``
    table may add more. ``entry(route, config, namespace, settings_path)``
    makes a route's directory entry (``namespace`` None: the config's own),
    ``discovery`` one namespace's discovery from its routes' endpoints
    ``{route: (base_url, key variable)}`` and its default endpoint.
    ``dormant`` are routes listed in the directory although not configured.
    """

    builtin: tuple[tuple[str, str], ...]
    apis: tuple[str, ...]
    entry: Callable[[str, AdapterConfig, str | None, tuple[str, ...]], ConfigurableProvider]
    discovery: Callable[
        [
            str,
            Mapping[str, tuple[str, str | None]],
            tuple[str, str | None] | None,
            Mapping[str, str] | None,
        ],
        Discover,
    ]
    dormant: tuple[tuple[str, AdapterConfig], ...] = ()


@attrs.frozen
class AdapterPlugin:
    """What an adapter package declares (module docstring)."""

    #: The ``[[provider]]`` schema; its msgspec tag is the adapter's kind.
    config: type[AdapterConfig]
    #: One line for ``llmrt providers``: what the adapter talks to.
    summary: str
    #: Zero-config routes, added when their key variable is set.
    detect: tuple[Detected, ...] = ()
    #: Every name a ``preset`` key accepts (aliases too), mapped to its canonical name.
    presets: Mapping[str, str] = attrs.field(factory=dict)
    namespaces: Namespaces | None = None
    #: Routes always served, after every other, unless the file uses their name.
    builtin: tuple[tuple[str, AdapterConfig], ...] = ()
    #: A variable that adjusts the built-in routes when set and not empty, and
    #: how: ``adjust(config, value)`` returns the route's config for the value,
    #: or raises `ValueError` saying what the variable accepts.
    builtin_env: tuple[str, Callable[[AdapterConfig, str], AdapterConfig]] | None = None

    @property
    def kind(self) -> str:
        """The ``adapter = "..."`` value: the config Struct's tag."""
        tag = self.config.__struct_config__.tag
        return tag if isinstance(tag, str) else ""
