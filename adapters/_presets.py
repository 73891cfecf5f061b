"""The OpenAI-compatible presets: endpoints, key variables, dialects and model tables, as data.

A `Preset` names one provider (or kind of local server) that speaks chat
completions: its base URL, the environment variable holding its key (None
for a local server), its `Dialect` (where reasoning arrives, how usage
counts it; see `llmrt.adapters._dialects`), the route name a detected
key registers, and a model table where the provider documents one. Tables
are advisory (a model not in the table is still served, with defaults);
``list_models`` asks the endpoint first and falls back on them.

Adding a provider is adding an entry here; the decoder has no
provider branches.

A preset's routes also belong to a settings namespace of model discovery
(`settings_ns_of`: ``ollama`` for Ollama's, ``openai-compatible`` for every
other), whose endpoints are asked for one of the `DISCOVERY_APIS` lists.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Final

import attrs

from llmrt.adapter import looks_like_secret

from ._dialects import DIALECTS, Dialect
from .plugin import MaxTokensField, ModelSpec

__all__ = [
    "DISCOVERY_APIS",
    "OLLAMA_NS",
    "OPENAI_COMPATIBLE_NS",
    "Preset",
    "PRESETS",
    "PRESET_ALIASES",
    "discovery_api_of",
    "find_preset",
    "settings_ns_of",
    "unknown_preset",
]


@attrs.frozen
class Preset:
    """One OpenAI-compatible endpoint family (module docstring)."""

    name: str
    display_name: str
    #: The `Dialect`'s name (a key of ``DIALECTS``); it also labels failures.
    kind: str
    base_url: str | None
    api_key_env: str | None
    models: tuple[ModelSpec, ...] = ()
    #: The route a set key registers without configuration (None: only from a config file).
    route: str | None = None
    #: A server on this machine: no key; listed only when the config file declares it.
    local: bool = False
    #: The provider id its calls are priced under in genai-prices (None: no published prices).
    price_provider: str | None = None

    @property
    def dialect(self) -> Dialect:
        return DIALECTS[self.kind]


def _m(
    id: str,
    name: str | None = None,
    context: int | None = None,
    max_tokens: int | None = None,
    *,
    image: bool = False,
    efforts: tuple[str, ...] = (),
    field: MaxTokensField = "max_tokens",
) -> ModelSpec:
    return ModelSpec(
        id=id,
        name=name,
        context_window=context,
        default_max_tokens=max_tokens,
        image_input=image,
        efforts=efforts,
        max_tokens_field=field,
    )


# DeepSeek: the context limit is the one a recorded 2026 overflow error states
# (tests/wire/errors.json, "deepseek_400_context_window"); both names are served
# by the same model now. Output defaults follow DeepSeek's API reference.
_DEEPSEEK = (
    _m("deepseek-chat", "DeepSeek Chat", 1_048_565, 4_096, efforts=("none",)),
    _m("deepseek-reasoner", "DeepSeek Reasoner", 1_048_565, 32_768),
)
_OPENAI = (
    _m("gpt-4.1", context=1_047_576, max_tokens=8_192, image=True),
    _m("gpt-4.1-mini", context=1_047_576, max_tokens=8_192, image=True),
    _m("gpt-4o", context=128_000, max_tokens=4_096, image=True),
    _m("gpt-4o-mini", context=128_000, max_tokens=4_096, image=True),
    _m(
        "o4-mini",
        context=200_000,
        max_tokens=16_384,
        image=True,
        efforts=("low", "medium", "high"),
        field="max_completion_tokens",
    ),
)
# Groq's production models page: context windows and output caps as listed there.
_GROQ = (
    _m("llama-3.3-70b-versatile", "Llama 3.3 70B Versatile", 131_072, 32_768),
    _m("llama-3.1-8b-instant", "Llama 3.1 8B Instant", 131_072),
    _m("openai/gpt-oss-120b", "GPT-OSS 120B", 131_072, 65_536, efforts=("low", "medium", "high")),
    _m("openai/gpt-oss-20b", "GPT-OSS 20B", 131_072, 65_536, efforts=("low", "medium", "high")),
)
# Cerebras's models page (context depends on the account tier, so it is left unknown).
_CEREBRAS = (
    _m("llama3.1-8b", "Llama 3.1 8B"),
    _m("llama-3.3-70b", "Llama 3.3 70B"),
    _m("gpt-oss-120b", "GPT-OSS 120B", efforts=("low", "medium", "high")),
    _m("qwen-3-32b", "Qwen 3 32B"),
)
# Mistral's models overview: the ``-latest`` aliases.
_MISTRAL = (
    _m("mistral-large-latest", "Mistral Large", 131_072, image=True),
    _m("mistral-medium-latest", "Mistral Medium", 131_072, image=True),
    _m("mistral-small-latest", "Mistral Small", 131_072, image=True),
    _m("magistral-medium-latest", "Magistral Medium", 131_072),
    _m("magistral-small-latest", "Magistral Small", 131_072),
    _m("codestral-latest", "Codestral", 262_144),
)
# xAI's models page.
_XAI = (
    _m("grok-4", "Grok 4", 256_000, image=True),
    _m("grok-3", "Grok 3", 131_072),
    _m("grok-3-mini", "Grok 3 Mini", 131_072, efforts=("low", "high")),
    _m("grok-code-fast-1", "Grok Code Fast 1", 256_000),
)

_PRESETS = (
    Preset(
        name="deepseek-official",
        display_name="DeepSeek",
        kind="deepseek",
        base_url="https://api.deepseek.com",
        api_key_env="DEEPSEEK_API_KEY",
        models=_DEEPSEEK,
        route="deepseek",
        price_provider="deepseek",
    ),
    Preset(
        name="openai",
        display_name="OpenAI",
        kind="openai",
        base_url="https://api.openai.com/v1",
        api_key_env="OPENAI_API_KEY",
        models=_OPENAI,
        route="openai",
        price_provider="openai",
    ),
    Preset(
        name="openai-compatible",
        display_name="OpenAI-compatible server",
        kind="openai",
        base_url=None,
        api_key_env=None,
    ),
    Preset(
        name="openrouter",
        display_name="OpenRouter",
        kind="openrouter",
        base_url="https://openrouter.ai/api/v1",
        api_key_env="OPENROUTER_API_KEY",
        route="openrouter",
        price_provider="openrouter",
    ),
    Preset(
        name="groq",
        display_name="Groq",
        kind="groq",
        base_url="https://api.groq.com/openai/v1",
        api_key_env="GROQ_API_KEY",
        models=_GROQ,
        route="groq",
        price_provider="groq",
    ),
    Preset(
        name="cerebras",
        display_name="Cerebras",
        kind="cerebras",
        base_url="https://api.cerebras.ai/v1",
        api_key_env="CEREBRAS_API_KEY",
        models=_CEREBRAS,
        route="cerebras",
        price_provider="cerebras",
    ),
    Preset(
        name="mistral",
        display_name="Mistral",
        kind="mistral",
        base_url="https://api.mistral.ai/v1",
        api_key_env="MISTRAL_API_KEY",
        models=_MISTRAL,
        route="mistral",
        price_provider="mistral",
    ),
    Preset(
        name="xai",
        display_name="xAI",
        kind="xai",
        base_url="https://api.x.ai/v1",
        api_key_env="XAI_API_KEY",
        models=_XAI,
        route="xai",
        price_provider="x-ai",
    ),
    Preset(
        name="together",
        display_name="Together AI",
        kind="together",
        base_url="https://api.together.xyz/v1",
        api_key_env="TOGETHER_API_KEY",
        route="together",
        price_provider="together",
    ),
    Preset(
        name="fireworks",
        display_name="Fireworks AI",
        kind="fireworks",
        base_url="https://api.fireworks.ai/inference/v1",
        api_key_env="FIREWORKS_API_KEY",
        route="fireworks",
        price_provider="fireworks",
    ),
    Preset(
        name="vllm",
        display_name="vLLM",
        kind="vllm",
        base_url="http://localhost:8000/v1",
        api_key_env=None,
        local=True,
    ),
    Preset(
        name="ollama",
        display_name="Ollama",
        kind="ollama",
        base_url="http://localhost:11434/v1",
        api_key_env=None,
        local=True,
    ),
    Preset(
        name="llama.cpp",
        display_name="llama.cpp server",
        kind="llama.cpp",
        base_url="http://localhost:8080/v1",
        api_key_env=None,
        local=True,
    ),
    Preset(
        name="lmstudio",
        display_name="LM Studio",
        kind="lmstudio",
        base_url="http://localhost:1234/v1",
        api_key_env=None,
        local=True,
    ),
)

#: Every preset by name, in the order ``llmrt providers`` detects their keys.
PRESETS: Mapping[str, Preset] = {preset.name: preset for preset in _PRESETS}

#: Other names a preset answers to: the zero-config route of the DeepSeek
#: preset is ``deepseek``, so ``preset = "deepseek"`` means the same preset.
PRESET_ALIASES: Mapping[str, str] = {"deepseek": "deepseek-official"}


def find_preset(name: str) -> Preset | None:
    """The preset called `name` (or one of its `PRESET_ALIASES`), or None."""
    return PRESETS.get(PRESET_ALIASES.get(name, name))


def unknown_preset(name: str) -> str:
    """Why ``name`` is no preset: the known names, the closest one; never a key-like value."""
    known = ", ".join(PRESETS)
    if looks_like_secret(name):
        # A pasted key in the wrong place: say so without repeating it.
        return f"the preset looks like an API key, not a preset name (not shown); known: {known}"
    close = difflib.get_close_matches(name, [*PRESETS, *PRESET_ALIASES], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown preset {name!r}{hint}; known: {known}"


# ---- settings namespaces (model discovery) -------------------------------------------------

#: The model lists discovery reads: ``openai`` is ``GET {base_url}/models``,
#: ``ollama`` is Ollama's native ``GET {server}/api/tags``.
DISCOVERY_APIS: Final = ("openai", "ollama")
#: The settings namespace of every OpenAI-compatible route but Ollama's.
OPENAI_COMPATIBLE_NS: Final = "openai-compatible"
#: The settings namespace of Ollama routes (discovered through ``/api/tags``).
OLLAMA_NS: Final = "ollama"


def settings_ns_of(preset: str | None) -> str:
    """The built-in settings namespace of a route of ``preset``."""
    found = find_preset(preset or "openai-compatible")
    return OLLAMA_NS if found is not None and found.kind == "ollama" else OPENAI_COMPATIBLE_NS


def discovery_api_of(settings_ns: str) -> str:
    """The list a built-in namespace reads (``openai`` for any namespace but ``ollama``)."""
    return "ollama" if settings_ns == OLLAMA_NS else "openai"
