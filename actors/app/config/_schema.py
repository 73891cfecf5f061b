"""The ``llmrt.toml`` schema (msgspec) and the locator that maps a value's path to its line.

Pure logic: no I/O. The schema mirrors the file's tables one to one, with
snake_case keys and ``forbid_unknown_fields`` so a typo is an error, not a
silently ignored setting. A ``[[provider]]`` entry is the config Struct of
its adapter (`llmrt.adapters.plugin.AdapterConfig`, one per installed
adapter); checks types cannot express (routes, retry values) live in
`llmrt.actors.app.config._validate`.
"""

from __future__ import annotations

import contextlib
import functools
import re
from typing import Annotated, Any, Literal, Union

import msgspec

from llmrt.adapters.plugin import AdapterConfig, Path

from ...call_log._settings import CallLogSettings
from ...routing import Group, RoutingSettings

__all__ = [
    "file_table",
    "DefaultsTable",
    "GatewayTable",
    "PriceEntry",
    "SettingsTable",
    "Path",
    "format_path",
    "parse_path",
    "locate_lines",
]

_Positive = Annotated[int, msgspec.Meta(ge=1)]
_PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
_NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]


class _Table(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A TOML table: every key it may hold is a field; any other key is an error."""


class DefaultsTable(_Table, frozen=True):
    """``[defaults]``: settings every route inherits unless it overrides them."""

    stream_idle_timeout: float | None = None


class SettingsTable(_Table, frozen=True):
    """``[settings.NAME]``: one settings namespace, whose routes share a model discovery."""

    #: The list its endpoints are asked for: ``"openai"`` (``GET /models``) or ``"ollama"``.
    discovery: str = "openai"
    #: The endpoint asked when a discovery request names neither a route nor a URL.
    base_url: str | None = None
    api_key_env: str | None = None


class GatewayTable(_Table, frozen=True):
    """``[gateway]``: settings of the websocket gateway (``llmrt serve``)."""

    #: Browser origins allowed besides the gateway's own (``*``: any, with a token only).
    allow_origin: tuple[str, ...] = ()
    #: Seconds without a call in flight after which a connection is closed.
    idle_timeout: float | None = None
    #: Open connections per peer address.
    max_connections_per_peer: _Positive | None = None
    #: Bytes of encoded chunks one connection may queue for its slow client.
    max_pending_bytes: _Positive | None = None
    #: The largest frame in either direction (at least 4096).
    max_frame_bytes: _Positive | None = None
    #: Let ``discover-models`` frames name any endpoint URL (off: configured endpoints only).
    discover_any_url: bool | None = None
    #: With ``discover_any_url``: let those URLs reach loopback and private addresses.
    discover_allow_private: bool | None = None
    #: Connections not done with their request head, over all peers, and the bytes they hold.
    max_pre_head_connections: _Positive | None = None
    max_pre_head_bytes: _Positive | None = None
    #: Token buckets on metadata frames, per connection and per peer address.
    metadata_per_second: _PositiveFloat | None = None
    metadata_burst: _Positive | None = None
    metadata_per_peer_per_second: _PositiveFloat | None = None
    metadata_per_peer_burst: _Positive | None = None
    #: Seconds a model list is answered from the gateway's cache (0: not cached).
    model_list_ttl: _NonNegativeFloat | None = None
    #: Who may read ``/metrics``: anyone (``"open"``) or holders of the gateway token.
    metrics_auth: Literal["open", "token"] | None = None


class PriceEntry(_Table, frozen=True):
    """``[[price]]``: one model's price on one route, in US dollars per million tokens."""

    provider: Annotated[str, msgspec.Meta(min_length=1)]
    model: Annotated[str, msgspec.Meta(min_length=1)]
    input_mtok: _NonNegativeFloat
    output_mtok: _NonNegativeFloat
    cache_read_mtok: _NonNegativeFloat | None = None
    cache_write_mtok: _NonNegativeFloat | None = None
    reasoning_mtok: _NonNegativeFloat | None = None


@functools.cache
def file_table(configs: tuple[type[AdapterConfig], ...]) -> type[msgspec.Struct]:
    """The whole file's schema, its ``[[provider]]`` entries a tagged union of ``configs``.

    The installed adapters' config Structs are the union (tag field ``adapter``).
    """
    entry: Any = Union[configs]  # noqa: UP007  # a union of a runtime tuple of types
    return msgspec.defstruct(
        "FileTable",
        [
            ("defaults", DefaultsTable, msgspec.field(default_factory=DefaultsTable)),
            ("provider", tuple[entry, ...], ()),
            ("gateway", GatewayTable, msgspec.field(default_factory=GatewayTable)),
            ("settings", dict[str, SettingsTable], msgspec.field(default_factory=dict)),
            # Routing groups (``[[group]]`` with ``[[group.deployment]]``) and ``[routing]``.
            ("group", tuple[Group, ...], ()),
            ("routing", RoutingSettings, msgspec.field(default_factory=RoutingSettings)),
            # ``[call_log]``: None when absent (the call log is off).
            ("call_log", CallLogSettings | None, None),
            # Prices that override or add to genai-prices' (``[[price]]``).
            ("price", tuple[PriceEntry, ...], ()),
        ],
        bases=(_Table,),
        frozen=True,
        kw_only=True,
        forbid_unknown_fields=True,
    )


# ---- paths ---------------------------------------------------------------------------------

_SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]")


def format_path(path: Path) -> str:
    """``("provider", 1, "adapter")`` as msgspec writes it: ``$.provider[1].adapter``."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def parse_path(text: str) -> Path:
    """The inverse of `format_path` for the paths msgspec reports (best effort)."""
    parts: list[str | int] = []
    for match in _SEGMENT.finditer(text):
        key, index = match.groups()
        parts.append(int(index) if index is not None else key)
    return tuple(parts)


# ---- the locator ---------------------------------------------------------------------------

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


class _Scanner:
    """Walks a TOML text that `tomllib` already accepted and records where each path starts.

    Not a parser: it only tracks tables, keys, arrays and inline tables well
    enough to find the line of a key, of an ``[[array]]`` entry or of an array
    element; values are skipped.
    """

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.line = 1
        self.lines: dict[Path, int] = {}
        # The number of entries seen so far of each array of tables (by concrete path).
        self.arrays: dict[Path, int] = {}

    def record(self, path: Path) -> None:
        self.lines.setdefault(path, self.line)

    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def skip_blank(self, newlines: bool) -> None:
        """Skip spaces, tabs, comments and (when ``newlines``) line breaks."""
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t\r":
                self.i += 1
            elif c == "\n" and newlines:
                self.i += 1
                self.line += 1
            elif c == "#":
                end = s.find("\n", self.i)
                self.i = len(s) if end < 0 else end
            else:
                return

    def skip_string(self) -> str:
        """Skip one string of any of TOML's four kinds; return its (roughly decoded) text."""
        s = self.s
        for delim in ('"""', "'''"):
            if s.startswith(delim, self.i):
                start = self.i + 3
                j = start
                while True:
                    j = s.find(delim, j)
                    if j < 0:
                        j = len(s)
                        break
                    if delim == "'''" or not _escaped(s, j):
                        break
                    j += 1
                # Up to two quotes may close the content right before the delimiter.
                while s.startswith(delim[0], j + 3):
                    j += 1
                self.line += s.count("\n", self.i, j)
                self.i = min(len(s), j + 3)
                return s[start:j]
        quote = s[self.i]
        j = self.i + 1
        while j < len(s) and s[j] != quote and s[j] != "\n":
            j += 2 if quote == '"' and s[j] == "\\" else 1
        text = s[self.i + 1 : j]
        self.i = j + 1
        return text.replace('\\"', '"').replace("\\\\", "\\") if quote == '"' else text

    def read_key(self) -> tuple[str, ...]:
        parts: list[str] = []
        while True:
            self.skip_blank(newlines=False)
            if self.peek() in ('"', "'"):
                parts.append(self.skip_string())
            else:
                start = self.i
                while self.i < len(self.s) and self.s[self.i] in _BARE:
                    self.i += 1
                if self.i == start:
                    raise ValueError("not a key")
                parts.append(self.s[start : self.i])
            self.skip_blank(newlines=False)
            if self.peek() != ".":
                return tuple(parts)
            self.i += 1

    def concrete(self, keys: tuple[str, ...]) -> Path:
        """A table header's keys with the current index of every array of tables inserted."""
        path: Path = ()
        for key in keys:
            path = (*path, key)
            if path in self.arrays:
                path = (*path, self.arrays[path] - 1)
        return path

    def key_value(self, table: Path, *, inline: bool) -> None:
        keys = self.read_key()
        for n in range(1, len(keys) + 1):
            self.record((*table, *keys[:n]))
        self.skip_blank(newlines=False)
        if self.peek() != "=":
            raise ValueError("expected '='")
        self.i += 1
        self.skip_blank(newlines=False)
        self.value((*table, *keys))

    def value(self, path: Path) -> None:
        c = self.peek()
        if c in ('"', "'"):
            self.skip_string()
        elif c == "[":
            self.i += 1
            index = 0
            while True:
                self.skip_blank(newlines=True)
                if self.peek() in ("]", ""):
                    self.i += 1
                    return
                self.record((*path, index))
                self.value((*path, index))
                index += 1
                self.skip_blank(newlines=True)
                if self.peek() == ",":
                    self.i += 1
        elif c == "{":
            self.i += 1
            while True:
                self.skip_blank(newlines=True)
                if self.peek() in ("}", ""):
                    self.i += 1
                    return
                self.key_value(path, inline=True)
                self.skip_blank(newlines=True)
                if self.peek() == ",":
                    self.i += 1
        else:  # number, bool, date: runs to a delimiter
            while self.i < len(self.s) and self.s[self.i] not in ",]}\n#":
                self.i += 1

    def run(self) -> None:
        table: Path = ()
        while True:
            self.skip_blank(newlines=True)
            if self.i >= len(self.s):
                return
            before = self.i
            if self.peek(2) == "[[":
                self.i += 2
                keys = self.read_key()
                base = (*self.concrete(keys[:-1]), keys[-1])
                count = self.arrays.get(base, 0)
                self.arrays[base] = count + 1
                table = (*base, count)
                self.record(base)
                self.record(table)
                self.i = self.s.index("]]", self.i) + 2
            elif self.peek() == "[":
                self.i += 1
                table = self.concrete(self.read_key())
                self.record(table)
                self.i = self.s.index("]", self.i) + 1
            else:
                self.key_value(table, inline=False)
            if self.i <= before:  # no progress: stop rather than loop
                return


def _escaped(s: str, j: int) -> bool:
    """Whether the character at ``j`` is escaped by an odd run of backslashes."""
    n = 0
    while j - n - 1 >= 0 and s[j - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def locate_lines(text: str) -> dict[Path, int]:
    """The 1-based line where each table, key, ``[[array]]`` entry and array element starts.

    ``text`` must be TOML that `tomllib` accepted; on anything unexpected the
    scan stops and returns what it found so far (lines are a best effort).
    """
    scanner = _Scanner(text)
    with contextlib.suppress(ValueError, IndexError):
        scanner.run()
    return scanner.lines
