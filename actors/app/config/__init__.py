"""``llmrt.toml``: provider routes from a config file, plus zero-config detection.

`load_config` reads and validates the file, adds a route for each
well-known API-key variable that is set and not already used by the file,
and always adds the built-in ``demo`` route unless the file declares one.
Adapters are the installed ``llmrt.adapters`` entry points
(`llmrt.actors.app.plugins`): each ``[[provider]]`` entry is decoded
straight into its adapter's config Struct, and the key variables, presets,
zero-config routes and settings namespaces are the plugins' declarations.
`register_config` registers the routes into a runtime, in `Config.routes`
order: file entries (file order), then detected environment routes
(``deepseek``, ``openai``, ``openai-responses``, ``anthropic``, ``gemini``,
then the other hosted presets with a key variable: ``openrouter``,
``groq``, ...), then ``demo`` last, so a real provider comes
first when there is one. Local servers (``vllm``, ``ollama``, ...) have no
key: they are routes only when the file declares them.

Settings namespaces (``[settings.NAME]`` tables, plus the built-in ones a
plugin owns: ``openai-compatible`` and ``ollama`` of ``openai_chat``) group
routes for model discovery; `register_settings` declares every such route as a
configurable provider and offers one discovery per namespace.

Every problem is one `ConfigError` naming the file, the line and the reason.
API keys never live in the file (an ``api_key`` key is refused) and their
values are never read beyond "set and non-empty", logged or echoed.

The modules: what the text means is pure (`validate_config` in `_validate`,
with the schema `_schema`, the secret refusals `_secrets`, the suggestions
`_suggest`, the values `_types`, the CLI's lines `_describe`); the effects
are apart: `_load` reads the file, `_register` builds the adapters and
registers them into a runtime (``tests/test_config_purity.py`` keeps it so).
"""

from ._describe import describe as describe
from ._load import load_config as load_config
from ._register import build_adapter as build_adapter
from ._register import register_config as register_config
from ._register import register_settings as register_settings
from ._types import CONFIG_ENV_VAR as CONFIG_ENV_VAR
from ._types import CONFIG_INVALID as CONFIG_INVALID
from ._types import DEFAULT_CONFIG_FILE as DEFAULT_CONFIG_FILE
from ._types import Config as Config
from ._types import ConfigError as ConfigError
from ._types import NamespaceSpec as NamespaceSpec
from ._types import RouteSpec as RouteSpec
from ._validate import validate_config as validate_config

__all__ = [
    "ConfigError",
    "Config",
    "RouteSpec",
    "NamespaceSpec",
    "DEFAULT_CONFIG_FILE",
    "CONFIG_ENV_VAR",
    "CONFIG_INVALID",
    "load_config",
    "validate_config",
    "build_adapter",
    "register_config",
    "register_settings",
    "describe",
]
