"""Optional request features: what a request asks of its adapter, and the refusal when it cannot.

A few `GenerateOptions` fields change the answer only if the provider honours
them: a tool choice, structured output, strict tool schemas. An adapter that
would not send one must not drop it silently, so each adapter declares the
features it sends (`Adapter.request_features`, none by default) and the call
path checks the request against that declaration before `Adapter.stream`:
a request that needs more ends with an ``INVALID_REQUEST`` error finish
naming the feature and the route, and no request leaves the process.

Values that ask nothing of the provider need no feature: ``tool_choice``
``auto`` (every provider's default), a tool with ``strict`` False or None.
"""

from __future__ import annotations

from typing import Final

from ._adapter import Adapter
from ._errors import ErrorCode, LlmFailure
from ._request import (
    GenerateOptions,
    JsonObjectFormat,
    JsonSchemaFormat,
    NamedToolChoice,
)

__all__ = [
    "REQUEST_FEATURES",
    "TOOL_CHOICE",
    "JSON_SCHEMA",
    "JSON_OBJECT",
    "STRICT_TOOLS",
    "required_features",
    "refuse_unsupported",
]

#: ``tool_choice`` other than ``auto``.
TOOL_CHOICE: Final = "tool-choice"
#: ``response_format`` a `JsonSchemaFormat`.
JSON_SCHEMA: Final = "json-schema"
#: ``response_format`` a `JsonObjectFormat`.
JSON_OBJECT: Final = "json-object"
#: A tool with ``strict`` True.
STRICT_TOOLS: Final = "strict-tools"
#: Every feature an adapter may declare.
REQUEST_FEATURES: Final = frozenset({TOOL_CHOICE, JSON_SCHEMA, JSON_OBJECT, STRICT_TOOLS})

_WHAT: Final = {
    TOOL_CHOICE: "a tool choice other than `auto`",
    JSON_SCHEMA: "structured output with a JSON schema",
    JSON_OBJECT: "JSON-object output",
    STRICT_TOOLS: "strict tool schemas (`strict: true`)",
}


def required_features(options: GenerateOptions) -> frozenset[str]:
    """The features ``options`` needs from its adapter (empty for most requests)."""
    needed: set[str] = set()
    choice = options.tool_choice
    if choice is not None and choice != "auto":
        needed.add(TOOL_CHOICE)
    fmt = options.response_format
    if type(fmt) is JsonSchemaFormat:
        needed.add(JSON_SCHEMA)
    elif type(fmt) is JsonObjectFormat:
        needed.add(JSON_OBJECT)
    if options.tools and any(tool.strict for tool in options.tools):
        needed.add(STRICT_TOOLS)
    return frozenset(needed)


def _inconsistent(options: GenerateOptions) -> str | None:
    choice = options.tool_choice
    names = {tool.name for tool in options.tools or ()}
    if choice == "required" and not names:
        return "`toolChoice` `required` needs at least one tool in `tools`"
    if type(choice) is NamedToolChoice and choice.name not in names:
        return f"`toolChoice` names the tool {choice.name!r}, which is not in `tools`"
    return None


def refuse_unsupported(adapter: Adapter, options: GenerateOptions) -> LlmFailure | None:
    """The ``INVALID_REQUEST`` failure of a request its adapter cannot honour, else None.

    Also refuses a tool choice that names no offered tool. Calls
    `Adapter.request_features` only when the request needs a feature, so the
    common request costs one set build; whatever that method raises
    propagates (it is the adapter's failure).
    """
    problem = _inconsistent(options)
    if problem is not None:
        return LlmFailure(message=problem, code=ErrorCode.INVALID_REQUEST)
    needed = required_features(options)
    if not needed:
        return None
    missing = needed - adapter.request_features(options.provider, options.model)
    if not missing:
        return None
    listed = ", ".join(f"{_WHAT[name]} ({name})" for name in sorted(missing))
    return LlmFailure(
        message=f"the route {options.provider!r} (model {options.model!r}) cannot honour "
        f"{listed}; leave it out or use a route whose adapter sends it",
        code=ErrorCode.INVALID_REQUEST,
    )
