"""`OpenAIResponsesAdapter`: OpenAI's Responses API (``POST /v1/responses``, SSE) over httpx.

Reasoning summaries come back as reasoning blocks. Requests go with
``store: false`` and ask for ``reasoning.encrypted_content``: the provider
keeps no conversation state, and each reasoning item's encrypted content is
replay state that goes back on the next turn (the runtime passes replay
state only to the adapter instance that made it), so a reasoning model keeps
its reasoning across tool calls. One instance holds one
``httpx.AsyncClient``; `aclose` closes it.

The adapter lives in `llmrt.adapters._openai_responses_adapter`, its plugin
(the entry point, which loads without httpx) in
`llmrt.adapters._openai_responses_plugin`; this module names both.
"""

from __future__ import annotations

from ._openai_responses_adapter import RESPONSES_MODELS as RESPONSES_MODELS
from ._openai_responses_adapter import OpenAIResponsesAdapter as OpenAIResponsesAdapter
from ._openai_responses_adapter import _ResponsesEvents as _ResponsesEvents
from ._openai_responses_plugin import PLUGIN as PLUGIN
from ._openai_responses_plugin import OpenAIResponsesConfig as OpenAIResponsesConfig

__all__ = ["PLUGIN", "OpenAIResponsesConfig", "RESPONSES_MODELS", "OpenAIResponsesAdapter"]
