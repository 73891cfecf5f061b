"""The installed adapters: the ``llmrt.adapters`` entry-point group, loaded once.

Configuration, the CLI and the gateway's ``serve`` learn about adapters only
here: llmrt's own adapters are entry points of llmrt's distribution, a
third-party adapter package adds its own (see ``docs/adapters.md``).

A plugin that cannot be used is a problem of its kind alone, never of the
process: an entry point that fails to import, that is not an
`AdapterPlugin`, whose config is not an `AdapterConfig` Struct or is not
tagged with the entry point's name,
or a kind claimed by two different entry points. Each problem is one line
(`PLUGIN_ERROR`); ``llmrt.toml`` reports it where an entry uses that kind,
the CLI prints it, and every other adapter keeps working.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Final

import attrs

from llmrt.adapters.plugin import ENTRY_POINT_GROUP, AdapterConfig, AdapterPlugin, Detected

__all__ = ["PLUGIN_ERROR", "Plugins", "installed", "load_plugins"]

#: The stable code of a plugin problem (in `llmrt.actors.app.config.ConfigError.code`).
PLUGIN_ERROR: Final = "ADAPTER_PLUGIN"


@attrs.frozen
class Plugins:
    """The usable adapters by kind (entry-point order) and the unusable ones' problems."""

    adapters: Mapping[str, AdapterPlugin]
    problems: Mapping[str, str] = attrs.field(factory=dict)

    def detected(self) -> list[tuple[str, Detected]]:
        """Every plugin's zero-config routes with their kind, in rank order (stable)."""
        found = [(kind, d) for kind, plugin in self.adapters.items() for d in plugin.detect]
        return sorted(found, key=lambda item: item[1].rank)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _origin(point: EntryPoint) -> str:
    dist = point.dist.name if point.dist is not None else "?"
    return f"{dist} ({point.value})"


def load_plugins(points: Iterable[EntryPoint]) -> Plugins:
    """Load each entry point; a bad one becomes a problem of its name, never an exception."""
    claims: dict[str, list[EntryPoint]] = {}
    for point in points:
        same = claims.setdefault(point.name, [])
        # One distribution seen twice on the path (an editable install, say) is one claim.
        if all(other.value != point.value for other in same):
            same.append(point)
    adapters: dict[str, AdapterPlugin] = {}
    problems: dict[str, str] = {}
    for name, found in claims.items():
        if len(found) > 1:
            problems[name] = f"adapter {name!r} is claimed by " + " and ".join(map(_origin, found))
            continue
        try:
            plugin = found[0].load()
        except Exception as exc:  # any import-time failure is the plugin's, not ours
            problems[name] = f"adapter {name!r} failed to load: {_one_line(exc)}"
            continue
        if not isinstance(plugin, AdapterPlugin):
            problems[name] = f"adapter {name!r}: {found[0].value} is not an AdapterPlugin"
        elif not (isinstance(plugin.config, type) and issubclass(plugin.config, AdapterConfig)):
            problems[name] = f"adapter {name!r}: its config is not an AdapterConfig Struct"
        elif plugin.kind != name:
            problems[name] = (
                f"adapter {name!r}: its config Struct is tagged {plugin.kind!r}, not {name!r}"
            )
        else:
            adapters[name] = plugin
    return Plugins(adapters=adapters, problems=problems)


@functools.cache
def installed() -> Plugins:
    """The adapters of the ``llmrt.adapters`` group, loaded on first use and kept."""
    return load_plugins(entry_points(group=ENTRY_POINT_GROUP))
