"""A constructed request checked against its Struct's own constraints.

msgspec checks a Struct's field constraints (``Meta`` bounds, lengths,
literals, types) when it decodes one, never when Python code constructs
one. So ``GenerateOptions(temperature=-1)`` built in-process would reach an
adapter, while the same request sent to the gateway is refused. The
runtime closes that gap here, from the same source: each checked Struct
gets a mirror Struct generated from its own annotations, with the same
types and ``Meta`` constraints, and `invalid_reason` converts the value
into it attribute by attribute (``msgspec.convert(..., from_attributes=True)``).
msgspec then validates exactly what its decoder validates, with the same
messages; the paths are rewritten to the JSON field names the decoder uses.

What the mirror covers: every top-level field of a scalar type (strings,
numbers, booleans, literals, tuples of those, with their constraints), and
nested Structs that carry a constraint of their own (`ToolSchema`'s name).
The conversation itself (``messages``) is not walked: walking a long
history per call would cost far more than the rest of the check, and the
message tree's one constrained Struct, `ImageAttachmentRef`, enforces its
constraints in its constructor (tests/test_validation.py keeps that list
complete). A check costs well under a microsecond.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

import attrs
import msgspec

from ._request import GenerateOptions, LlmCallConfig

__all__ = ["invalid_reason", "CHECKED_TYPES", "UNWALKED"]

_SCALARS: frozenset[Any] = frozenset({str, int, float, bool, type(None)})
_PATH_NAME = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)")


def _has_constraint(tp: Any) -> bool:
    """True when ``tp`` (or a Struct inside it) carries a ``Meta`` constraint."""
    return _constrained(tp, set())


def _constrained(tp: Any, seen: set[Any]) -> bool:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *meta = typing.get_args(tp)
        if any(isinstance(m, msgspec.Meta) and _bounds(m) for m in meta):
            return True
        return _constrained(base, seen)
    if origin is not None:
        return any(_constrained(arg, seen) for arg in typing.get_args(tp) if arg is not Ellipsis)
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct) and tp not in seen:
        seen.add(tp)
        hints = typing.get_type_hints(tp, include_extras=True)
        return any(_constrained(hints[name], seen) for name in tp.__struct_fields__)
    return False


def _bounds(meta: msgspec.Meta) -> bool:
    names = ("gt", "ge", "lt", "le", "multiple_of", "pattern", "min_length", "max_length")
    return any(getattr(meta, name) is not None for name in names)


def _mirror_type(tp: Any, names: dict[str, str]) -> Any | None:
    """``tp`` as the mirror checks it, or None when the mirror leaves it out."""
    if tp in _SCALARS:
        return tp
    origin = typing.get_origin(tp)
    if origin is Annotated:
        # Only scalars carry constraints in the vocabulary: keep the annotation whole.
        base = typing.get_args(tp)[0]
        return tp if base in _SCALARS else None
    if origin is Literal:
        return tp
    if origin is Union or origin is types.UnionType:
        members = [_mirror_type(arg, names) for arg in typing.get_args(tp)]
        structs = sum(isinstance(m, type) and issubclass(m, msgspec.Struct) for m in members)
        if any(m is None for m in members) or structs > 1:
            return None  # a union of several Structs needs their tags: not mirrored
        return Union[tuple(members)]  # noqa: UP007 - built from a runtime tuple
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _mirror_type(args[0], names)
            return None if item is None else tuple[item, ...]  # type: ignore[valid-type]
        return None
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct) and _has_constraint(tp):
        return _mirror_struct(tp, names)
    return None  # dicts, Any, and Structs without constraints (the messages)


def _mirror_struct(
    cls: type[msgspec.Struct], names: dict[str, str], skip: frozenset[str] = frozenset()
) -> Any:
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = []
    for info in msgspec.structs.fields(cls):
        if info.name in skip:
            continue
        mirrored = _mirror_type(hints[info.name], names)
        if mirrored is None:
            continue
        fields.append((info.name, mirrored))
        names[info.name] = info.encode_name
    return msgspec.defstruct(f"_{cls.__name__}Check", fields, kw_only=True)


@attrs.frozen
class _Check:
    """The mirror of one Struct type, and how its problems are worded."""

    mirror: Any
    what: str
    #: Python field name -> the JSON name the decoder's paths use.
    names: Mapping[str, str]

    @classmethod
    def of(
        cls, struct: type[msgspec.Struct], what: str, skip: frozenset[str] = frozenset()
    ) -> _Check:
        names: dict[str, str] = {}
        mirror = _mirror_struct(struct, names, skip)
        return cls(mirror, what, names)

    def reason(self, value: object) -> str | None:
        try:
            msgspec.convert(value, self.mirror, from_attributes=True)
        except msgspec.ValidationError as exc:
            return f"{self.what}: {self._wire_paths(str(exc))}"
        return None

    def _wire_paths(self, text: str) -> str:
        head, sep, path = text.rpartition(" - at `")
        if not sep:
            return f"{text} - at `$`"
        names = self.names
        return head + sep + _PATH_NAME.sub(lambda m: "." + names.get(m[1], m[1]), path)


#: Fields of a request the check does not walk (see the module docstring).
UNWALKED: frozenset[str] = frozenset({"messages"})

_CHECKS: Mapping[type, _Check] = types.MappingProxyType(
    {
        GenerateOptions: _Check.of(GenerateOptions, "invalid request", UNWALKED),
        LlmCallConfig: _Check.of(LlmCallConfig, "invalid call config"),
    }
)
#: The Struct types `invalid_reason` checks.
CHECKED_TYPES: tuple[type, ...] = tuple(_CHECKS)


def invalid_reason(value: GenerateOptions | LlmCallConfig) -> str | None:
    """Why ``value`` breaks its Struct's constraints, or None when it keeps them.

    The wording is the decoder's: ``invalid request: Expected `float` >= 0.0 -
    at `$.temperature``` (the gateway says the same, under ``$.request``).
    No I/O, no checkpoint.
    """
    check = _CHECKS.get(type(value))
    if check is None:
        raise TypeError(f"cannot check a {type(value).__name__}")
    return check.reason(value)
