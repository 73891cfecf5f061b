"""`OpenAIChatAdapter`: OpenAI-compatible chat completions over httpx (SSE).

Presets (data in `llmrt.adapters._presets`; each names a base URL, a key
variable, a wire `Dialect` and a model table where the provider documents one):

* hosted: ``deepseek-official``, ``openai``, ``openrouter``, ``groq``,
  ``cerebras``, ``mistral``, ``xai``, ``together``, ``fireworks``;
* local servers, no key: ``vllm``, ``ollama``, ``llama.cpp``, ``lmstudio``;
* ``openai-compatible`` — any other server speaking chat completions (a
  LiteLLM proxy, say): give ``base_url``, and ``api_key_env`` if it wants a key.

See ``docs/adapters.md`` for each preset's reasoning form and usage rule.

One adapter instance holds one ``httpx.AsyncClient`` (one connection pool)
for its endpoint; `aclose` closes it.

Model discovery (`EndpointDiscovery`): the adapter owns two settings
namespaces, ``openai-compatible`` (``GET {base_url}/models``) and ``ollama``
(Ollama's native ``GET /api/tags``; ``/v1/models`` works too). A host offers
them with ``LlmRuntime.register_model_discovery`` (``llmrt.toml`` does it
for its routes, see ``docs/configuration.md``) and declares the routes with
`configurable_provider`.

The adapter and the discovery live in `llmrt.adapters._openai_chat_adapter`,
the plugin (the entry point, which loads without httpx) in
`llmrt.adapters._openai_chat_plugin`, the presets and namespaces in
`llmrt.adapters._presets`; this module names them all.
"""

from __future__ import annotations

from ._openai_chat_adapter import DISCOVERY_TIMEOUT as DISCOVERY_TIMEOUT
from ._openai_chat_adapter import DiscoveryEndpoint as DiscoveryEndpoint
from ._openai_chat_adapter import EndpointDiscovery as EndpointDiscovery
from ._openai_chat_adapter import OpenAIChatAdapter as OpenAIChatAdapter
from ._openai_chat_adapter import _OpenAIEvents as _OpenAIEvents
from ._openai_chat_plugin import PLUGIN as PLUGIN
from ._openai_chat_plugin import OpenAIChatConfig as OpenAIChatConfig
from ._openai_chat_plugin import configurable_provider as configurable_provider
from ._presets import DISCOVERY_APIS as DISCOVERY_APIS
from ._presets import OLLAMA_NS as OLLAMA_NS
from ._presets import OPENAI_COMPATIBLE_NS as OPENAI_COMPATIBLE_NS
from ._presets import PRESET_ALIASES as PRESET_ALIASES
from ._presets import PRESETS as PRESETS
from ._presets import Preset as Preset
from ._presets import discovery_api_of as discovery_api_of
from ._presets import find_preset as find_preset
from ._presets import settings_ns_of as settings_ns_of
from .plugin import ModelSpec as ModelSpec

__all__ = [
    "PLUGIN",
    "OpenAIChatConfig",
    "ModelSpec",
    "Preset",
    "PRESETS",
    "PRESET_ALIASES",
    "find_preset",
    "OpenAIChatAdapter",
    "DISCOVERY_APIS",
    "OPENAI_COMPATIBLE_NS",
    "OLLAMA_NS",
    "DISCOVERY_TIMEOUT",
    "DiscoveryEndpoint",
    "EndpointDiscovery",
    "discovery_api_of",
    "settings_ns_of",
    "configurable_provider",
]
