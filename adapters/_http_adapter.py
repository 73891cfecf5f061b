"""`HttpAdapter`: what every HTTP adapter shares besides its wire format.

The transport settings (HTTP/2, timeouts, pool limits, a replacement
transport for tests, TLS context), the environment the key is read from, the
route's retry policy, one `Upstream` (client) per adapter, the `Redactor`
of the key it sends (which the runtime applies to every call's failure, and
this class to model-list errors, which are not calls), the pool figures the
metrics read, and closing. A concrete adapter declares its own ``base_url``,
``api_key_env``, model table and wire decoding, and calls
`HttpAdapter._open_client` once its ``base_url`` is final.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import attrs
import httpx

from llmrt import Adapter, LlmError, ModelInfo, ResolvedRetryPolicy
from llmrt.adapter import Redactor, RuntimeServices

from ._exchange import Exchanger, Upstream
from ._http import KeyRedaction, make_client, pool_counts
from ._models import fetch_models

__all__ = ["HttpAdapter"]


@attrs.define(eq=False)
class HttpAdapter(Adapter):
    """The shared half of the HTTP adapters (see the module docstring); not used alone."""

    retry_policy: ResolvedRetryPolicy | None = None
    http2: bool | None = None
    timeout: httpx.Timeout | None = None
    limits: httpx.Limits | None = None
    #: Replaces the transport: an `Exchanger` as it is, an httpx transport wrapped once.
    transport: httpx.AsyncBaseTransport | Exchanger | None = attrs.field(default=None, repr=False)
    #: Certificate checks for https (e.g. a private CA); None: the system's defaults.
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, repr=False)
    #: Replaces ``os.environ`` for the key lookup (tests, embedding hosts).
    environ: Mapping[str, str] | None = attrs.field(default=None, repr=False)
    _client: Upstream = attrs.field(init=False, repr=False)
    _redaction: KeyRedaction = attrs.field(factory=KeyRedaction, init=False, repr=False)

    def _key_env(self) -> str | None:
        """The variable the adapter's key is read from (None: it sends none).

        Every concrete adapter declares its own ``api_key_env`` field (with its
        own default), so the base reads it by name.
        """
        key_env: str | None = getattr(self, "api_key_env", None)
        return key_env

    async def _fetch_models(self, path: str, **kwargs: Any) -> tuple[ModelInfo, ...]:
        """`fetch_models` on the adapter's client, its key removed from failures.

        Not a call, so not behind the call's redaction point: redacted here.
        """
        try:
            return await fetch_models(self._client, path, **kwargs)
        except LlmError as exc:
            raise self.redactor().error(exc) from None

    def _open_client(self, base_url: str, *, message: str | None = None) -> str:
        """Check ``base_url`` and open the adapter's one client on it; returns it trimmed.

        Raises `ValueError` (``message``, or a plain one) when it is not http(s).
        """
        base_url = base_url.rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(message or "base_url must start with http:// or https://")
        self._client = make_client(
            base_url,
            timeout=self.timeout,
            limits=self.limits,
            http2=self.http2,
            transport=self.transport,
            ssl_context=self.ssl_context,
        )
        return base_url

    def redactor(self) -> Redactor:
        """Removes the key now in the adapter's key variable (and credential-looking phrases)."""
        return self._redaction.of(self._key_env(), self.environ)

    def provider_retry_policy(self, provider: str) -> ResolvedRetryPolicy | None:
        return self.retry_policy

    def connection_counts(self) -> tuple[int, int] | None:
        return pool_counts(self._client)

    def attach_runtime(self, services: RuntimeServices) -> None:
        """The transport watches its read deadlines on the runtime's heap."""
        self._client.transport.attach_runtime(services)

    def detach_runtime(self) -> None:
        self._client.transport.detach_runtime()

    async def aclose(self) -> None:
        await self._client.aclose()
