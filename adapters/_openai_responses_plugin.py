"""The ``openai_responses`` plugin (an ``llmrt.adapters`` entry point): its keys and its route.

Every ``llmrt`` command loads every installed plugin, so this module imports
only the plugin interface; the adapter, with httpx and the wire code, is
imported when `OpenAIResponsesConfig.build` first builds one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from llmrt import Adapter, ResolvedRetryPolicy

from .plugin import AdapterPlugin, Detected, HttpAdapterConfig

__all__ = ["PLUGIN", "OpenAIResponsesConfig"]


class OpenAIResponsesConfig(HttpAdapterConfig, tag="openai_responses", frozen=True):
    """A ``[[provider]]`` entry with ``adapter = "openai_responses"``."""

    default_key_env: ClassVar[str | None] = "OPENAI_API_KEY"

    def default_model(self) -> str | None:
        return self.models[0].id if self.models else "gpt-5-mini"

    def build(
        self,
        *,
        key_env: str | None,
        retry: ResolvedRetryPolicy | None,
        environ: Mapping[str, str] | None,
    ) -> Adapter:
        from ._openai_responses_adapter import OpenAIResponsesAdapter

        return OpenAIResponsesAdapter(
            **self.adapter_kwargs(key_env=key_env, retry=retry, environ=environ)
        )


PLUGIN = AdapterPlugin(
    config=OpenAIResponsesConfig,
    summary="OpenAI Responses API",
    detect=(
        # The same key also serves chat completions, on the ``openai`` route
        # (the openai_chat plugin's): that route stays on chat completions.
        Detected("OPENAI_API_KEY", "openai-responses", OpenAIResponsesConfig(), rank=30),
    ),
)
