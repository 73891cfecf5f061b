"""What ``llmrt call`` reads besides its flags: a prompt on stdin, tool schemas, a model name.

Each reader is bounded and raises `ValueError` with a message naming the
option, so a mistake is one line on stderr and exit status 2, never a
traceback or a request the provider would refuse for a reason the user
cannot see.

The ``--tools FILE`` shape: a JSON array of tools, each an object with

* ``name`` (required): the tool's name, as the model will call it;
* ``description`` (optional, default ``""``): what the tool does, for the model;
* ``parameters`` (optional, default ``{"type": "object"}``): the JSON Schema
  of the tool's arguments.

That is the ``tools`` member of a ``call`` frame of the websocket protocol
(``docs/protocol.md``), so a file written for one serves the other. No other
member is accepted: an entry in OpenAI's ``{"type": "function", "function":
{...}}`` form is refused with a note saying to write its ``function`` object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, BinaryIO

import msgspec

from llmrt import ToolSchema
from llmrt.adapters.plugin import ModelSpec

__all__ = [
    "MAX_PROMPT_BYTES",
    "MAX_TOOLS_FILE_BYTES",
    "model_warning",
    "read_prompt",
    "read_tools",
]

#: The most ``llmrt call -`` reads from stdin.
MAX_PROMPT_BYTES = 8 * 1024 * 1024
#: The largest ``--tools`` file.
MAX_TOOLS_FILE_BYTES = 1024 * 1024
#: Models named in the unknown-model warning; the rest are counted.
_LISTED = 8


def read_prompt(arg: str, stdin: BinaryIO) -> str:
    """The prompt: ``arg``, or with ``-`` the whole of stdin (UTF-8, trailing newlines
    dropped: ``echo hi | llmrt call -`` asks ``hi``)."""
    if arg != "-":
        return arg
    data = stdin.read(MAX_PROMPT_BYTES + 1)
    if len(data) > MAX_PROMPT_BYTES:
        raise ValueError(f"the prompt on stdin is over {MAX_PROMPT_BYTES // (1024 * 1024)} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the prompt on stdin is not UTF-8 (byte {exc.start})") from None
    text = text.rstrip("\r\n")
    if not text.strip():
        raise ValueError("the prompt on stdin is empty")
    return text


class _ToolEntry(msgspec.Struct, forbid_unknown_fields=True):
    """One entry of a ``--tools`` file (see the module docstring)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object"})


_entries = msgspec.json.Decoder(list[Any])


def _tool(name: str, description: str, parameters: Any, where: str) -> ToolSchema:
    if not name or name != name.strip() or any(c.isspace() for c in name):
        raise ValueError(f"{where}: a tool name is one word, not {name!r}")
    if not isinstance(parameters, dict):
        raise ValueError(f"{where}: the schema of tool {name!r} is not a JSON object")
    return ToolSchema(name=name, description=description, parameters=parameters)


def _from_option(text: str) -> ToolSchema:
    """``--tool NAME=SCHEMA_JSON`` (or ``--tool NAME``: a tool that takes no arguments)."""
    name, eq, schema = text.partition("=")
    where = f"--tool {name or text}"
    if not eq:
        return _tool(name, "", {"type": "object"}, where)
    try:
        parameters = msgspec.json.decode(schema)
    except msgspec.DecodeError as exc:
        raise ValueError(f"{where}: the schema is not JSON ({exc})") from None
    return _tool(name, "", parameters, where)


def _from_file(path: str) -> list[ToolSchema]:
    where = f"--tools {path}"
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_TOOLS_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{where}: {exc.strerror or exc}") from None
    if len(data) > MAX_TOOLS_FILE_BYTES:
        raise ValueError(f"{where}: the file is over {MAX_TOOLS_FILE_BYTES // 1024} KiB")
    try:
        raw = _entries.decode(data)
    except msgspec.ValidationError:
        raise ValueError(f"{where}: the file must hold a JSON array of tools") from None
    except msgspec.DecodeError as exc:
        raise ValueError(f"{where}: not JSON ({exc})") from None
    tools = []
    for n, item in enumerate(raw):
        if isinstance(item, dict) and "function" in item and "name" not in item:
            raise ValueError(
                f"{where}: entry {n} is in OpenAI's form; write its `function` object "
                "(name, description, parameters) instead"
            )
        try:
            entry = msgspec.convert(item, _ToolEntry)
        except msgspec.ValidationError as exc:
            raise ValueError(f"{where}: entry {n}: {exc}") from None
        tools.append(_tool(entry.name, entry.description, entry.parameters, f"{where}: entry {n}"))
    return tools


def read_tools(options: Sequence[str], file: str | None) -> tuple[ToolSchema, ...] | None:
    """The tools offered: those of ``--tools FILE`` first, then each ``--tool`` in order.
    None when there are none. Two tools of one name are refused."""
    tools = _from_file(file) if file is not None else []
    tools += [_from_option(text) for text in options]
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise ValueError(f"two tools are named {tool.name!r}")
        seen.add(tool.name)
    return tuple(tools) or None


def model_warning(route: str, model: str, known: Sequence[ModelSpec]) -> str | None:
    """A warning when ``model`` is not among the models route ``route`` knows, else None.

    Only a warning: the endpoint may serve models its table does not list.
    A route with no table (one that asks its endpoint) knows no list to check.
    """
    ids = [spec.id for spec in known]
    if not ids or model in ids:
        return None
    listed = ", ".join(ids[:_LISTED])
    if len(ids) > _LISTED:
        listed += f" and {len(ids) - _LISTED} more"
    return (
        f"model {model!r} is not one route {route!r} knows ({listed}); "
        "sending it anyway (`llmrt models " + route + "` lists what the endpoint serves)"
    )
