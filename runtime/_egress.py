"""Where a request another party chose may go: the shape of a base URL and the addresses it reaches.

A gateway that lets its clients name an endpoint (``discover_any_url``) makes
requests to URLs it did not choose: a server-side request forgery surface by
design. The rules for such a URL live here, without I/O:

* `base_url_problem`: a base URL is a scheme (``http``/``https``), a host, an
  optional port and a path; no userinfo (``user:pass@``, a credential in a
  URL), no query and no fragment (``?x=`` would swallow the ``/models`` path
  appended to it), no whitespace or control characters.
* `is_public_address`: an address a client-named request may reach unless
  the operator allowed private ones: not loopback, private (RFC 1918, ULA),
  link-local (``169.254/16``: cloud metadata endpoints), carrier-grade NAT,
  multicast, unspecified or reserved; an IPv4 address inside IPv6 (mapped,
  6to4, Teredo, NAT64) is judged by the IPv4 address.
* `OUTBOUND`: the policy of the request being served, a context variable set
  by the component that accepted the request (the gateway, for a
  ``discover-models`` frame naming a ``baseURL``) and read where the request
  is made: model discovery checks every address the host resolves to before
  connecting, and llmrt's HTTP transport checks the address it actually
  connected to, so a name that resolves to a public address for the check
  and to a private one for the connection (DNS rebinding) is refused too.

A context variable rather than a parameter: the request passes through a
host-defined ``discover`` callable (`LlmRuntime.register_model_discovery`)
whose signature cannot grow, and trio copies the context into every task,
so the policy stays with the one request that set it.
"""

from __future__ import annotations

import contextvars
import ipaddress
import urllib.parse

import attrs

__all__ = ["OUTBOUND", "OutboundPolicy", "base_url_problem", "is_public_address"]


@attrs.frozen
class OutboundPolicy:
    """How far a request another party named may reach."""

    #: Loopback, private and link-local addresses allowed (``discover_allow_private``).
    allow_private: bool = False


#: The policy of the request this task serves (None: the program's own request, unrestricted).
OUTBOUND: contextvars.ContextVar[OutboundPolicy | None] = contextvars.ContextVar(
    "llmrt_outbound", default=None
)

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def base_url_problem(url: str) -> str | None:
    """Why ``url`` is not a base URL (scheme, host, port, path only), or None. Never echoes it."""
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return "a base URL holds no spaces or control characters"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError for a port that is not a number in range
    except ValueError:
        return "the base URL is not a valid URL"
    if parts.scheme not in ("http", "https"):
        return "a base URL must start with http:// or https://"
    if "@" in parts.netloc:
        return "a base URL holds no user name or password (user:pass@host)"
    if not parts.hostname:
        return "a base URL needs a host"
    if "?" in url or "#" in url:
        return "a base URL is a scheme, host, port and path: no query (?) or fragment (#)"
    return None


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public_address(address: str) -> bool:
    """Whether ``address`` (an IP literal; an IPv6 scope ``%eth0`` is allowed) is globally routed.

    False for anything that is not an IP address.
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None:
            return is_public_address(str(inner))
    return ip.is_global and not ip.is_multicast
