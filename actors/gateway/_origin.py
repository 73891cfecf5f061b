"""Which browser pages may open a gateway websocket: the ``Origin`` and ``Host`` checks. No I/O.

Browsers attach ``Origin`` to every websocket handshake, and a page cannot
forge it; programs usually send none. So a handshake without ``Origin`` is
served as before, and one with an ``Origin`` is accepted only when that
origin is

* the gateway's own: the page the gateway serves itself, reached at the
  address the client connected to. Its origin is ``http://`` (or
  ``https://``, behind a TLS proxy) followed by exactly the ``Host`` of the
  handshake. Host and port must be equal; a ``Host`` without a port means the
  default port of the origin's scheme (80, 443), because the gateway cannot
  see whether a TLS proxy is in front of it;
* listed in the configuration (``allow_origin`` / ``--allow-origin``);
* anything, when the list holds ``*`` (allowed only together with a token:
  the token then guards the gateway alone).

The own-origin rule alone would let a DNS-rebinding page in: a page at
``http://evil.example:8765`` whose name later resolves to 127.0.0.1 connects
with ``Host: evil.example:8765`` and the matching ``Origin``. So on a loopback
bind every handshake must also name a loopback host (``localhost`` or a
loopback address); a rebound name never passes. On other binds a token is
mandatory, and a page does not know it.

The opaque origin ``null`` (sandboxed frames, ``file:`` pages) is shared by
every such page, so it can be allowed only by ``*``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Literal

import attrs

__all__ = [
    "Cause",
    "Refusal",
    "OriginPolicy",
    "normalize_origin",
    "is_loopback_host",
    "split_host",
    "LogThrottle",
]

#: Why this module refuses a handshake (also the names the refusals are counted under).
Cause = Literal["origin", "host", "per_peer"]

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_SCHEME = re.compile(r"[a-z][a-z0-9+.\-]*")
_PORT = re.compile(r"[0-9]{1,5}")
_NAME = re.compile(r"[a-z0-9_\-]+(?:\.[a-z0-9_\-]+)*\.?")
#: Bound on how much of a refused origin a log line or an answer repeats.
_SHOWN = 100
#: (Origin, Host) pairs an `OriginPolicy` remembers its answer for.
_ANSWERS = 64


@attrs.frozen
class Refusal:
    """A refused handshake: the cause, and a message safe to send and log (no secrets)."""

    cause: Cause
    message: str


def _shown(text: str) -> str:
    return repr(text[:_SHOWN] + ("..." if len(text) > _SHOWN else ""))


def _host_key(host: str) -> str | None:
    """A host name or address in the form two headers are compared in, or None if invalid."""
    host = host.lower()
    if host.startswith("["):
        if not host.endswith("]"):
            return None
        try:
            return "[" + str(ipaddress.IPv6Address(host[1:-1])) + "]"
        except ValueError:
            return None
    if not host.isascii():
        # Browsers send names as ASCII (punycode); a decoded name compares the same way.
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    return host if _NAME.fullmatch(host) else None


def split_host(value: str) -> tuple[str, int | None] | None:
    """``Host`` header ``name[:port]`` (or ``[v6]:port``) as (host key, port or None).

    None when the value is not a valid host.
    """
    value = value.strip()
    port: int | None = None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[: end + 1], value[end + 1 :]
        if rest:
            if not rest.startswith(":") or not _PORT.fullmatch(rest[1:]):
                return None
            port = int(rest[1:])
    else:
        host, sep, tail = value.rpartition(":")
        if not sep:
            host = tail
        elif _PORT.fullmatch(tail):
            port = int(tail)
        else:
            return None
    if port is not None and not 0 < port < 65536:
        return None
    key = _host_key(host)
    return None if key is None else (key, port)


def normalize_origin(value: str) -> tuple[str, str, int] | None:
    """An origin ``scheme://host[:port]`` as (scheme, host key, port), default ports filled in.

    None for the opaque origin ``null`` and for anything that is not an origin
    (a path, query, user info, an unknown scheme without a port).
    """
    scheme, sep, rest = value.strip().partition("://")
    scheme = scheme.lower()
    if not sep or not _SCHEME.fullmatch(scheme):
        return None
    hostport = split_host(rest)
    if hostport is None:
        return None
    host, port = hostport
    if port is None:
        port = _DEFAULT_PORTS.get(scheme)
        if port is None:
            return None
    return scheme, host, port


#: Loopback host keys common enough to answer without parsing an address.
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "127.0.0.1", "[::1]"})


def is_loopback_host(host: str) -> bool:
    """Whether a host key (as `split_host` returns it) names the loopback interface.

    ``localhost`` (with or without a final dot) and loopback addresses only:
    other names that resolve to 127.0.0.1 are exactly what DNS rebinding uses.
    """
    if host in _LOOPBACK_NAMES:
        return True  # the usual names, without `ipaddress` (4 us, on every request)
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@attrs.frozen
class OriginPolicy:
    """The checks every handshake passes before the upgrade; see the module docstring."""

    #: Origins allowed besides the gateway's own, as `normalize_origin` returns them.
    allowed: frozenset[tuple[str, str, int]] = frozenset()
    #: ``*`` was configured: any origin may connect (the token still applies).
    any_origin: bool = False
    #: The gateway listens on a loopback address: ``Host`` must be loopback too.
    loopback: bool = True
    #: `check`'s answers by (Origin, Host): a client sends the same pair request
    #: after request. At most `_ANSWERS` pairs, then it starts over.
    _answers: dict[tuple[str | None, str | None], Refusal | None] = attrs.field(
        factory=dict, init=False, eq=False, repr=False
    )

    @classmethod
    def build(cls, allow: Iterable[str], *, loopback: bool, token: bool) -> OriginPolicy:
        """The policy for configured origins ``allow``.

        Raises `ValueError` naming the entry when one is not an origin
        (``scheme://host[:port]``), is ``null``, or is ``*`` without a token.
        """
        allowed: set[tuple[str, str, int]] = set()
        any_origin = False
        for entry in allow:
            text = entry.strip()
            if text == "*":
                if not token:
                    raise ValueError(
                        "allow_origin '*' lets every web page use the gateway; "
                        "it is allowed only with a token (set the gateway token)"
                    )
                any_origin = True
                continue
            if text.lower() == "null":
                raise ValueError(
                    "allow_origin 'null' would admit every sandboxed or file: page; "
                    "list real origins, or '*' with a token"
                )
            # A trailing slash is a common way to write an origin in a config file.
            origin = normalize_origin(text.removesuffix("/"))
            if origin is None:
                raise ValueError(
                    f"allow_origin {_shown(entry)} is not an origin; "
                    "write scheme://host[:port], e.g. http://localhost:3000"
                )
            allowed.add(origin)
        return cls(allowed=frozenset(allowed), any_origin=any_origin, loopback=loopback)

    def check(self, origin: str | None, host: str | None) -> Refusal | None:
        """None when a handshake with these ``Origin`` and ``Host`` values may go on.

        Not a checkpoint; no I/O.
        """
        key = (origin, host)
        answers = self._answers
        try:
            return answers[key]
        except KeyError:
            pass
        refusal = self._check(origin, host)
        if len(answers) >= _ANSWERS:
            answers.clear()
        answers[key] = refusal
        return refusal

    def _check(self, origin: str | None, host: str | None) -> Refusal | None:
        parsed_host = split_host(host) if host is not None else None
        if self.loopback and (parsed_host is None or not is_loopback_host(parsed_host[0])):
            shown = _shown(host) if host is not None else "none"
            return Refusal(
                "host",
                f"this gateway listens on loopback and takes only loopback Host names "
                f"(localhost, 127.0.0.1, [::1]); Host was {shown}",
            )
        if origin is None or self.any_origin:
            return None
        parsed = normalize_origin(origin)
        if parsed is not None and (parsed in self.allowed or _own(parsed, parsed_host)):
            return None
        return Refusal(
            "origin",
            f"web pages from origin {_shown(origin)} may not use this gateway "
            "(allow it with --allow-origin or allow_origin in llmrt.toml)",
        )


def _own(origin: tuple[str, str, int], host: tuple[str, int | None] | None) -> bool:
    """Whether ``origin`` is the origin of a page served at the ``Host`` the client used."""
    scheme, name, port = origin
    if host is None or scheme not in ("http", "https"):
        return False
    host_name, host_port = host
    return name == host_name and port == (
        host_port if host_port is not None else _DEFAULT_PORTS[scheme]
    )


@attrs.define
class LogThrottle:
    """Allows one log line per key per ``interval`` seconds; remembers at most ``max_keys`` keys.

    Used for refusals (key: the peer's address) and for per-frame faults (one
    throttle per connection), so that a flood of bad input costs one line per
    interval, not one per attempt. Time is passed in: no clock, no I/O.
    """

    interval: float
    max_keys: int = 4096
    _last: dict[str, float] = attrs.field(factory=dict, init=False)
    #: How many events were not logged since each key's last line.
    _quiet: dict[str, int] = attrs.field(factory=dict, init=False)

    def allow(self, key: str, now: float) -> tuple[bool, int]:
        """Whether to log an event for ``key`` at ``now``; and how many were muted before it."""
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._quiet[key] = self._quiet.get(key, 0) + 1
            return False, 0
        if last is None and len(self._last) >= self.max_keys:
            self._forget(now)
        self._last[key] = now
        return True, self._quiet.pop(key, 0)

    def _forget(self, now: float) -> None:
        stale = [k for k, t in self._last.items() if now - t >= self.interval]
        for key in stale:
            del self._last[key]
            self._quiet.pop(key, None)
        if len(self._last) >= self.max_keys:
            # Every remembered key is recent (a flood from many addresses):
            # forgetting them costs at most one more line each.
            self._last.clear()
            self._quiet.clear()
