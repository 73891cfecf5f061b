"""The ``anthropic`` plugin (an ``llmrt.adapters`` entry point): its keys and its route.

Every ``llmrt`` command loads every installed plugin, so this module imports
only the plugin interface; the adapter, with httpx and the wire code, is
imported when `AnthropicConfig.build` first builds one (its `adapter_class`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

import msgspec

from llmrt import ResolvedRetryPolicy

from .plugin import AdapterPlugin, Detected, HttpAdapterConfig

__all__ = ["PLUGIN", "AnthropicConfig"]


class AnthropicConfig(HttpAdapterConfig, tag="anthropic", frozen=True):
    """A ``[[provider]]`` entry with ``adapter = "anthropic"``."""

    #: The output cap when a call sets none (Anthropic requires one).
    default_max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None

    default_key_env: ClassVar[str | None] = "ANTHROPIC_API_KEY"
    fallback_model: ClassVar[str | None] = "claude-sonnet-4-5"
    adapter_class: ClassVar[str | None] = "llmrt.adapters._anthropic_adapter:AnthropicAdapter"

    def adapter_kwargs(
        self,
        *,
        key_env: str | None,
        retry: ResolvedRetryPolicy | None,
        environ: Mapping[str, str] | None,
    ) -> dict[str, Any]:
        kwargs = super().adapter_kwargs(key_env=key_env, retry=retry, environ=environ)
        if self.default_max_tokens is not None:
            kwargs["default_max_tokens"] = self.default_max_tokens
        return kwargs


PLUGIN = AdapterPlugin(
    config=AnthropicConfig,
    summary="Anthropic Messages API",
    detect=(Detected("ANTHROPIC_API_KEY", "anthropic", AnthropicConfig(), rank=40),),
)
