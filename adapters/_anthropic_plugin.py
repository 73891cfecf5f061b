"""The ``anthropic`` plugin (an ``llmrt.adapters`` entry point): its keys and its route.

Every ``llmrt`` command loads every installed plugin, so this module imports
only the plugin interface; the adapter, with httpx and the wire code, is
imported when `AnthropicConfig.build` first builds one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, ClassVar

import msgspec

from llmrt import Adapter, ResolvedRetryPolicy

from .plugin import AdapterPlugin, Detected, HttpAdapterConfig

__all__ = ["PLUGIN", "AnthropicConfig"]


class AnthropicConfig(HttpAdapterConfig, tag="anthropic", frozen=True):
    """A ``[[provider]]`` entry with ``adapter = "anthropic"``."""

    #: The output cap when a call sets none (Anthropic requires one).
    default_max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None

    default_key_env: ClassVar[str | None] = "ANTHROPIC_API_KEY"

    def default_model(self) -> str | None:
        return self.models[0].id if self.models else "claude-sonnet-4-5"

    def build(
        self,
        *,
        key_env: str | None,
        retry: ResolvedRetryPolicy | None,
        environ: Mapping[str, str] | None,
    ) -> Adapter:
        from ._anthropic_adapter import AnthropicAdapter

        kwargs = self.adapter_kwargs(key_env=key_env, retry=retry, environ=environ)
        if self.default_max_tokens is not None:
            kwargs["default_max_tokens"] = self.default_max_tokens
        return AnthropicAdapter(**kwargs)


PLUGIN = AdapterPlugin(
    config=AnthropicConfig,
    summary="Anthropic Messages API",
    detect=(Detected("ANTHROPIC_API_KEY", "anthropic", AnthropicConfig(), rank=40),),
)
