"""``llmrt.toml``: provider routes from a config file, plus zero-config detection.

`load_config` reads and validates the file (pure: no I/O besides reading it),
adds a route for each well-known API-key variable that is set and not
already used by the file, and always adds the built-in ``demo`` route unless
the file declares one. `register_config` registers the routes into a runtime,
in `Config.routes` order: file entries (file order), then detected
environment routes (``deepseek``, ``openai``, ``openai-responses``,
``anthropic``, ``gemini``, then the other hosted presets with a key variable:
``openrouter``, ``groq``, ...), then ``demo`` last, so a real provider comes
first when there is one. Local servers (``vllm``, ``ollama``, ...) have no
key: they are routes only when the file declares them.

Settings namespaces (``[settings.NAME]`` tables, plus the built-in
``openai-compatible`` and ``ollama``) group OpenAI-compatible routes for
model discovery; `register_settings` declares every such route as a
configurable provider and offers one discovery per namespace.

Every problem is one `ConfigError` naming the file, the line and the reason.
API keys never live in the file (an ``api_key`` key is refused) and their
values are never read beyond "set and non-empty", logged or echoed.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs
import msgspec
import trio

from llmrt import (
    Adapter,
    AlwaysRetryPolicy,
    ErrorCode,
    NormalRetryPolicy,
    ResolvedRetryPolicy,
)
from llmrt._nesting import MAX_NESTING, toml_too_deep
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.demo import DemoAdapter
from llmrt.adapters.gemini import GeminiAdapter
from llmrt.adapters.openai_chat import (
    DISCOVERY_APIS,
    OLLAMA_NS,
    OPENAI_COMPATIBLE_NS,
    PRESETS,
    DiscoveryEndpoint,
    EndpointDiscovery,
    ModelSpec,
    OpenAIChatAdapter,
    configurable_provider,
    discovery_api_of,
    find_preset,
    settings_ns_of,
)
from llmrt.adapters.openai_responses import OpenAIResponsesAdapter

from .._registry import DirectoryHandle, DiscoveryHandle, RegistrationHandle
from .._runtime import LlmRuntime
from .._topology import check_provider_name
from ._schema import (
    FileTable,
    GatewayTable,
    ModelTable,
    Path,
    ProviderTable,
    RetryTable,
    SettingsTable,
    format_path,
    locate_lines,
    parse_path,
)

__all__ = [
    "ConfigError",
    "Config",
    "RouteSpec",
    "NamespaceSpec",
    "BUILTIN_NAMESPACES",
    "AdapterKind",
    "DEFAULT_CONFIG_FILE",
    "CONFIG_ENV_VAR",
    "DETECTED_PROVIDERS",
    "load_config",
    "build_adapter",
    "register_config",
    "register_settings",
    "describe",
]

AdapterKind = Literal["openai_chat", "anthropic", "demo", "gemini", "openai_responses"]

#: The file `load_config` reads when no path is given and ``$LLMRT_CONFIG`` is unset.
DEFAULT_CONFIG_FILE: Final = "llmrt.toml"
#: The environment variable naming a config file.
CONFIG_ENV_VAR: Final = "LLMRT_CONFIG"

#: Zero-config routes: (key variable, route, adapter, preset), in the order they are added:
#: DeepSeek, OpenAI, Anthropic, then every other hosted preset that names a route.
DETECTED_PROVIDERS: Final[tuple[tuple[str, str, AdapterKind, str | None], ...]] = (
    ("DEEPSEEK_API_KEY", "deepseek", "openai_chat", "deepseek-official"),
    ("OPENAI_API_KEY", "openai", "openai_chat", "openai"),
    # The same key also serves the Responses API, on a route of its own: the
    # ``openai`` route stays on chat completions for every model.
    ("OPENAI_API_KEY", "openai-responses", "openai_responses", None),
    ("ANTHROPIC_API_KEY", "anthropic", "anthropic", None),
    # Google's tools read either name; GEMINI_API_KEY wins when both are set.
    ("GEMINI_API_KEY", "gemini", "gemini", None),
    ("GOOGLE_API_KEY", "gemini", "gemini", None),
    *(
        (preset.api_key_env, preset.route, "openai_chat", preset.name)
        for preset in PRESETS.values()
        if preset.api_key_env
        and preset.route
        and preset.name not in ("deepseek-official", "openai")
    ),
)

_ADAPTERS: Final[tuple[AdapterKind, ...]] = (
    "openai_chat",
    "anthropic",
    "demo",
    "gemini",
    "openai_responses",
)
_COMMON = frozenset({"adapter", "route", "routes", "stream_idle_timeout"})
_HTTP = frozenset({"base_url", "api_key_env", "display_name", "models", "retry"})
#: The keys of a ``[[provider]]`` entry each adapter accepts.
_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "openai_chat": _COMMON | _HTTP | {"preset", "settings_ns"},
    "anthropic": _COMMON | _HTTP | {"default_max_tokens"},
    "demo": _COMMON | {"tokens_per_second"},
    "gemini": _COMMON | _HTTP,
    "openai_responses": _COMMON | _HTTP,
}
_ANTHROPIC_KEY_ENV: Final = "ANTHROPIC_API_KEY"
_GEMINI_KEY_ENV: Final = "GEMINI_API_KEY"
_OPENAI_KEY_ENV: Final = "OPENAI_API_KEY"
#: Seconds `register_config` spends undoing a partial registration.
_CLEANUP_GRACE: Final = 5.0
_SECRET_KEYS = frozenset({"api_key", "apikey", "api-key", "apiKey"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MSGSPEC_AT = re.compile(r"^(?P<reason>.*) - at `(?P<path>\$[^`]*)`$", re.DOTALL)
_UNKNOWN_FIELD = re.compile(r"unknown field `([^`]+)`")
_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


#: The pace of the built-in demo route (a ``demo`` route in the file sets its own).
BUILTIN_DEMO_TOKENS_PER_SECOND = 60.0


class ConfigError(ValueError):
    """A config file problem: ``str(err)`` is ``FILE:LINE: REASON``.

    ``file`` is the path as given (or None), ``line`` (and ``column`` for TOML
    syntax errors) is 1-based or None when unknown, ``reason`` the message
    alone; it names the value's path (``$.provider[1].adapter``) when there is one.
    """

    def __init__(
        self, file: str | None, line: int | None, reason: str, *, column: int | None = None
    ) -> None:
        self.file = file
        self.line = line
        self.column = column
        self.reason = reason
        where = file if file is not None else "<config>"
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        super().__init__(f"{where}: {reason}")


@attrs.frozen
class RouteSpec:
    """One provider route: how to build its adapter and register it.

    ``api_key_env`` is the effective variable (a preset's default filled in);
    ``stream_idle_timeout`` the effective one (``[defaults]`` filled in; None:
    the runtime's default). ``source`` says where the route came from:
    ``"config file line N"``, ``"environment DEEPSEEK_API_KEY"`` or ``"built-in"``.
    """

    route: str
    adapter: AdapterKind
    source: str
    aliases: tuple[str, ...] = ()
    preset: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    display_name: str | None = None
    stream_idle_timeout: float | None = None
    models: tuple[ModelSpec, ...] = ()
    retry: ResolvedRetryPolicy | None = None
    default_max_tokens: int | None = None
    tokens_per_second: float | None = None
    #: The settings namespace the file gives (None: the built-in one, see `namespace`).
    settings_ns: str | None = None

    @property
    def providers(self) -> tuple[str, ...]:
        """Every route name this entry registers: ``route`` first, then its aliases."""
        return (self.route, *self.aliases)

    @property
    def namespace(self) -> str | None:
        """The settings namespace of an OpenAI-compatible route; None for other adapters.

        ``settings_ns`` when the file gives one, else ``ollama`` for the
        Ollama preset and ``openai-compatible`` for every other preset.
        """
        if self.adapter != "openai_chat":
            return None
        return self.settings_ns or settings_ns_of(self.preset)


@attrs.frozen
class NamespaceSpec:
    """One settings namespace: the list its endpoints are asked for, and a default endpoint.

    ``source`` is ``"built-in"`` or ``"config file line N"``.
    """

    name: str
    discovery: str = "openai"
    base_url: str | None = None
    api_key_env: str | None = None
    source: str = "built-in"


#: The namespaces the OpenAI-compatible adapter always owns (a file may redefine them).
BUILTIN_NAMESPACES: Final = (
    NamespaceSpec(OPENAI_COMPATIBLE_NS, discovery_api_of(OPENAI_COMPATIBLE_NS)),
    NamespaceSpec(OLLAMA_NS, discovery_api_of(OLLAMA_NS)),
)


@attrs.frozen
class Config:
    """A validated configuration: the routes to register, in registration order.

    ``file`` is the file read (None when there was none); ``keys_set`` the
    names of the routes' key variables that were set and non-empty at load
    time (names only, never values).
    """

    routes: tuple[RouteSpec, ...]
    file: str | None = None
    keys_set: frozenset[str] = frozenset()
    #: The ``[gateway]`` table (``llmrt serve``'s settings); defaults when absent.
    gateway: GatewayTable = attrs.field(factory=GatewayTable)
    #: The settings namespaces: the built-in ones, then the file's, by name.
    settings: tuple[NamespaceSpec, ...] = BUILTIN_NAMESPACES

    def namespace(self, name: str) -> NamespaceSpec | None:
        """The settings namespace called ``name``, or None."""
        for spec in self.settings:
            if spec.name == name:
                return spec
        return None

    def route(self, name: str) -> RouteSpec | None:
        """The spec that serves route (or alias) ``name``, or None."""
        for spec in self.routes:
            if name in spec.providers:
                return spec
        return None


# ---- loading -------------------------------------------------------------------------------


@attrs.define
class _Context:
    """The file being validated: its name and where each path's line is."""

    file: str | None
    lines: dict[Path, int] = attrs.field(factory=dict)

    def line_near(self, path: Path) -> int | None:
        """The line of ``path``, or of its nearest ancestor the locator found."""
        for n in range(len(path), 0, -1):
            line = self.lines.get(path[:n])
            if line is not None:
                return line
        return None

    def error(self, path: Path, reason: str) -> ConfigError:
        """A `ConfigError` at ``path``'s line; the reason ends with msgspec's ``- at `$...```."""
        at = f" - at `{format_path(path)}`" if path else ""
        return ConfigError(self.file, self.line_near(path), reason + at)

    def line_of(self, path: Path) -> int | None:
        return self.lines.get(path)


def load_config(
    path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> Config:
    """Read, validate and complete the configuration.

    The file is ``path``; else ``$LLMRT_CONFIG``; else ``./llmrt.toml`` if it
    exists (no file at all is fine). Then routes are added for the well-known
    key variables set in ``environ`` (default ``os.environ``) that the file
    does not use, and the ``demo`` route unless the file declares one.

    Raises `ConfigError` for a missing or unreadable file named explicitly and
    for every problem in the file. Not a checkpoint (synchronous).
    """
    env = os.environ if environ is None else environ
    explicit = path is not None or bool(env.get(CONFIG_ENV_VAR))
    file = os.fspath(path) if path is not None else env.get(CONFIG_ENV_VAR) or DEFAULT_CONFIG_FILE
    text = _read(file, explicit=explicit)
    ctx = _Context(file if text is not None else None)
    routes: list[RouteSpec] = []
    default_idle: float | None = None
    gateway = GatewayTable()
    namespaces: tuple[NamespaceSpec, ...] = BUILTIN_NAMESPACES
    if text is not None:
        table, ctx.lines = _parse(text, ctx)
        gateway = _check_gateway(ctx, table.gateway)
        default_idle = _check_idle(
            ctx, ("defaults", "stream_idle_timeout"), table.defaults.stream_idle_timeout
        )
        namespaces = _namespaces(ctx, table.settings)
        routes = _file_routes(ctx, table, default_idle, namespaces)
    routes = _complete(routes, env, default_idle)
    keys_set = frozenset(
        spec.api_key_env for spec in routes if spec.api_key_env and env.get(spec.api_key_env)
    )
    return Config(
        routes=tuple(routes),
        file=ctx.file,
        keys_set=keys_set,
        gateway=gateway,
        settings=namespaces,
    )


def _read(file: str, *, explicit: bool) -> str | None:
    try:
        with open(file, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        if not explicit:
            return None
        raise ConfigError(file, None, "no such config file") from None
    except OSError as exc:
        raise ConfigError(file, None, f"cannot read the config file: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(file, line, "the file is not UTF-8 text (TOML must be)") from None


def _parse(text: str, ctx: _Context) -> tuple[FileTable, dict[Path, int]]:
    if toml_too_deep(text):
        # tomllib recurses: a deep enough file raises RecursionError, not a syntax error.
        raise ConfigError(
            ctx.file,
            _too_deep_line(text),
            f"arrays or inline tables nested more than {MAX_NESTING} levels deep",
        )
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = _TOML_AT.search(message)
        line = col = None
        if found:
            line, col = int(found[1]), int(found[2])
            message = message[: found.start()]
        raise ConfigError(ctx.file, line, f"TOML syntax error: {message}", column=col) from None
    ctx.lines = locate_lines(text)
    _refuse_secrets(ctx, raw, ())
    _check_settings_tables(ctx, raw.get("settings"))
    try:
        table = msgspec.convert(raw, FileTable)
    except msgspec.ValidationError as exc:
        raise _from_msgspec(ctx, str(exc)) from None
    _refuse_foreign_keys(ctx, raw)
    return table, ctx.lines


def _too_deep_line(text: str) -> int:
    """The 1-based line where ``text`` first nests too deep (known to happen somewhere).

    A prefix nests at least as deep as any shorter one, so the shortest
    too-deep prefix of whole lines is found by bisection.
    """
    ends = list(itertools.accumulate(len(line) for line in text.splitlines(keepends=True)))
    low, high = 0, len(ends) - 1
    while low < high:
        middle = (low + high) // 2
        if toml_too_deep(text[: ends[middle]]):
            high = middle
        else:
            low = middle + 1
    return low + 1


def _refuse_secrets(ctx: _Context, value: object, path: Path) -> None:
    """Refuse any ``api_key``-like key anywhere, without ever echoing its value."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _SECRET_KEYS:
                raise ctx.error(
                    (*path, key),
                    f"`{key}` is refused: API keys do not belong in a file; put the key in an "
                    'environment variable and name it with `api_key_env = "MY_API_KEY"`',
                )
            _refuse_secrets(ctx, item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_secrets(ctx, item, (*path, index))


def _from_msgspec(ctx: _Context, message: str) -> ConfigError:
    # TOML calls msgspec's "object" a table.
    message = message.replace("`object`", "`table`")
    found = _MSGSPEC_AT.match(message)
    # msgspec leaves out " - at `$`" for the document itself.
    path = parse_path(found["path"]) if found else ()
    unknown = _UNKNOWN_FIELD.search(message)
    # An unknown key is reported at its table; its own line is more useful.
    line = ctx.line_near((*path, unknown[1]) if unknown else path)
    return ConfigError(ctx.file, line, message)


def _check_settings_tables(ctx: _Context, settings: object) -> None:
    """Convert each ``[settings.NAME]`` alone: msgspec's own path would say ``[...]``, not NAME."""
    if not isinstance(settings, dict):
        return  # msgspec reports the whole-table problem
    for name, value in settings.items():
        try:
            msgspec.convert(value, SettingsTable)
        except msgspec.ValidationError as exc:
            message = str(exc).replace("`object`", "`table`")
            found = _MSGSPEC_AT.match(message)
            reason, inner = (found["reason"], parse_path(found["path"])) if found else (message, ())
            unknown = _UNKNOWN_FIELD.search(reason)
            path: Path = ("settings", name, *inner)
            error = ctx.error((*path, unknown[1]) if unknown else path, reason)
            raise ConfigError(
                error.file, error.line, f"{reason} - at `{format_path(path)}`"
            ) from None


def _namespaces(ctx: _Context, settings: Mapping[str, SettingsTable]) -> tuple[NamespaceSpec, ...]:
    """The built-in namespaces, each replaced by a file table of its name, then the file's."""
    declared: dict[str, NamespaceSpec] = {}
    for name, table in settings.items():
        at: Path = ("settings", name)
        problem = check_provider_name(name)
        if problem is not None:
            raise ctx.error(at, problem.replace("provider route name", "settings namespace name"))
        if table.discovery not in DISCOVERY_APIS:
            raise ctx.error(
                (*at, "discovery"),
                f"unknown discovery {table.discovery!r}; use "
                + " or ".join(f'"{api}"' for api in DISCOVERY_APIS),
            )
        if table.base_url is not None and not table.base_url.startswith(("http://", "https://")):
            raise ctx.error((*at, "base_url"), "base_url must start with http:// or https://")
        if table.api_key_env is not None and not _ENV_NAME.fullmatch(table.api_key_env):
            raise ctx.error(
                (*at, "api_key_env"),
                "api_key_env must be the NAME of an environment variable (letters, digits, '_'), "
                "not the key itself",
            )
        if table.api_key_env is not None and table.base_url is None:
            raise ctx.error((*at, "api_key_env"), "api_key_env needs a `base_url` to send it to")
        line = ctx.line_of(at)
        declared[name] = NamespaceSpec(
            name=name,
            discovery=table.discovery,
            base_url=table.base_url,
            api_key_env=table.api_key_env,
            source=f"config file line {line}" if line else "config file",
        )
    builtin = tuple(declared.pop(spec.name, spec) for spec in BUILTIN_NAMESPACES)
    return (*builtin, *declared.values())


def _refuse_foreign_keys(ctx: _Context, raw: dict[str, Any]) -> None:
    """Refuse provider keys the entry's adapter does not use (they would be ignored)."""
    entries = raw.get("provider", [])
    for index, entry in enumerate(entries):
        allowed = _KEYS.get(entry["adapter"])
        if allowed is None:
            raise ctx.error(
                ("provider", index, "adapter"),
                f"unknown adapter {entry['adapter']!r}; known: {', '.join(_ADAPTERS)}",
            )
        for key in entry:
            if key not in allowed:
                users = [name for name, keys in _KEYS.items() if key in keys]
                raise ctx.error(
                    ("provider", index, key),
                    f"`{key}` does not apply to adapter {entry['adapter']!r} "
                    f"(it applies to: {', '.join(users)})",
                )


def _check_gateway(ctx: _Context, table: GatewayTable) -> GatewayTable:
    from ..gateway._origin import OriginPolicy
    from ..gateway._protocol import MIN_FRAME_BYTES

    for index, entry in enumerate(table.allow_origin):
        try:
            # Whether ``*`` has its token is known only when serving.
            OriginPolicy.build([entry], loopback=True, token=True)
        except ValueError as exc:
            raise ctx.error(("gateway", "allow_origin", index), str(exc)) from None
    if table.idle_timeout is not None and not 0 < table.idle_timeout < math.inf:
        raise ctx.error(
            ("gateway", "idle_timeout"), "idle_timeout must be a positive, finite number of seconds"
        )
    if table.max_frame_bytes is not None and table.max_frame_bytes < MIN_FRAME_BYTES:
        raise ctx.error(
            ("gateway", "max_frame_bytes"), f"max_frame_bytes must be at least {MIN_FRAME_BYTES}"
        )
    return table


def _check_idle(ctx: _Context, path: Path, timeout: float | None) -> float | None:
    if timeout is not None and not 0 < timeout < math.inf:
        raise ctx.error(path, "stream_idle_timeout must be a positive, finite number of seconds")
    return timeout


def _file_routes(
    ctx: _Context,
    table: FileTable,
    default_idle: float | None,
    namespaces: Sequence[NamespaceSpec] = BUILTIN_NAMESPACES,
) -> list[RouteSpec]:
    routes: list[RouteSpec] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(table.provider):
        at: Path = ("provider", index)
        names = _route_names(ctx, at, entry)
        for n, name in enumerate(names):
            name_path = (*at, "route") if entry.route is not None else (*at, "routes", n)
            if name in seen:
                raise ctx.error(
                    name_path,
                    f"duplicate route {name!r} (already declared by provider[{seen[name]}])",
                )
            seen[name] = index
        idle = _check_idle(ctx, (*at, "stream_idle_timeout"), entry.stream_idle_timeout)
        line = ctx.line_of(at)
        routes.append(
            RouteSpec(
                route=names[0],
                aliases=names[1:],
                adapter=entry.adapter,  # type: ignore[arg-type]  # checked by _refuse_foreign_keys
                source=f"config file line {line}" if line else "config file",
                preset=_preset(ctx, at, entry),
                base_url=_base_url(ctx, at, entry),
                api_key_env=_api_key_env(ctx, at, entry),
                display_name=entry.display_name,
                stream_idle_timeout=idle if idle is not None else default_idle,
                models=_models(ctx, at, entry.models),
                retry=_retry(ctx, (*at, "retry"), entry.retry) if entry.retry else None,
                default_max_tokens=entry.default_max_tokens,
                tokens_per_second=_tokens_per_second(ctx, at, entry),
                settings_ns=_settings_ns(ctx, at, entry, namespaces),
            )
        )
    return routes


def _settings_ns(
    ctx: _Context, at: Path, entry: ProviderTable, namespaces: Sequence[NamespaceSpec]
) -> str | None:
    if entry.settings_ns is None:
        return None
    known = [spec.name for spec in namespaces]
    if entry.settings_ns not in known:
        raise ctx.error(
            (*at, "settings_ns"),
            f"unknown settings namespace {entry.settings_ns!r}: declare it with "
            f"[settings.{entry.settings_ns}] (known: {', '.join(known)})",
        )
    return entry.settings_ns


def _route_names(ctx: _Context, at: Path, entry: ProviderTable) -> tuple[str, ...]:
    if entry.route is not None and entry.routes is not None:
        raise ctx.error((*at, "routes"), "give either `route` or `routes`, not both")
    if entry.route is not None:
        names: tuple[str, ...] = (entry.route,)
    elif entry.routes:
        names = entry.routes
    else:
        raise ctx.error(at, 'a provider needs `route = "name"` (or `routes = [...]`)')
    for n, name in enumerate(names):
        problem = check_provider_name(name)
        if problem is not None:
            where = (*at, "route") if entry.route is not None else (*at, "routes", n)
            raise ctx.error(where, problem)
    if len(set(names)) != len(names):
        raise ctx.error((*at, "routes"), "`routes` lists a name twice")
    return names


def _preset(ctx: _Context, at: Path, entry: ProviderTable) -> str | None:
    if entry.adapter != "openai_chat":
        return None
    preset = entry.preset or "openai-compatible"
    found = find_preset(preset)
    if found is None:
        raise ctx.error((*at, "preset"), f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    if entry.base_url is None and found.base_url is None:
        raise ctx.error(at, f"preset {preset!r} needs `base_url` (the server's http(s) URL)")
    return preset


def _base_url(ctx: _Context, at: Path, entry: ProviderTable) -> str | None:
    url = entry.base_url
    if url is not None and not url.startswith(("http://", "https://")):
        raise ctx.error((*at, "base_url"), "base_url must start with http:// or https://")
    return url


def _api_key_env(ctx: _Context, at: Path, entry: ProviderTable) -> str | None:
    name = entry.api_key_env
    if name is not None and not _ENV_NAME.fullmatch(name):
        # Never echo it: a value that is not a variable name may be the key itself.
        raise ctx.error(
            (*at, "api_key_env"),
            "api_key_env must be the NAME of an environment variable (letters, digits, '_'), "
            "not the key itself",
        )
    if name is not None or entry.adapter == "demo":
        return name
    if entry.adapter == "anthropic":
        return _ANTHROPIC_KEY_ENV
    if entry.adapter == "gemini":
        return _GEMINI_KEY_ENV
    if entry.adapter == "openai_responses":
        return _OPENAI_KEY_ENV
    found = find_preset(entry.preset or "openai-compatible")
    assert found is not None  # checked by _preset first
    return found.api_key_env


def _tokens_per_second(ctx: _Context, at: Path, entry: ProviderTable) -> float | None:
    rate = entry.tokens_per_second
    if rate is not None and not 0 < rate < math.inf:
        raise ctx.error((*at, "tokens_per_second"), "tokens_per_second must be positive")
    return rate


def _models(ctx: _Context, at: Path, models: Sequence[ModelTable]) -> tuple[ModelSpec, ...]:
    specs: list[ModelSpec] = []
    seen: set[str] = set()
    for index, model in enumerate(models):
        where: Path = (*at, "models", index)
        if model.id in seen:
            raise ctx.error((*where, "id"), f"model {model.id!r} is listed twice")
        seen.add(model.id)
        if model.default_effort is not None and model.default_effort not in model.efforts:
            raise ctx.error((*where, "default_effort"), "default_effort must be one of `efforts`")
        if model.max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ctx.error(
                (*where, "max_tokens_field"),
                'max_tokens_field must be "max_tokens" or "max_completion_tokens"',
            )
        specs.append(
            ModelSpec(
                id=model.id,
                name=model.name,
                context_window=model.context_window,
                default_max_tokens=model.default_max_tokens,
                image_input=model.image_input,
                efforts=model.efforts,
                default_effort=model.default_effort,
                max_tokens_field=model.max_tokens_field,
            )
        )
    return tuple(specs)


def _retry(ctx: _Context, at: Path, retry: RetryTable) -> ResolvedRetryPolicy:
    if retry.mode not in ("normal", "always"):
        raise ctx.error(
            (*at, "mode"), f'unknown retry mode {retry.mode!r}; use "normal" or "always"'
        )
    if retry.mode == "always":
        for field in ("max_retries", "retryable_codes"):
            if getattr(retry, field) is not None:
                raise ctx.error(
                    (*at, field),
                    f'{field} applies only to mode = "normal" ("always" retries every code)',
                )
    known = set(ErrorCode)
    for index, code in enumerate(retry.retryable_codes or ()):
        if code not in known:
            raise ctx.error((*at, "retryable_codes", index), f"unknown error code {code!r}")
    fields = ("initial_delay_ms", "max_delay_ms", "jitter_ratio")
    kwargs: dict[str, Any] = {f: getattr(retry, f) for f in fields if getattr(retry, f) is not None}
    try:
        if retry.mode == "always":
            return AlwaysRetryPolicy(**kwargs)
        for field in ("max_retries", "retryable_codes"):
            if getattr(retry, field) is not None:
                kwargs[field] = getattr(retry, field)
        return NormalRetryPolicy(**kwargs)
    except (ValueError, TypeError) as exc:
        # The policies name the offending field first ("max_delay_ms must be ...").
        field = str(exc).split(" ", 1)[0]
        raise ctx.error(
            (*at, field) if field in RetryTable.__struct_fields__ else at, str(exc)
        ) from None


def _complete(
    routes: list[RouteSpec], env: Mapping[str, str], default_idle: float | None
) -> list[RouteSpec]:
    """Add the detected environment routes and the built-in demo route."""
    taken = {name for spec in routes for name in spec.providers}
    used_vars = {spec.api_key_env for spec in routes}
    # A file that declares one of a variable's detected routes configures that
    # provider itself: the variable's other routes are not added either.
    used_vars |= {var for var, route, _, _ in DETECTED_PROVIDERS if route in taken}
    out = list(routes)
    for var, route, adapter, preset in DETECTED_PROVIDERS:
        # Only presence is checked: the value is never kept, logged or shown.
        if env.get(var) and var not in used_vars and route not in taken:
            out.append(
                RouteSpec(
                    route=route,
                    adapter=adapter,
                    source=f"environment {var}",
                    preset=preset,
                    api_key_env=var,
                    stream_idle_timeout=default_idle,
                )
            )
            taken.add(route)
    if "demo" not in taken:
        out.append(
            RouteSpec(
                route="demo",
                adapter="demo",
                source="built-in",
                stream_idle_timeout=default_idle,
                # Paced like a real model, so a terminal shows it streaming.
                tokens_per_second=BUILTIN_DEMO_TOKENS_PER_SECOND,
            )
        )
    return out


# ---- building and registering --------------------------------------------------------------


def build_adapter(spec: RouteSpec, *, environ: Mapping[str, str] | None = None) -> Adapter:
    """A new adapter instance for ``spec`` (no I/O; keys are read per call, from ``environ``).

    Raises `ValueError` only for a spec `load_config` did not produce and the
    adapter refuses.
    """
    match spec.adapter:
        case "openai_chat":
            return OpenAIChatAdapter(
                preset=spec.preset or "openai-compatible",
                base_url=spec.base_url,
                api_key_env=spec.api_key_env,
                models=spec.models,
                display_name=spec.display_name,
                retry_policy=spec.retry,
                environ=environ,
            )
        case "anthropic":
            extra: dict[str, Any] = {}
            if spec.base_url is not None:
                extra["base_url"] = spec.base_url
            if spec.display_name is not None:
                extra["display_name"] = spec.display_name
            if spec.default_max_tokens is not None:
                extra["default_max_tokens"] = spec.default_max_tokens
            return AnthropicAdapter(
                api_key_env=spec.api_key_env or _ANTHROPIC_KEY_ENV,
                models=spec.models,
                retry_policy=spec.retry,
                environ=environ,
                **extra,
            )
        case "demo":
            return DemoAdapter(tokens_per_second=spec.tokens_per_second)
        case "gemini":
            return GeminiAdapter(
                api_key_env=spec.api_key_env or _GEMINI_KEY_ENV,
                models=spec.models,
                retry_policy=spec.retry,
                environ=environ,
                **_http_extra(spec),
            )
        case "openai_responses":
            return OpenAIResponsesAdapter(
                api_key_env=spec.api_key_env or _OPENAI_KEY_ENV,
                models=spec.models,
                retry_policy=spec.retry,
                environ=environ,
                **_http_extra(spec),
            )


def _http_extra(spec: RouteSpec) -> dict[str, Any]:
    """The optional settings of an HTTP adapter that the spec sets (others keep defaults)."""
    extra: dict[str, Any] = {}
    if spec.base_url is not None:
        extra["base_url"] = spec.base_url
    if spec.display_name is not None:
        extra["display_name"] = spec.display_name
    return extra


async def register_config(
    runtime: LlmRuntime, config: Config, *, environ: Mapping[str, str] | None = None
) -> list[RegistrationHandle]:
    """Build and register every route of ``config``, in order, with its idle timeout.

    All or nothing: when one registration fails, the ones made so far are
    disposed and the error (`llmrt.LlmError` ``INVALID_PROVIDER`` or
    ``DUPLICATE_ADAPTER``, e.g. a route the runtime already serves) propagates.
    ``environ`` is where the adapters read their keys (default ``os.environ``).
    A checkpoint.
    """
    handles: list[RegistrationHandle] = []
    try:
        for spec in config.routes:
            adapter = build_adapter(spec, environ=environ)
            try:
                handle = await runtime.register_adapter(
                    spec.providers, adapter, stream_idle_timeout=spec.stream_idle_timeout
                )
            except BaseException:
                # Never registered, so nobody else will close its HTTP client.
                with trio.move_on_after(_CLEANUP_GRACE, shield=True):
                    await adapter.aclose()
                raise
            handles.append(handle)
    except BaseException:
        # Fresh registrations serve no calls yet: disposing them is quick.
        with trio.move_on_after(_CLEANUP_GRACE, shield=True):
            for handle in reversed(handles):
                await handle.dispose(drain_timeout=0)
        raise
    return handles


async def register_settings(
    runtime: LlmRuntime, config: Config, *, environ: Mapping[str, str] | None = None
) -> list[DirectoryHandle | DiscoveryHandle]:
    """Declare ``config``'s configurable providers and offer one discovery per namespace.

    The directory lists every OpenAI-compatible route of ``config`` (each
    name of it, in its namespace), then, dormant, every hosted preset's
    zero-config route that ``config`` does not register. Each namespace of
    `Config.settings` gets an `EndpointDiscovery` that knows its routes'
    endpoints and key variables (keys are read from ``environ`` per
    interrogation). All or nothing, like `register_config`: raises
    `llmrt.LlmError` ``DUPLICATE_ADAPTER`` when the runtime already has a
    directory entry or a discovery these collide with. A checkpoint.
    """
    entries = []
    routes: dict[str, dict[str, DiscoveryEndpoint]] = {ns.name: {} for ns in config.settings}
    for index, spec in enumerate(config.routes):
        ns = spec.namespace
        if ns is None:
            continue
        # The file's routes come first, in file order: the index is the entry's.
        path = ("provider", str(index)) if spec.source.startswith("config file") else ()
        found = find_preset(spec.preset or "openai-compatible")
        base_url = spec.base_url or (found.base_url if found is not None else None)
        for name in spec.providers:
            entries.append(
                configurable_provider(
                    name,
                    preset=spec.preset,
                    settings_ns=ns,
                    settings_path=path,
                    display_name=spec.display_name,
                )
            )
            if base_url is not None:
                endpoint = DiscoveryEndpoint(base_url=base_url, api_key_env=spec.api_key_env)
                routes[ns][name] = endpoint
    taken = {name for spec in config.routes for name in spec.providers}
    for preset in PRESETS.values():
        if preset.route is not None and preset.route not in taken:
            entries.append(configurable_provider(preset.route, preset=preset.name))
            taken.add(preset.route)
    handles: list[DirectoryHandle | DiscoveryHandle] = []
    try:
        if entries:
            handles.append(await runtime.register_configurable_providers(entries))
        for space in config.settings:
            default = None
            if space.base_url is not None:
                default = DiscoveryEndpoint(base_url=space.base_url, api_key_env=space.api_key_env)
            discovery = EndpointDiscovery(
                api=space.discovery, routes=routes[space.name], default=default, environ=environ
            )
            handles.append(await runtime.register_model_discovery(space.name, discovery))
    except BaseException:
        with trio.move_on_after(_CLEANUP_GRACE, shield=True):
            for handle in reversed(handles):
                await handle.dispose()
        raise
    return handles


def describe(config: Config) -> list[str]:
    """One line per route for the CLI: names, adapter, key variable and whether it is set.

    Never includes a key's value.
    """
    rows = []
    for spec in config.routes:
        kind = spec.adapter + (f"/{spec.preset}" if spec.preset else "")
        if spec.api_key_env:
            state = "set" if spec.api_key_env in config.keys_set else "NOT SET"
            key = f"key: ${spec.api_key_env} ({state})"
        else:
            key = "key: none"
        rows.append((", ".join(spec.providers), kind, key, spec.source))
    width = [max((len(row[n]) for row in rows), default=0) for n in range(3)]
    return [
        f"{names:<{width[0]}}  {kind:<{width[1]}}  {key:<{width[2]}}  [{source}]"
        for names, kind, key, source in rows
    ]
