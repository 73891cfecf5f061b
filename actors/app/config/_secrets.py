"""What ``llmrt.toml`` refuses as (or as looking like) a secret, and errors that never echo one.

Pure logic on the parsed file (`tomllib`'s dicts and lists), no I/O. Keys
never live in the file: an ``api_key``-like key is refused wherever it
stands, and so is a value that looks like a key where a *name* belongs
(``api_key_env`` names a variable, ``preset`` a preset): a pasted key there
would otherwise be shown by ``llmrt providers``, the serve banner and the
``MISSING_CREDENTIAL`` failure every gateway client receives ("the
environment variable ... is unset"). `llmrt.adapter.looks_like_secret` decides what
looks like a key. Every other secret-looking string of the file is kept out
of every error message (`hidden_values`, `scrub`), whatever check fails.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from llmrt.adapter import REDACTED, looks_like_secret
from llmrt.adapters.plugin import Path

__all__ = ["SECRET_KEYS", "hidden_values", "refusal", "scrub", "secret_name_reason"]

#: Keys that would hold a key itself; refused anywhere in the file.
SECRET_KEYS: Final = frozenset({"api_key", "apikey", "api-key", "apiKey"})
#: Keys whose value is a name: one that looks like a key is refused.
_NAME_KEYS: Final = ("api_key_env", "preset")


def secret_name_reason(key: str) -> str:
    """The reason an ``api_key_env`` or ``preset`` holding a key-like value is refused."""
    if key == "api_key_env":
        return (
            "api_key_env holds what looks like an API key, not the NAME of an environment "
            "variable (the value is not shown); put the key in a variable and name that "
            'variable here, e.g. api_key_env = "MY_API_KEY" (UPPER_SNAKE_CASE words are '
            "never taken for a key)"
        )
    return (
        f"{key} holds what looks like an API key, not a {key} name (the value is not shown); "
        "keys belong in an environment variable named by `api_key_env`"
    )


def refusal(value: object, path: Path = ()) -> tuple[Path, str] | None:
    """The first secret the parsed file holds: (its path, the reason), or None. Never echoes it."""
    if isinstance(value, dict):
        for key, item in value.items():
            where: Path = (*path, key)
            if key in SECRET_KEYS:
                return where, (
                    f"`{key}` is refused: API keys do not belong in a file; put the key in an "
                    'environment variable and name it with `api_key_env = "MY_API_KEY"`'
                )
            if key in _NAME_KEYS and isinstance(item, str) and looks_like_secret(item):
                return where, secret_name_reason(key)
            found = refusal(item, where)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = refusal(item, (*path, index))
            if found is not None:
                return found
    return None


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def hidden_values(raw: object) -> tuple[str, ...]:
    """Every key or string value of the parsed file that looks like a secret, longest first."""
    found = {text for text in _strings(raw) if looks_like_secret(text)}
    return tuple(sorted(found, key=len, reverse=True))


def scrub(text: str, hidden: Sequence[str]) -> str:
    """``text`` with each of ``hidden`` (and its ``repr`` quoting) replaced by ``[redacted]``."""
    for value in hidden:
        if value in text:
            text = text.replace(value, REDACTED)
        quoted = repr(value)[1:-1]
        if quoted != value and quoted in text:
            text = text.replace(quoted, REDACTED)
    return text
