"""Deterministic arguments for a tool, shaped from its JSON Schema (the demo model's calls).

`sample_arguments` fills a tool's *required* properties, each with a value
of its type: ``text`` (the user's words) for a string, the least number a
bound allows (else 1) for a number or an integer, ``true`` for a boolean,
the first of an ``enum``, a ``const`` or a ``default`` as given, the fewest
items ``minItems`` asks for in an array, and an object's own required
properties. ``anyOf``/``oneOf`` take their first choice, ``allOf`` merges,
and local ``$ref`` (``#/$defs/...``, ``#/definitions/...``) are followed.
The same schema and text always give the same arguments.

A schema that gives the object no shape at all (``{"type": "object"}``: no
properties, nothing required) takes any object: it gets ``{"input": text}``,
so the call still carries the words.

Schemas come from the caller and can be anything: the walk is bounded in
depth (`MAX_DEPTH`), in array items (`MAX_ITEMS`) and in values sampled
(`MAX_VALUES`), so a cycle of ``$ref`` ends at a bound; a shape it does not
know gets ``None``. Nothing here validates the schema: the provider the
tool is really meant for does that.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_ITEMS", "MAX_VALUES", "sample_arguments"]

#: Nesting the walk follows (objects, arrays, references) before it answers ``None``.
MAX_DEPTH = 16
#: The most items a sampled array gets, whatever ``minItems`` asks.
MAX_ITEMS = 8
#: The most values one call samples: references can fan out (each of ten
#: required properties naming a definition with ten more...), the walk cannot.
MAX_VALUES = 1_000
_STRING_LIMIT = 200


def sample_arguments(schema: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The arguments of one call of a tool whose parameters are ``schema``."""
    if not any(key in schema for key in _SHAPED):
        return {"input": text[:_STRING_LIMIT]}
    value = _Sampler(schema, text[:_STRING_LIMIT] or "demo").value(schema, 0)
    return value if isinstance(value, dict) else {}


#: Keys that give an object schema a shape; without any, any object fits.
_SHAPED = ("properties", "required", "anyOf", "oneOf", "allOf", "$ref")


class _Sampler:
    def __init__(self, root: Mapping[str, Any], text: str) -> None:
        self.root = root
        self.text = text
        self.left = MAX_VALUES

    def value(self, schema: Any, depth: int) -> Any:
        self.left -= 1
        if depth > MAX_DEPTH or self.left < 0 or not isinstance(schema, Mapping):
            return None
        if "$ref" in schema:
            return self.value(self._resolve(schema["$ref"]), depth + 1)
        for key in ("const", "default"):
            if key in schema:
                return schema[key]
        enum = schema.get("enum")
        if isinstance(enum, list | tuple) and enum:
            return enum[0]
        for key in ("anyOf", "oneOf"):
            choices = schema.get(key)
            if isinstance(choices, list | tuple) and choices:
                return self.value(choices[0], depth + 1)
        if isinstance(schema.get("allOf"), list | tuple):
            return self.value(_merged(schema), depth + 1)
        kind = _kind(schema)
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, depth)
        if kind == "string":
            return self._string(schema)
        if kind in ("integer", "number"):
            return _number(schema, integer=kind == "integer")
        if kind == "boolean":
            return True
        return None

    def _resolve(self, ref: Any) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return None  # only references into the schema itself
        node: Any = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return node

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        if not isinstance(required, list | tuple):
            required = ()
        names = [name for name in required if isinstance(name, str)]
        return {name: self.value(properties.get(name, {}), depth + 1) for name in names}

    def _array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        wanted = schema.get("minItems")
        n = min(wanted, MAX_ITEMS) if isinstance(wanted, int) and wanted > 0 else 0
        return [self.value(schema.get("items", {}), depth + 1) for _ in range(n)]

    def _string(self, schema: Mapping[str, Any]) -> str:
        text = self.text
        longest = schema.get("maxLength")
        if isinstance(longest, int) and longest >= 0:
            text = text[:longest]
        shortest = schema.get("minLength")
        if isinstance(shortest, int) and len(text) < shortest:
            text += "x" * (min(shortest, _STRING_LIMIT) - len(text))
        return text


def _kind(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list | tuple):  # ["string", "null"]: the first that is not null
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def _merged(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``allOf``'s parts as one schema: properties joined, required lists concatenated."""
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    properties = dict(merged.get("properties") or {})
    required = list(merged.get("required") or [])
    for part in schema["allOf"]:
        if not isinstance(part, Mapping):
            continue
        for key, value in part.items():
            if key == "properties" and isinstance(value, Mapping):
                properties.update(value)
            elif key == "required" and isinstance(value, list | tuple):
                required += [n for n in value if n not in required]
            else:
                merged.setdefault(key, value)
    if properties:
        merged["properties"] = properties
    if required:
        merged["required"] = required
    return merged


def _number(schema: Mapping[str, Any], *, integer: bool) -> int | float:
    """The least value the bounds allow, else 1 (clamped to ``maximum``)."""
    value: float = 1
    low, low_open, high = (
        _finite(schema.get(k)) for k in ("minimum", "exclusiveMinimum", "maximum")
    )
    if low is not None:
        value = low
    elif low_open is not None:
        value = math.floor(low_open) + 1 if integer else low_open + 1
    if high is not None:
        value = min(value, high)
    if integer:
        return math.ceil(value)
    return float(value)


def _finite(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value
    return None
