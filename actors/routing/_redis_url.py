"""``[routing] redis = URL``: which Redis client a URL makes, and opening it (coredis).

Schemes: ``redis://`` and ``rediss://`` (one server; TLS), ``unix://`` (a
socket path), ``redis+cluster://`` / ``rediss+cluster://`` (a cluster, from
one startup node) and ``redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB]``
(the primary a set of sentinels names). A URL may hold a password: no
message here ever quotes it.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

__all__ = ["MAX_CONNECTIONS", "url_problem", "open_client"]

#: Connections one process opens to Redis (per node for a cluster).
MAX_CONNECTIONS = 4

_PLAIN = ("redis", "rediss", "unix")
_CLUSTER = ("redis+cluster", "rediss+cluster")
_SENTINEL = ("redis+sentinel",)


def _scheme(url: str) -> str:
    return url.partition("://")[0].lower() if "://" in url else ""


def _sentinels(url: str) -> tuple[list[tuple[str, int]], str, int]:
    """The sentinel nodes, the service name and the database of a ``redis+sentinel://`` URL."""
    rest = url.partition("://")[2]
    netloc, _, path = rest.partition("/")
    if "@" in netloc:
        netloc = netloc.rpartition("@")[2]
    nodes = []
    for node in netloc.split(","):
        host, _, port = node.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError("each sentinel is HOST:PORT")
        nodes.append((host.strip("[]"), int(port)))
    service, _, db = path.partition("/")
    if not service:
        raise ValueError("a sentinel URL names the service: redis+sentinel://HOST:PORT/SERVICE")
    if db and not db.isdigit():
        raise ValueError("the database of a sentinel URL is a number")
    return nodes, service, int(db or 0)


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a Redis URL routing can use, or None. Never quotes the URL."""
    scheme = _scheme(url)
    if scheme not in (*_PLAIN, *_CLUSTER, *_SENTINEL):
        return (
            "redis must be a redis://, rediss://, unix://, redis+cluster://, "
            "rediss+cluster:// or redis+sentinel:// URL"
        )
    if scheme in _SENTINEL:
        try:
            _sentinels(url)
        except ValueError as exc:
            return str(exc)
        return None
    try:
        parsed = urllib.parse.urlsplit(url)
        parsed.port  # noqa: B018  # raises ValueError for a port that is not a number
    except ValueError:
        return "the Redis URL's port is not a number"
    if scheme != "unix" and not parsed.hostname:
        return "the Redis URL names no host"
    return None


def _password(url: str) -> str | None:
    parsed = urllib.parse.urlsplit(url.replace("redis+sentinel://", "redis://", 1))
    return urllib.parse.unquote(parsed.password) if parsed.password else None


def password_of(url: str) -> str | None:
    """The password a URL holds (for the one redaction point), or None."""
    try:
        if _scheme(url) in _SENTINEL:
            netloc = url.partition("://")[2].partition("/")[0]
            if "@" not in netloc:
                return None
            userinfo = netloc.rpartition("@")[0]
            secret = userinfo.partition(":")[2] or userinfo
            return urllib.parse.unquote(secret) or None
        return _password(url)
    except ValueError:
        return None


@asynccontextmanager
async def open_client(url: str, bound: float) -> AsyncIterator[Any]:
    """A connected coredis client for ``url`` (checked by `url_problem`), closed on exit.

    No retries inside the client: a failed round trip is the router's to
    handle (it goes on with local state). ``bound`` (seconds) bounds connecting and
    each reply.
    """
    import coredis
    from coredis.retry import NoRetryPolicy

    scheme = _scheme(url)
    options: dict[str, Any] = {
        "connect_timeout": bound,
        "stream_timeout": bound,
        "retry_policy": NoRetryPolicy(),
        # coredis multiplexes commands over a connection: a few serve any number
        # of calls, and a burst of calls does not open (and handshake) one each.
        "max_connections": MAX_CONNECTIONS,
    }
    if scheme in _SENTINEL:
        from coredis.connection import TCPLocation

        nodes, service, db = _sentinels(url)
        password = password_of(url)
        primary: dict[str, Any] = {
            "db": db,
            "connect_timeout": bound,
            "stream_timeout": bound,
            "max_connections": MAX_CONNECTIONS,
        }
        if password:
            primary["password"] = password
        sentinel: Any = coredis.Sentinel(
            [TCPLocation(host, port) for host, port in nodes],
            sentinel_kwargs={"connect_timeout": bound, "stream_timeout": bound},
            **primary,
        )
        async with sentinel, sentinel.primary_for(service) as client:
            yield client
        return
    if scheme in _CLUSTER:
        plain = url.replace("+cluster", "", 1)
        cluster: Any = coredis.RedisCluster.from_url(plain, **options)
        async with cluster:
            yield cluster
        return
    single: Any = coredis.Redis.from_url(url, **options)
    async with single:
        yield single
