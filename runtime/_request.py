"""The model request, call config, and provider/model descriptors."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from ._content import Message
from ._freeze import deep_freeze
from ._wire import Wire

__all__ = [
    "ToolSchema",
    "NamedToolChoice",
    "ToolChoice",
    "JsonSchemaFormat",
    "JsonObjectFormat",
    "ResponseFormat",
    "GenerateOptions",
    "LlmCallConfig",
    "CallConfigDefaults",
    "ProviderInfo",
    "ModelModality",
    "ModelInfo",
    "ModelContext",
    "ReasoningEffortInfo",
    "ModelReasoningInfo",
    "ResolvedModelInfo",
    "ConfigurableProvider",
    "ModelDiscoveryRequest",
    "DiscoveredModel",
]

_Positive = Annotated[int, msgspec.Meta(gt=0)]
_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class ToolSchema(Wire, frozen=True):
    """A tool as the model sees it: name, description and a JSON Schema for its arguments."""

    name: _NonEmpty
    description: str
    #: Deep-frozen when the schema is built: a `FrozenDict` (mutation raises).
    parameters: dict[str, Any]

    #: True: the provider must constrain the arguments to ``parameters`` (strict
    #: mode); False: best effort; None: the route's default. True needs the
    #: adapter's ``strict-tools`` feature (`Adapter.request_features`).
    strict: bool | None = None

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "parameters", deep_freeze(self.parameters))


class NamedToolChoice(Wire, frozen=True, tag_field="type", tag="tool"):
    """The model must call this tool (one of the request's ``tools``)."""

    name: _NonEmpty


#: How the model may use the request's tools: ``auto`` (it decides; every
#: provider's default), ``none`` (no tool call), ``required`` (at least one
#: call), or a `NamedToolChoice`. Anything but ``auto`` needs the adapter's
#: ``tool-choice`` feature.
ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


class JsonSchemaFormat(Wire, frozen=True, tag_field="type", tag="json-schema"):
    """The answer's text must be JSON matching ``schema`` (structured output).

    ``name`` labels the schema for providers that want one (OpenAI's
    ``json_schema.name``; adapters use ``response`` when it is None).
    ``strict`` as in OpenAI's API: True constrains decoding to the schema.
    """

    #: Deep-frozen when the format is built, like `ToolSchema.parameters`.
    schema: dict[str, Any]
    name: str | None = None
    description: str | None = None
    strict: bool | None = None

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "schema", deep_freeze(self.schema))


class JsonObjectFormat(Wire, frozen=True, tag_field="type", tag="json-object"):
    """The answer's text must be a JSON object, of no particular schema (JSON mode)."""


#: Structured output: `JsonSchemaFormat` (adapter feature ``json-schema``) or
#: `JsonObjectFormat` (``json-object``). None: free text.
ResponseFormat = JsonSchemaFormat | JsonObjectFormat


class GenerateOptions(Wire, frozen=True):
    """One model request, fully assembled and immutable.

    ``provider`` selects the registered adapter; ``model`` is passed to it.
    Cancellation is not part of the request: pass ``signal=`` to
    ``LlmRuntime.stream``.
    """

    provider: _NonEmpty
    model: _NonEmpty
    messages: tuple[Message, ...]
    reasoning_effort: str | None = None
    system: str | None = None
    tools: tuple[ToolSchema, ...] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    max_tokens: _Positive | None = None
    #: Generation halts at any of these strings, which are not included in the output.
    stop: tuple[str, ...] | None = None
    session_id: str | None = None
    purpose: Literal["compaction", "session-title"] | None = None
    #: How the model may use ``tools`` (None: ``auto``); see `ToolChoice`.
    tool_choice: ToolChoice | None = None
    #: Structured output (None: free text); see `ResponseFormat`.
    response_format: ResponseFormat | None = None


class LlmCallConfig(Wire, frozen=True):
    """Provider, model, reasoning effort and sampling scalars of a call.

    Each field maps onto the same-named `GenerateOptions` field.
    """

    provider: _NonEmpty
    model: _NonEmpty
    reasoning_effort: str | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    max_tokens: _Positive | None = None
    stop: tuple[str, ...] | None = None


class CallConfigDefaults(Wire, frozen=True):
    """Which config fields the adapter supplied rather than the caller."""

    reasoning_effort: bool = False
    max_tokens: bool = False


class ProviderInfo(Wire, frozen=True):
    """Display metadata of one provider route.

    ``price_provider``: the provider id the route's calls are priced under
    in ``genai-prices`` (``openai``, ``anthropic``, ``google``, ...); None
    when the route has no published prices (a local server, the demo), so
    only a price table in ``llmrt.toml`` prices it.
    """

    id: str
    name: str
    price_provider: str | None = None


ModelModality = Literal["text", "image"]


class ModelInfo(Wire, frozen=True):
    """One advertised model. The catalog is advisory, never a request whitelist."""

    provider: str
    id: str
    name: str
    description: str | None = None
    #: Accepted input modalities; ``None`` means unknown.
    input_modalities: tuple[ModelModality, ...] | None = None


class ModelContext(Wire, frozen=True):
    """Context capacity of one exact provider/model route."""

    context_window: _Positive


class ReasoningEffortInfo(Wire, frozen=True):
    """One adapter-owned reasoning effort."""

    id: _NonEmpty
    name: str
    description: str | None = None


class ModelReasoningInfo(Wire, frozen=True):
    """Selectable reasoning efforts of one model, in display order, and the default."""

    efforts: tuple[ReasoningEffortInfo, ...]
    default_effort: str | None = None


class ResolvedModelInfo(Wire, frozen=True):
    """Exact-model metadata resolved by the adapter that owns the route."""

    provider: str
    id: str
    name: str
    description: str | None = None
    input_modalities: tuple[ModelModality, ...] | None = None
    context: ModelContext | None = None
    #: Output cap materialized into requests that set none.
    default_max_tokens: _Positive | None = None
    reasoning: ModelReasoningInfo | None = None


class ConfigurableProvider(Wire, frozen=True):
    """A provider route that configuration could activate, live or dormant."""

    provider: _NonEmpty
    display_name: str
    settings_ns: _NonEmpty
    settings_path: tuple[str, ...] = ()
    #: True when the adapter knows this route only from configuration.
    declared: bool | None = None
    #: The environment variable that, once set, registers this route with no
    #: configuration file (``OPENAI_API_KEY`` for ``openai``): a name, never a value.
    key_env: str | None = None


class ModelDiscoveryRequest(Wire, frozen=True):
    """One interrogation of an endpoint that configuration has not stored yet.

    ``api_key`` is for this interrogation alone and never appears in ``repr``.
    """

    provider: str | None = None
    base_url: str | None = msgspec.field(default=None, name="baseURL")
    api: str | None = None
    api_key: str | None = None

    def __repr__(self) -> str:
        key = "None" if self.api_key is None else "'***'"
        return (
            f"ModelDiscoveryRequest(provider={self.provider!r}, base_url={self.base_url!r}, "
            f"api={self.api!r}, api_key={key})"
        )

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        # msgspec gives every Struct a ``__rich_repr__`` listing raw field
        # values, which rich-based loggers and tracebacks print; mask it too.
        return [
            ("provider", self.provider),
            ("base_url", self.base_url),
            ("api", self.api),
            ("api_key", None if self.api_key is None else "***"),
        ]


class DiscoveredModel(Wire, frozen=True):
    """One model an endpoint reports about itself."""

    id: _NonEmpty
    name: str | None = None
    context_window: _Positive | None = None
    max_tokens: _Positive | None = None
