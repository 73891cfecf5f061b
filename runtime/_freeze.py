"""Deep freezing of the free-form JSON values that wire types carry.

Most of a request is frozen by construction (frozen Structs, tuples). Two
kinds of field hold free-form JSON: a tool's ``parameters`` schema and an
adapter's replay state. They are deep-frozen when their Struct is built, so
a middleware or adapter that tries to change a request raises instead of
rewriting the caller's object.

`FrozenDict` is a `dict` and `FrozenList` a `list` (so msgspec, `json`,
``isinstance`` checks and comparisons with plain values keep working) whose
mutating methods raise `TypeError`. Both encode exactly as before.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["FrozenDict", "FrozenList", "deep_freeze"]


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is immutable (requests are deep-frozen)")


class FrozenDict(dict[str, Any]):
    """A read-only `dict`; build one with `deep_freeze`, which freezes its values too."""

    __slots__ = ()

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (deep_freeze, (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


class FrozenList(list[Any]):
    """A read-only `list`; build one with `deep_freeze`, which freezes its items too."""

    __slots__ = ()

    __setitem__ = _refuse
    __delitem__ = _refuse
    __iadd__ = _refuse
    __imul__ = _refuse
    append = _refuse
    clear = _refuse
    extend = _refuse
    insert = _refuse
    pop = _refuse
    remove = _refuse
    reverse = _refuse
    sort = _refuse

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> FrozenList:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (deep_freeze, (list(self),))

    def __repr__(self) -> str:
        return f"FrozenList({list.__repr__(self)})"


_FROZEN = (FrozenDict, FrozenList, str, int, float, bool, type(None))


def deep_freeze(value: Any) -> Any:
    """`value` with every dict made a `FrozenDict`, every list a `FrozenList` and
    every tuple's items frozen, recursively.

    Values that are frozen already come back as they are (a frozen container
    is only ever built frozen all the way down), so freezing twice is cheap.
    """
    kind = type(value)
    if kind in _FROZEN:
        return value
    if isinstance(value, dict):
        return FrozenDict({k: deep_freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return FrozenList([deep_freeze(v) for v in value])
    if isinstance(value, tuple):
        return tuple(deep_freeze(v) for v in value)
    return value
