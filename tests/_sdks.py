"""The provider SDKs the front-door tests read llmrt with, imported when first used.

``import anthropic`` costs about 1.8 s of CPU and ``import openai`` 0.7 s
(pydantic models by the hundred). Every pytest process collects every test
file, so a module-level import made each of them pay, though only the process
that runs the SDK tests uses one: `conftest.py` hands all the files that use
them to one process (`SDK_FILES`). Here each name stands for its module and
imports it at the first read of a public attribute: a test module reads
``openai.types.chat.ChatCompletion`` where it would have imported the class,
and parametrizes by a class's name, not the class.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

__all__ = ["Deferred", "anthropic", "coredis", "httpx2", "openai", "type_adapter"]


class Deferred:
    """A module imported at the first read of one of its public attributes.

    Not a module object: pytest reads every name in a test module's namespace
    at collection (``__test__``, ``__class__``, fixture markers) and a lazy
    module (`importlib.util.LazyLoader`) runs at the first read of any
    attribute. Here a private or dunder name is looked up on the proxy alone.
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<deferred module {self._name!r}>"


anthropic: Any = Deferred("anthropic")
openai: Any = Deferred("openai")
#: The HTTP library both SDKs are built on (its ``MockTransport`` serves them in memory).
httpx2: Any = Deferred("httpx2")
#: The Redis client of llmrt's routing state (0.3 s), for the tests that inspect Redis.
coredis: Any = Deferred("coredis")


@functools.cache
def type_adapter(path: str) -> Any:
    """A pydantic ``TypeAdapter`` for the type at ``path`` (``"anthropic.types.X"``), built once."""
    import pydantic

    module, _, name = path.rpartition(".")
    return pydantic.TypeAdapter(getattr(importlib.import_module(module), name))
