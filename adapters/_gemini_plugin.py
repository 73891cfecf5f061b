"""The ``gemini`` plugin (an ``llmrt.adapters`` entry point): its keys and its routes.

Every ``llmrt`` command loads every installed plugin, so this module imports
only the plugin interface; the adapter, with httpx and the wire code, is
imported when `GeminiConfig.build` first builds one (its `adapter_class`).
"""

from __future__ import annotations

from typing import ClassVar

from .plugin import AdapterPlugin, Detected, HttpAdapterConfig

__all__ = ["PLUGIN", "GeminiConfig"]


class GeminiConfig(HttpAdapterConfig, tag="gemini", frozen=True):
    """A ``[[provider]]`` entry with ``adapter = "gemini"``."""

    default_key_env: ClassVar[str | None] = "GEMINI_API_KEY"
    fallback_model: ClassVar[str | None] = "gemini-2.5-flash"
    adapter_class: ClassVar[str | None] = "llmrt.adapters._gemini_adapter:GeminiAdapter"


PLUGIN = AdapterPlugin(
    config=GeminiConfig,
    summary="Google Gemini API",
    detect=(
        Detected("GEMINI_API_KEY", "gemini", GeminiConfig(), rank=50),
        # Google's tools read either name; GEMINI_API_KEY wins when both are set.
        Detected("GOOGLE_API_KEY", "gemini", GeminiConfig(), rank=51),
    ),
)
