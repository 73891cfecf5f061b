"""`describe`: a `Config` as one line per route, for ``llmrt providers`` and the serve
banner; names and whether a key variable is set, never a key."""

from __future__ import annotations

import llmrt

from ._types import Config

__all__ = ["describe"]


def describe(config: Config) -> list[str]:
    """One line per route for the CLI: names, adapter, key variable and whether it is set;
    then one per routing group: its strategy and deployments.

    Never includes a key's value.
    """
    rows = []
    for spec in config.routes:
        kind = spec.adapter + (f"/{spec.preset}" if spec.preset else "")
        if spec.api_key_env and llmrt.adapter.looks_like_secret(spec.api_key_env):
            # Only a route built in code gets here (the loader refuses it): never shown.
            key = "key: (a variable name that looks like a key, not shown)"
        elif spec.api_key_env:
            state = "set" if spec.api_key_env in config.keys_set else "NOT SET"
            key = f"key: ${spec.api_key_env} ({state})"
        else:
            key = "key: none"
        rows.append((", ".join(spec.providers), kind, key, spec.source))
    for group in config.groups:
        deployments = ", ".join(d.id for d in group.deployments)
        rows.append((group.name, f"group/{group.strategy}", deployments, "routing group"))
    width = [max((len(row[n]) for row in rows), default=0) for n in range(3)]
    return [
        f"{names:<{width[0]}}  {kind:<{width[1]}}  {key:<{width[2]}}  [{source}]"
        for names, kind, key, source in rows
    ]
