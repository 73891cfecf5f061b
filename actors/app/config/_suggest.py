"""The closest name to a misspelt one in ``llmrt.toml``: keys and adapters (`difflib`).

Pure: given what msgspec reported (an unknown field at a path, an unknown
adapter) and what the schema allows there, the name the writer most likely
meant, or None when nothing is close. Secret-looking names are never
suggested from or to (`llmrt.adapter.looks_like_secret`): a hint must not echo one.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from llmrt.adapter import looks_like_secret
from llmrt.adapters.plugin import ModelSpec, Path, RetryTable

from ._schema import DefaultsTable, GatewayTable, SettingsTable

__all__ = ["closest", "hint", "keys_at"]

#: The file's own tables (the `file_table` fields).
_TOP = ("defaults", "provider", "gateway", "settings")
#: How close a name must be to be offered (difflib's ratio; its default is 0.6).
_CUTOFF = 0.6


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``name`` (case-insensitively), or None."""
    if looks_like_secret(name):
        return None
    pool = {candidate.lower(): candidate for candidate in candidates if candidate != name}
    found = difflib.get_close_matches(name.lower(), list(pool), n=1, cutoff=_CUTOFF)
    return pool[found[0]] if found else None


def hint(name: str, candidates: Iterable[str], quote: str = "`") -> str:
    """`` (did you mean `x`?)`` for the closest candidate, or ``""``."""
    found = closest(name, candidates)
    return f" (did you mean {quote}{found}{quote}?)" if found else ""


def _fields(struct: type[Any]) -> tuple[str, ...]:
    return tuple(struct.__struct_fields__)


def keys_at(path: Path, raw: Mapping[str, Any], configs: Mapping[str, type[Any]]) -> Sequence[str]:
    """The keys the table at ``path`` may hold (``configs``: adapter kind -> config Struct).

    A ``[[provider]]`` entry's keys are its adapter's (every adapter's when
    its ``adapter`` is missing or unknown). Empty for a path it does not know.
    """
    if not path:
        return _TOP
    head, rest = path[0], path[1:]
    if head == "defaults" and not rest:
        return _fields(DefaultsTable)
    if head == "gateway" and not rest:
        return _fields(GatewayTable)
    if head == "settings" and len(rest) == 1:
        return _fields(SettingsTable)
    if head != "provider" or not rest or not isinstance(rest[0], int):
        return ()
    if len(rest) == 1:
        entries = raw.get("provider")
        entry = entries[rest[0]] if isinstance(entries, list) and rest[0] < len(entries) else {}
        kind = entry.get("adapter") if isinstance(entry, dict) else None
        config = configs.get(kind) if isinstance(kind, str) else None
        if config is not None:
            return (*_fields(config), "adapter")
        return sorted({name for each in configs.values() for name in _fields(each)})
    if rest[1:] == ("retry",):
        return _fields(RetryTable)
    if len(rest) == 3 and rest[1] == "models":
        return _fields(ModelSpec)
    return ()
