"""The ``gemini`` plugin (an ``llmrt.adapters`` entry point): its keys and its routes.

Every ``llmrt`` command loads every installed plugin, so this module imports
only the plugin interface; the adapter, with httpx and the wire code, is
imported when `GeminiConfig.build` first builds one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from llmrt import Adapter, ResolvedRetryPolicy

from .plugin import AdapterPlugin, Detected, HttpAdapterConfig

__all__ = ["PLUGIN", "GeminiConfig"]


class GeminiConfig(HttpAdapterConfig, tag="gemini", frozen=True):
    """A ``[[provider]]`` entry with ``adapter = "gemini"``."""

    default_key_env: ClassVar[str | None] = "GEMINI_API_KEY"

    def default_model(self) -> str | None:
        return self.models[0].id if self.models else "gemini-2.5-flash"

    def build(
        self,
        *,
        key_env: str | None,
        retry: ResolvedRetryPolicy | None,
        environ: Mapping[str, str] | None,
    ) -> Adapter:
        from ._gemini_adapter import GeminiAdapter

        return GeminiAdapter(**self.adapter_kwargs(key_env=key_env, retry=retry, environ=environ))


PLUGIN = AdapterPlugin(
    config=GeminiConfig,
    summary="Google Gemini API",
    detect=(
        Detected("GEMINI_API_KEY", "gemini", GeminiConfig(), rank=50),
        # Google's tools read either name; GEMINI_API_KEY wins when both are set.
        Detected("GOOGLE_API_KEY", "gemini", GeminiConfig(), rank=51),
    ),
)
