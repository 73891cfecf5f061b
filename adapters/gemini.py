"""`GeminiAdapter`: the Google Gemini API (``streamGenerateContent?alt=sse``) over httpx.

The key goes in the ``x-goog-api-key`` header (never in the URL, so it
cannot end up in a log line that quotes the URL). Thought summaries come
back as reasoning blocks; every ``thoughtSignature`` is replay state of its
block and goes back to Gemini on later requests (the runtime passes replay
state only to the adapter instance that made it). A reasoning effort sets
the thinking budget (``none`` turns thinking off where the model allows it).
One instance holds one ``httpx.AsyncClient``; `aclose` closes it.

The adapter lives in `llmrt.adapters._gemini_adapter`, its plugin (the entry
point, which loads without httpx) in `llmrt.adapters._gemini_plugin`; this
module names both.
"""

from __future__ import annotations

from ._gemini_adapter import GEMINI_MODELS as GEMINI_MODELS
from ._gemini_adapter import THINKING_BUDGETS as THINKING_BUDGETS
from ._gemini_adapter import GeminiAdapter as GeminiAdapter
from ._gemini_adapter import _GeminiEvents as _GeminiEvents
from ._gemini_plugin import PLUGIN as PLUGIN
from ._gemini_plugin import GeminiConfig as GeminiConfig

__all__ = ["PLUGIN", "GeminiConfig", "GEMINI_MODELS", "THINKING_BUDGETS", "GeminiAdapter"]
