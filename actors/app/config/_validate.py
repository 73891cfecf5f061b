"""What the text of ``llmrt.toml`` means: decoding it into the installed adapters'
schema, every check types cannot express, and the routes the environment and
the plugins add. Pure: text (and the environment's variable names, and the
plugins) in, a `Config` or a `ConfigError` naming the file, the line and the
reason out; no file, socket or clock, no trio (``tests/test_config_purity.py``).
Reading the file is `_load`'s; registering the routes `_register`'s.
"""

from __future__ import annotations

import itertools
import math
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs
import msgspec

import llmrt
from llmrt import AlwaysRetryPolicy, ErrorCode, NormalRetryPolicy, ResolvedRetryPolicy
from llmrt._egress import base_url_problem
from llmrt._nesting import MAX_NESTING, toml_too_deep
from llmrt.adapters.plugin import AdapterConfig, HttpAdapterConfig, ModelSpec, RetryTable

from ..._pricing import ModelPrice
from ..._topology import check_provider_name
from ...routing import Group, RoutingSettings
from ..plugins import PLUGIN_ERROR, Plugins
from ._routing import check_routing
from ._schema import (
    GatewayTable,
    Path,
    PriceEntry,
    SettingsTable,
    file_table,
    format_path,
    locate_lines,
    parse_path,
)
from ._secrets import hidden_values, refusal, scrub, secret_name_reason
from ._suggest import hint, keys_at
from ._types import (
    CONFIG_INVALID,
    Config,
    ConfigError,
    NamespaceSpec,
    RouteSpec,
    builtin_namespaces,
)

__all__ = ["validate_config"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MSGSPEC_AT = re.compile(r"^(?P<reason>.*) - at `(?P<path>\$[^`]*)`$", re.DOTALL)
_UNKNOWN_FIELD = re.compile(r"unknown field `([^`]+)`")
_INVALID_VALUE = re.compile(r"^Invalid (?:enum )?value (?P<value>.*)$", re.DOTALL)
_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
#: How an invalid choice names its key in an error, when not by the key's own name.
_CHOICE_NAMES: Final = {"mode": "retry mode"}


@attrs.define
class _Context:
    """The file being validated: its name, where each path's line is, the adapters."""

    file: str | None
    plugins: Plugins
    lines: dict[Path, int] = attrs.field(factory=dict)
    #: The file's secret-looking strings: no error message ever holds one.
    hidden: tuple[str, ...] = attrs.field(default=(), repr=False)

    def line_near(self, path: Path) -> int | None:
        """The line of ``path``, or of its nearest ancestor the locator found."""
        for n in range(len(path), 0, -1):
            line = self.lines.get(path[:n])
            if line is not None:
                return line
        return None

    def error(self, path: Path, reason: str, *, code: str = CONFIG_INVALID) -> ConfigError:
        """A `ConfigError` at ``path``'s line; the reason ends with msgspec's ``- at `$...```."""
        at = f" - at `{format_path(path)}`" if path else ""
        return ConfigError(self.file, self.line_near(path), self.scrub(reason + at), code=code)

    def scrub(self, text: str) -> str:
        """``text`` without any secret-looking string of the file."""
        return scrub(text, self.hidden) if self.hidden else text

    def line_of(self, path: Path) -> int | None:
        return self.lines.get(path)

    def source(self, path: Path) -> str:
        line = self.line_of(path)
        return f"config file line {line}" if line else "config file"


def validate_config(
    text: str | None, *, file: str | None, environ: Mapping[str, str], plugins: Plugins
) -> Config:
    """The configuration ``text`` (the content of ``file``; None: there is no file) means,
    completed from ``environ`` and ``plugins`` as `load_config` documents.

    Pure: reads nothing but its arguments. Raises `ConfigError` for every
    problem in the text, at its line.
    """
    ctx = _Context(file, plugins)
    routes: list[RouteSpec] = []
    default_idle: float | None = None
    gateway = GatewayTable()
    namespaces = builtin_namespaces(plugins)
    groups: tuple[Group, ...] = ()
    routing = RoutingSettings()
    call_log = None
    prices: dict[tuple[str, str], ModelPrice] = {}
    aliases: dict[str, str] = {}
    table = None
    if text is not None:
        table = _parse(text, ctx)
        gateway = _check_gateway(ctx, table.gateway)
        default_idle = _check_idle(
            ctx, ("defaults", "stream_idle_timeout"), table.defaults.stream_idle_timeout
        )
        namespaces = _namespaces(ctx, table.settings, namespaces)
        routes = _file_routes(ctx, table.provider, default_idle, namespaces)
    routes = _complete(ctx, routes, environ, default_idle, plugins)
    if table is not None:
        names = {name for spec in routes for name in spec.providers}
        groups, routing = check_routing(ctx.error, table.group, table.routing, names)
        call_log = table.call_log
        if call_log is not None and not call_log.directory:
            raise ctx.error(("call_log",), "[call_log] needs a directory")
        prices = _check_prices(ctx, table.price, names)
        aliases = _check_aliases(ctx, table.aliases, names | {group.name for group in groups})
    keys_set = frozenset(
        spec.api_key_env for spec in routes if spec.api_key_env and environ.get(spec.api_key_env)
    )
    return Config(
        routes=tuple(routes),
        file=ctx.file,
        keys_set=keys_set,
        gateway=gateway,
        settings=namespaces,
        plugins=plugins,
        groups=groups,
        routing=routing,
        call_log=call_log,
        prices=prices,
        aliases=aliases,
    )


def _check_prices(
    ctx: _Context, entries: Sequence[PriceEntry], routes: set[str]
) -> dict[tuple[str, str], ModelPrice]:
    """``[[price]]``: each entry prices a model of a configured route, once."""
    prices: dict[tuple[str, str], ModelPrice] = {}
    for i, entry in enumerate(entries):
        if entry.provider not in routes:
            meant = hint(entry.provider, sorted(routes), quote="'")
            raise ctx.error(
                ("price", i, "provider"),
                f"price for route {entry.provider!r}, which this configuration does not "
                f"register{meant}",
            )
        key = (entry.provider, entry.model)
        if key in prices:
            raise ctx.error(
                ("price", i, "model"),
                f"model {entry.model!r} of route {entry.provider!r} is priced twice",
            )
        prices[key] = ModelPrice(
            input_mtok=entry.input_mtok,
            output_mtok=entry.output_mtok,
            cache_read_mtok=entry.cache_read_mtok,
            cache_write_mtok=entry.cache_write_mtok,
            reasoning_mtok=entry.reasoning_mtok,
        )
    return prices


def _check_aliases(ctx: _Context, table: Mapping[str, str], providers: set[str]) -> dict[str, str]:
    """``[aliases]``: each a bare name (no ``/``) naming ``provider/model`` of a known provider."""
    for name, target in table.items():
        at = ("aliases", name)
        if not name or "/" in name or name != name.strip():
            raise ctx.error(at, f"an alias is a bare model name without `/`, got {name!r}")
        provider, slash, model = target.partition("/")
        if not slash or not provider or not model:
            raise ctx.error(at, f"an alias names `provider/model`, got {target!r}")
        if provider not in providers:
            known = ", ".join(sorted(providers)[:20]) or "none"
            raise ctx.error(
                at,
                f"the alias {name!r} names the provider {provider!r}, which is neither a "
                f"route nor a group of this configuration (known: {known})",
            )
    return dict(table)


def _parse(text: str, ctx: _Context) -> Any:
    """The file decoded into the schema of the installed adapters (`file_table`)."""
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
    ctx.hidden = hidden_values(raw)
    refused = refusal(raw)
    if refused is not None:
        raise ctx.error(*refused)
    _check_settings_tables(ctx, raw)
    configs = tuple(plugin.config for plugin in ctx.plugins.adapters.values())
    try:
        return msgspec.convert(raw, file_table(configs))
    except msgspec.ValidationError as exc:
        raise _from_msgspec(ctx, str(exc), raw) from None


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


def _from_msgspec(
    ctx: _Context, message: str, raw: Mapping[str, Any], *, at: Path = ()
) -> ConfigError:
    """msgspec's error at its value's line, reworded where the schema knows better.

    An invalid ``adapter`` is an unknown (or unusable) adapter; a key another
    adapter's Struct has "does not apply" to this one; an invalid choice
    names its key. Values are echoed only for these closed choices (never
    secrets: those keys were refused before decoding). ``at`` is where the
    value msgspec was given sits in the file.
    """
    # TOML calls msgspec's "object" a table.
    message = message.replace("`object`", "`table`")
    found = _MSGSPEC_AT.match(message)
    # msgspec leaves out " - at `$`" for the document itself.
    path = (*at, *(parse_path(found["path"]) if found else ()))
    reason = found["reason"] if found else message
    unknown = _UNKNOWN_FIELD.search(reason)
    invalid = _INVALID_VALUE.match(reason)
    code = CONFIG_INVALID
    if invalid and path[-1:] == ("adapter",) and path[:1] == ("provider",):
        kind = invalid["value"].strip("'")
        problem = ctx.plugins.problems.get(kind)
        if problem is not None:
            reason, code = problem, PLUGIN_ERROR
        else:
            meant = hint(kind, ctx.plugins.adapters, quote="'")
            reason = (
                f"unknown adapter {invalid['value']}{meant}; "
                f"known: {', '.join(ctx.plugins.adapters)}"
            )
    elif invalid and path and isinstance(path[-1], str):
        name = _CHOICE_NAMES.get(path[-1], path[-1])
        reason = f"unknown {name} {invalid['value']}"
    elif unknown and len(path) == 2 and path[0] == "provider" and isinstance(path[1], int):
        key, entry = unknown[1], raw["provider"][path[1]]
        users = [k for k, p in ctx.plugins.adapters.items() if key in p.config.__struct_fields__]
        if users:
            reason = (
                f"`{key}` does not apply to adapter {entry['adapter']!r} "
                f"(it applies to: {', '.join(users)})"
            )
    if unknown and not reason.startswith(f"`{unknown[1]}` does not apply"):
        configs = {kind: plugin.config for kind, plugin in ctx.plugins.adapters.items()}
        reason += hint(unknown[1], keys_at(path, raw, configs))
    # An unknown key is reported at its table; its own line is more useful.
    line = ctx.line_near((*path, unknown[1]) if unknown else path)
    where = f" - at `{format_path(path)}`" if path else ""
    return ConfigError(ctx.file, line, ctx.scrub(reason + where), code=code)


def _check_settings_tables(ctx: _Context, raw: Mapping[str, Any]) -> None:
    """Convert each ``[settings.NAME]`` alone: msgspec's own path would say ``[...]``, not NAME."""
    settings = raw.get("settings")
    if not isinstance(settings, dict):
        return  # msgspec reports the whole-table problem
    for name, value in settings.items():
        try:
            msgspec.convert(value, SettingsTable)
        except msgspec.ValidationError as exc:
            raise _from_msgspec(ctx, str(exc), raw, at=("settings", name)) from None


def _namespaces(
    ctx: _Context, settings: Mapping[str, SettingsTable], builtin: Sequence[NamespaceSpec]
) -> tuple[NamespaceSpec, ...]:
    """The built-in namespaces, each replaced by a file table of its name, then the file's."""
    apis = [
        api
        for plugin in ctx.plugins.adapters.values()
        if plugin.namespaces is not None
        for api in plugin.namespaces.apis
    ]
    declared: dict[str, NamespaceSpec] = {}
    for name, table in settings.items():
        at: Path = ("settings", name)
        problem = check_provider_name(name)
        if problem is not None:
            raise ctx.error(at, problem.replace("provider route name", "settings namespace name"))
        if table.discovery not in apis:
            raise ctx.error(
                (*at, "discovery"),
                f"unknown discovery {table.discovery!r}; use "
                + " or ".join(f'"{api}"' for api in apis),
            )
        _check_url(ctx, (*at, "base_url"), table.base_url)
        _check_key_env(ctx, (*at, "api_key_env"), table.api_key_env)
        if table.api_key_env is not None and table.base_url is None:
            raise ctx.error((*at, "api_key_env"), "api_key_env needs a `base_url` to send it to")
        declared[name] = NamespaceSpec(
            name=name,
            discovery=table.discovery,
            base_url=table.base_url,
            api_key_env=table.api_key_env,
            source=ctx.source(at),
        )
    kept = tuple(declared.pop(spec.name, spec) for spec in builtin)
    return (*kept, *declared.values())


def _check_gateway(ctx: _Context, table: GatewayTable) -> GatewayTable:
    # The gateway package is imported only for a value it must check: loading
    # it (its server, metrics, websockets) is most of `llmrt call`'s start-up.
    for index, entry in enumerate(table.allow_origin):
        from ...gateway._origin import OriginPolicy

        try:
            # Whether ``*`` has its token is known only when serving.
            OriginPolicy.build([entry], loopback=True, token=True)
        except ValueError as exc:
            raise ctx.error(("gateway", "allow_origin", index), str(exc)) from None
    if table.idle_timeout is not None and not 0 < table.idle_timeout < math.inf:
        raise ctx.error(
            ("gateway", "idle_timeout"), "idle_timeout must be a positive, finite number of seconds"
        )
    if table.discover_allow_private and not table.discover_any_url:
        raise ctx.error(
            ("gateway", "discover_allow_private"),
            "discover_allow_private applies to client-named URLs: it needs discover_any_url = true",
        )
    if table.max_frame_bytes is not None:
        from ...gateway._protocol import MIN_FRAME_BYTES
    if table.max_frame_bytes is not None and table.max_frame_bytes < MIN_FRAME_BYTES:
        raise ctx.error(
            ("gateway", "max_frame_bytes"), f"max_frame_bytes must be at least {MIN_FRAME_BYTES}"
        )
    return table


def _check_idle(ctx: _Context, path: Path, timeout: float | None) -> float | None:
    if timeout is not None and not 0 < timeout < math.inf:
        raise ctx.error(path, "stream_idle_timeout must be a positive, finite number of seconds")
    return timeout


def _check_url(ctx: _Context, path: Path, url: str | None) -> None:
    if url is not None and not url.startswith(("http://", "https://")):
        raise ctx.error(path, "base_url must start with http:// or https://")
    problem = base_url_problem(url) if url is not None else None
    if problem is not None:
        raise ctx.error(path, problem)


def _check_key_env(ctx: _Context, path: Path, name: str | None) -> None:
    if name is not None and llmrt.adapter.looks_like_secret(name):
        raise ctx.error(path, secret_name_reason("api_key_env"))
    if name is not None and not _ENV_NAME.fullmatch(name):
        # Never echo it: a value that is not a variable name may be the key itself.
        raise ctx.error(
            path,
            "api_key_env must be the NAME of an environment variable (letters, digits, '_'), "
            "not the key itself",
        )


def _route_spec(
    config: AdapterConfig,
    names: Sequence[str],
    source: str,
    idle: float | None,
    *,
    key_env: str | None = None,
    retry: ResolvedRetryPolicy | None = None,
) -> RouteSpec:
    """The route ``config`` serves under ``names`` (``key_env``: instead of the config's)."""
    http = config if isinstance(config, HttpAdapterConfig) else None
    tag = config.__struct_config__.tag
    return RouteSpec(
        route=names[0],
        aliases=tuple(names[1:]),
        adapter=tag if isinstance(tag, str) else "",
        source=source,
        preset=config.preset_name(),
        base_url=http.base_url if http else None,
        api_key_env=key_env or config.key_env(),
        display_name=http.display_name if http else None,
        stream_idle_timeout=idle,
        models=http.models if http else (),
        retry=retry,
        config=config,
    )


def _file_routes(
    ctx: _Context,
    entries: Sequence[AdapterConfig],
    default_idle: float | None,
    namespaces: Sequence[NamespaceSpec],
) -> list[RouteSpec]:
    routes: list[RouteSpec] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
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
        try:
            problem = entry.check()
        except Exception as exc:  # a plugin's bug is its kind's problem, with a code
            raise ctx.error(
                (*at, "adapter"),
                # The type only: the message might quote a value of the entry.
                f"adapter {entry.__struct_config__.tag!r} failed to check its entry "
                f"({type(exc).__name__})",
                code=PLUGIN_ERROR,
            ) from None
        if problem is not None:
            raise ctx.error((*at, *problem[0]), problem[1])
        retry = None
        if isinstance(entry, HttpAdapterConfig):
            _check_url(ctx, (*at, "base_url"), entry.base_url)
            _check_key_env(ctx, (*at, "api_key_env"), entry.api_key_env)
            _check_models(ctx, at, entry.models)
            if entry.retry is not None:
                retry = _retry(ctx, (*at, "retry"), entry.retry)
        namespace = entry.namespace()
        known = [spec.name for spec in namespaces]
        if namespace is not None and namespace not in known:
            meant = hint(namespace, known, quote="'")
            raise ctx.error(
                (*at, "settings_ns"),
                f"unknown settings namespace {namespace!r}{meant}: "
                f"declare it with [settings.{namespace}] (known: {', '.join(known)})",
            )
        idle = idle if idle is not None else default_idle
        routes.append(_route_spec(entry, names, ctx.source(at), idle, retry=retry))
    return routes


def _route_names(ctx: _Context, at: Path, entry: AdapterConfig) -> tuple[str, ...]:
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


def _check_models(ctx: _Context, at: Path, models: Sequence[ModelSpec]) -> None:
    seen: set[str] = set()
    for index, model in enumerate(models):
        where: Path = (*at, "models", index)
        if model.id in seen:
            raise ctx.error((*where, "id"), f"model {model.id!r} is listed twice")
        seen.add(model.id)
        if model.default_effort is not None and model.default_effort not in model.efforts:
            raise ctx.error((*where, "default_effort"), "default_effort must be one of `efforts`")


def _retry(ctx: _Context, at: Path, retry: RetryTable) -> ResolvedRetryPolicy:
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
    ctx: _Context,
    routes: list[RouteSpec],
    env: Mapping[str, str],
    default_idle: float | None,
    plugins: Plugins,
) -> list[RouteSpec]:
    """Add the plugins' detected environment routes, then their built-in routes."""
    taken = {name for spec in routes for name in spec.providers}
    used_vars = {spec.api_key_env for spec in routes}
    detected = plugins.detected()
    # A file that declares one of a variable's detected routes configures that
    # provider itself: the variable's other routes are not added either.
    used_vars |= {found.key_env for _, found in detected if found.route in taken}
    out = list(routes)
    for _, found in detected:
        var, route = found.key_env, found.route
        # Only presence is checked: the value is never kept, logged or shown.
        if env.get(var) and var not in used_vars and route not in taken:
            source = f"environment {var}"
            out.append(_route_spec(found.config, [route], source, default_idle, key_env=var))
            taken.add(route)
    for plugin in plugins.adapters.values():
        for route, config in plugin.builtin:
            if route not in taken:
                config = _builtin_config(ctx, plugin.builtin_env, config, env)
                out.append(_route_spec(config, [route], "built-in", default_idle))
                taken.add(route)
    return out


def _builtin_config(
    ctx: _Context,
    adjust: tuple[str, Callable[[AdapterConfig, str], AdapterConfig]] | None,
    config: AdapterConfig,
    env: Mapping[str, str],
) -> AdapterConfig:
    """A built-in route's config, adjusted by its plugin's variable when that is set."""
    if adjust is None or not env.get(adjust[0]):
        return config
    var, change = adjust
    try:
        return change(config, env[var])
    except ValueError as exc:
        raise ctx.error((), f"environment {var}: {exc}") from None
