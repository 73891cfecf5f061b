"""`AnthropicAdapter`: the Anthropic Messages API over httpx (SSE).

Thinking blocks come back as reasoning blocks; their signatures travel as
per-block replay state and go back to Anthropic on later requests (the
runtime passes replay state only to the adapter instance that made it).
A reasoning effort (``low`` / ``medium`` / ``high``) turns extended thinking
on with a matching token budget. One instance holds one
``httpx.AsyncClient``; `aclose` closes it.

The adapter lives in `llmrt.adapters._anthropic_adapter`, its plugin (the
entry point, which loads without httpx) in `llmrt.adapters._anthropic_plugin`;
this module names both.
"""

from __future__ import annotations

from ._anthropic_adapter import ANTHROPIC_MODELS as ANTHROPIC_MODELS
from ._anthropic_adapter import API_VERSION as API_VERSION
from ._anthropic_adapter import THINKING_BUDGETS as THINKING_BUDGETS
from ._anthropic_adapter import AnthropicAdapter as AnthropicAdapter
from ._anthropic_adapter import _AnthropicEvents as _AnthropicEvents
from ._anthropic_plugin import PLUGIN as PLUGIN
from ._anthropic_plugin import AnthropicConfig as AnthropicConfig

__all__ = ["PLUGIN", "AnthropicConfig", "AnthropicAdapter", "ANTHROPIC_MODELS", "THINKING_BUDGETS"]
