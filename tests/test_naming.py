"""One provider, two names: the DeepSeek route ``deepseek`` and its preset ``deepseek-official``."""

from __future__ import annotations

from pathlib import Path

from llmrt.actors.app._setup import route_of
from llmrt.actors.app.config import load_config
from llmrt.adapters.openai_chat import OpenAIChatAdapter, find_preset

KEY = {"DEEPSEEK_API_KEY": "sk-test"}


def test_the_route_name_is_accepted_as_a_preset_name(tmp_path: Path) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text('[[provider]]\nroute = "ds"\nadapter = "openai_chat"\npreset = "deepseek"\n')
    config = load_config(path, environ=KEY)
    spec = config.route("ds")
    assert spec is not None
    assert spec.api_key_env == "DEEPSEEK_API_KEY"
    assert find_preset("deepseek") is find_preset("deepseek-official")
    adapter = OpenAIChatAdapter(preset="deepseek", environ=KEY)
    assert adapter.base_url == "https://api.deepseek.com"


def test_the_preset_name_reaches_its_zero_config_route() -> None:
    config = load_config(None, environ=KEY)
    assert config.route("deepseek") is not None
    assert config.route("deepseek-official") is None
    # `llmrt call -p deepseek-official` used to end NO_ADAPTER.
    assert route_of(config, "deepseek-official") == "deepseek"
    assert route_of(config, "deepseek") == "deepseek"
    assert route_of(config, "demo") == "demo"
    assert route_of(config, "nonexistent") == "nonexistent"  # left for NO_ADAPTER to say
