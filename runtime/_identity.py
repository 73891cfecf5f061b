"""The public application identity sent to providers as ``User-Agent``."""

from __future__ import annotations

import functools

from ._wire import Wire

__all__ = ["AppIdentity", "app_identity", "attribution_headers"]


class AppIdentity(Wire, frozen=True):
    """Public product facts only: no secrets, paths, session or user ids."""

    product: str
    version: str
    url: str


@functools.cache
def app_identity() -> AppIdentity:
    """llmrt's identity, with version and URL read from the installed package metadata."""
    from importlib import metadata  # on first use: it costs a process start ~10 ms

    try:
        meta = metadata.metadata("llmrt")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare source tree
        return AppIdentity(product="llmrt", version="0+unknown", url="")
    url = ""
    for entry in meta.get_all("Project-URL") or ():
        label, _, value = entry.partition(",")
        if label.strip().lower() == "homepage":
            url = value.strip()
    return AppIdentity(product="llmrt", version=meta["Version"], url=url)


def attribution_headers(identity: AppIdentity | None = None) -> dict[str, str]:
    """The headers every provider request carries: ``User-Agent: product/version (+url)``."""
    ident = identity or app_identity()
    agent = f"{ident.product}/{ident.version}"
    if ident.url:
        agent += f" (+{ident.url})"
    return {"User-Agent": agent}
