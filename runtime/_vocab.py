"""Merge-extensible vocabularies: registered content blocks, message sources and finish reasons.

The contract lets plugins add their own block ``type``s, source ``kind``s
and finish ``kind``s (the chunk union stays closed). msgspec's tagged unions
are fixed when a Struct's decoding information is first built, and that
information is cached on the class for the life of the process, so the
built-in unions cannot grow in place. Instead:

* `register_content_block` / `register_message_source` /
  `register_finish_reason` add a frozen `Wire` Struct with its tag to the
  process-wide vocabulary (checked: tag field, frozen, no tag clash).
* Every llmrt decoder keeps its fast, closed decoder. Only when one fails
  validation and something is registered does it retry with `decode_open`:
  a *mirror* of the target type, in which each built-in union that a
  registration extends also holds the registered Structs, and each Struct
  that reaches such a union is replaced by a look-alike (same fields, JSON
  names, tag and defaults). The decoded mirror tree is then rebuilt into the
  real classes (`__post_init__` checks run there), so ``type(x) is Finish``
  and every other identity check keep working.

Encoding needs nothing: msgspec encodes any Struct it finds in a field.

Why a process-wide registry, when house rules forbid module-level
registries: these are *types*, not runtime objects. A Struct class, and the
decoding information msgspec caches on it, is already process-wide; two
runtimes in one process share ``Message`` and so cannot disagree about what
it may contain. The registry is append-only, holds no I/O or state beyond
the classes, and its derived decoders are rebuilt on each registration.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Collection, Iterable
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import msgspec

from ._chunks import FinishReason, StreamChunk
from ._content import ContentBlock, Message, MessageSource, ToolResultBlock
from ._errors import ErrorCode, LlmError
from ._wire import Wire

__all__ = [
    "BUILTIN_BLOCK_TYPES",
    "register_content_block",
    "register_message_source",
    "register_finish_reason",
    "registered_content_blocks",
    "registered_message_sources",
    "registered_finish_reasons",
    "require_block_types",
    "decode_open",
]

S = TypeVar("S", bound=type[Wire])


class _Family:
    """One merge-extensible union: its tag field, its built-in members, its registrations."""

    __slots__ = ("builtins", "name", "registered", "tag_field")

    def __init__(self, name: str, union: Any, tag_field: str) -> None:
        self.name = name
        self.tag_field = tag_field
        self.builtins: tuple[type, ...] = get_args(union)
        self.registered: dict[str, type] = {}

    def tags(self) -> dict[str, type]:
        found = {cls.__struct_config__.tag: cls for cls in self.builtins}  # type: ignore[attr-defined]
        found.update(self.registered)
        return found


_BLOCKS = _Family("content block", ContentBlock, "type")
_SOURCES = _Family("message source", MessageSource, "kind")
_FINISHES = _Family("finish reason", FinishReason, "kind")
_FAMILIES = (_BLOCKS, _SOURCES, _FINISHES)
#: The chunk union is closed: none of its members may join a family.
_CHUNKS = frozenset(get_args(StreamChunk))

#: The built-in block classes: what an adapter that knows no extension can send.
BUILTIN_BLOCK_TYPES: frozenset[type] = frozenset(_BLOCKS.builtins)

_lock = threading.Lock()


class _Mirrors:
    """What is derived from one state of the registrations; replaced, never cleared, on change."""

    __slots__ = ("decoders", "mirror_of", "real_of")

    def __init__(self) -> None:
        #: mirror class -> (real class, field names, fields that may hold mirrors)
        self.real_of: dict[type, tuple[type, tuple[str, ...], frozenset[str]]] = {}
        #: (decoder factory, type) -> mirror decoder, or None when no registration reaches it
        self.decoders: dict[tuple[Any, Any], Any] = {}
        self.mirror_of: dict[Any, Any] = {}


#: `_Mirrors` of the current registrations, or None while nothing is registered
#: (the codecs test this before they retry a failed decode).
_current: list[_Mirrors | None] = [None]


def extended() -> bool:
    """Whether any kind has been registered in this process."""
    return _current[0] is not None


def _register(family: _Family, cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Wire)):
        raise TypeError(f"a {family.name} must be a subclass of llmrt's Wire Struct, got {cls!r}")
    config = cls.__struct_config__
    if config.tag_field != family.tag_field or not isinstance(config.tag, str) or not config.tag:
        raise ValueError(
            f"a {family.name} needs tag_field={family.tag_field!r} and a string tag; "
            f"{cls.__qualname__} has tag_field={config.tag_field!r}, tag={config.tag!r}"
        )
    if not config.frozen:
        raise ValueError(f"a {family.name} must be frozen (wire values are immutable)")
    if cls in _CHUNKS:
        raise ValueError(f"{cls.__qualname__} is a stream chunk: the chunk union stays closed")
    with _lock:
        for other in _FAMILIES:
            if other is not family and cls in (*other.builtins, *other.registered.values()):
                raise ValueError(f"{cls.__qualname__} is already a {other.name}")
        taken = family.tags().get(config.tag)
        if taken is cls:
            return  # registering the same class again changes nothing
        if taken is not None:
            raise ValueError(
                f"{family.name} tag {config.tag!r} of {cls.__qualname__} is already taken by "
                f"{taken.__module__}.{taken.__qualname__}"
            )
        members = (*family.builtins, *family.registered.values(), cls)
        try:
            # Let msgspec check the union (and the new Struct's own fields) now,
            # not on some later decode.
            msgspec.json.Decoder(Union[members])  # noqa: UP007 - a runtime-built union
        except TypeError as exc:
            raise ValueError(f"cannot add {cls.__qualname__} as a {family.name}: {exc}") from None
        family.registered[config.tag] = cls
        _current[0] = _Mirrors()


def register_content_block(cls: S) -> S:
    """Add a content block type to this process's vocabulary; returns ``cls`` (a decorator).

    ``cls`` is a frozen `Wire` Struct with ``tag_field="type"`` and a tag no
    built-in or registered block uses. From then on every llmrt decoder
    (`decode_message`, `decode_chunk`, `decode_request`, `decode`, the
    gateway's frames) accepts it wherever a `ContentBlock` may stand, and
    nested in tool results. Raises `ValueError` on a clash or a bad class.
    """
    _register(_BLOCKS, cls)
    return cls


def register_message_source(cls: S) -> S:
    """Add a message source kind (``tag_field="kind"``); see `register_content_block`."""
    _register(_SOURCES, cls)
    return cls


def register_finish_reason(cls: S) -> S:
    """Add a finish reason kind (``tag_field="kind"``); see `register_content_block`."""
    _register(_FINISHES, cls)
    return cls


def registered_content_blocks() -> tuple[type[Wire], ...]:
    """The content block types registered in this process, in registration order."""
    return tuple(_BLOCKS.registered.values())


def registered_message_sources() -> tuple[type[Wire], ...]:
    """The message source kinds registered in this process, in registration order."""
    return tuple(_SOURCES.registered.values())


def registered_finish_reasons() -> tuple[type[Wire], ...]:
    """The finish reason kinds registered in this process, in registration order."""
    return tuple(_FINISHES.registered.values())


# ---- adapters -------------------------------------------------------------------------------


def require_block_types(
    messages: Iterable[Message], supported: Collection[type] = BUILTIN_BLOCK_TYPES, *, route: str
) -> None:
    """Refuse a request holding a block type the route cannot send, before any I/O.

    Looks at every block, nested tool-result content included. Raises
    `LlmError` (``INVALID_REQUEST``) naming the first unsupported block type
    and the route.
    """
    for message in messages:
        _require(message.content, supported, route)


def _require(blocks: Iterable[Any], supported: Collection[type], route: str) -> None:
    for block in blocks:
        cls = type(block)
        if cls not in supported:
            tag = getattr(getattr(cls, "__struct_config__", None), "tag", None)
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                f"content block type {tag or cls.__qualname__!r} is not supported by route "
                f"{route!r}; remove or convert such blocks before calling it",
            )
        if cls is ToolResultBlock:
            _require(block.content, supported, route)


# ---- decoding -------------------------------------------------------------------------------


def _walk(
    t: Any, on_union: Callable[[tuple[Any, ...]], None], on_struct: Callable[[type], None]
) -> None:
    """Visit the unions and Struct classes named directly in type expression ``t``."""
    origin = get_origin(t)
    if origin is Annotated:
        _walk(get_args(t)[0], on_union, on_struct)
    elif origin is Union or origin is types.UnionType:
        members = get_args(t)
        on_union(members)
        for member in members:
            _walk(member, on_union, on_struct)
    elif origin is not None:
        for arg in get_args(t):
            if arg is not Ellipsis:
                _walk(arg, on_union, on_struct)
    elif isinstance(t, type) and issubclass(t, msgspec.Struct):
        on_struct(t)


def _extra(members: tuple[Any, ...]) -> tuple[type, ...]:
    """The registered Structs a union of ``members`` gains (those of each family it is)."""
    present = set(members)
    extra: list[type] = []
    for family in _FAMILIES:
        if family.registered and present.issuperset(family.builtins):
            extra.extend(cls for cls in family.registered.values() if cls not in present)
    return tuple(extra)


def _field_types(cls: type) -> list[Any]:
    return [field.type for field in msgspec.structs.fields(cls)]


def _plan(root: Any) -> set[type]:
    """The Struct classes reachable from ``root`` that reach an extended union (need a mirror)."""
    edges: dict[type, set[type]] = {}
    direct: set[type] = set()
    todo: list[type] = []

    def visit_struct(cls: type) -> None:
        if cls not in edges:
            edges[cls] = set()
            todo.append(cls)

    def visit_root_union(members: tuple[Any, ...]) -> None:
        for cls in _extra(members):
            visit_struct(cls)

    _walk(root, visit_root_union, visit_struct)
    while todo:
        cls = todo.pop()
        refs = edges[cls]

        def on_union(members: tuple[Any, ...], cls: type = cls) -> None:
            extra = _extra(members)
            if extra:
                direct.add(cls)
                for added in extra:
                    visit_struct(added)
                    edges[cls].add(added)

        def on_struct(ref: type, refs: set[type] = refs) -> None:
            refs.add(ref)
            visit_struct(ref)

        for t in _field_types(cls):
            _walk(t, on_union, on_struct)
    needs = set(direct)
    changed = True
    while changed:
        changed = False
        for cls, refs in edges.items():
            if cls not in needs and refs & needs:
                needs.add(cls)
                changed = True
    return needs


def _substitute(t: Any, mirrors: dict[type, type]) -> Any:
    """``t`` with mirrored Structs swapped in and extended unions grown."""
    origin = get_origin(t)
    if origin is Annotated:
        inner, *meta = get_args(t)
        new = _substitute(inner, mirrors)
        return t if new is inner else Annotated[(new, *meta)]
    if origin is Union or origin is types.UnionType:
        members = get_args(t)
        grown = tuple(_substitute(m, mirrors) for m in members) + tuple(
            mirrors.get(cls, cls) for cls in _extra(members)
        )
        if grown == members:
            return t
        return Union[grown]  # noqa: UP007 - a runtime-built union
    if origin is not None:
        args = get_args(t)
        new_args = tuple(a if a is Ellipsis else _substitute(a, mirrors) for a in args)
        if new_args == args:
            return t
        return origin[new_args]
    if isinstance(t, type):
        return mirrors.get(t, t)
    return t


def _mentions(t: Any, mirrors: dict[type, type]) -> bool:
    found = False

    def on_struct(cls: type) -> None:
        nonlocal found
        found = found or cls in mirrors or bool(_extra((cls,)))

    def on_union(members: tuple[Any, ...]) -> None:
        nonlocal found
        found = found or bool(_extra(members))

    _walk(t, on_union, on_struct)
    return found


def _mirror_type(state: _Mirrors, root: Any) -> Any:
    """The mirror of ``root`` (``root`` itself when no registration reaches it)."""
    mirror = state.mirror_of.get(root)
    if mirror is not None:
        return mirror
    needs = _plan(root)
    mirrors: dict[type, type] = {}
    for cls in needs:
        config = cls.__struct_config__  # type: ignore[attr-defined]
        fields = msgspec.structs.fields(cls)
        spec: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        for field in fields:
            if field.default is not msgspec.NODEFAULT:
                spec.append((field.name, Any, field.default))
            elif field.default_factory is not msgspec.NODEFAULT:
                spec.append((field.name, Any, msgspec.field(default_factory=field.default_factory)))
            else:
                spec.append((field.name, Any))
        mirrors[cls] = msgspec.defstruct(
            cls.__name__,
            spec,
            module=cls.__module__,
            kw_only=True,
            tag_field=config.tag_field,
            tag=config.tag,
            rename={field.name: field.encode_name for field in fields},
            omit_defaults=config.omit_defaults,
            forbid_unknown_fields=config.forbid_unknown_fields,
            array_like=config.array_like,
            frozen=True,
        )
    for cls, mirror_cls in mirrors.items():
        # msgspec reads field types lazily, at the first decoder: set them now
        # that every mirror exists (the types are recursive).
        fields = msgspec.structs.fields(cls)
        mirror_cls.__annotations__.update(
            {field.name: _substitute(field.type, mirrors) for field in fields}
        )
        lifted = frozenset(field.name for field in fields if _mentions(field.type, mirrors))
        state.real_of[mirror_cls] = (cls, tuple(field.name for field in fields), lifted)
    mirror = _substitute(root, mirrors)
    state.mirror_of[root] = mirror
    return mirror


def _lift(real_of: dict[type, tuple[type, tuple[str, ...], frozenset[str]]], value: Any) -> Any:
    """Rebuild a decoded mirror tree into the real classes."""
    entry = real_of.get(type(value))
    if entry is not None:
        real, names, lifted = entry
        return real(
            **{
                name: _lift(real_of, getattr(value, name))
                if name in lifted
                else getattr(value, name)
                for name in names
            }
        )
    kind = type(value)
    if kind is tuple:
        return tuple(_lift(real_of, item) for item in value)
    if kind is list:
        return [_lift(real_of, item) for item in value]
    if kind is dict:
        return {key: _lift(real_of, item) for key, item in value.items()}
    return value


def decode_open(
    make_decoder: Callable[[Any], Any], type: Any, data: Any, failure: Exception
) -> Any:
    """Decode ``data`` as ``type`` with the registered kinds (after the closed decoder failed).

    ``make_decoder`` is ``msgspec.json.Decoder`` or ``msgspec.msgpack.Decoder``;
    ``failure`` is the closed decoder's error, re-raised as is when no
    registration reaches ``type``. Raises ``msgspec.ValidationError`` /
    ``msgspec.DecodeError`` like a msgspec decoder.
    """
    state = _current[0]
    if state is None:
        raise failure
    key = (make_decoder, type)
    decoder = state.decoders.get(key, False)
    if decoder is False:
        with _lock:  # built once per state; a racing builder's result is equivalent
            mirror = _mirror_type(state, type)
            decoder = None if mirror is type else make_decoder(mirror)
            state.decoders[key] = decoder
    if decoder is None:
        raise failure
    value = decoder.decode(data)
    try:
        return _lift(state.real_of, value)
    except (ValueError, TypeError) as exc:
        # A real class's own check (`__post_init__`) refused the value.
        raise msgspec.ValidationError(str(exc)) from None
