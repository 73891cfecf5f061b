"""A misspelt key, adapter or namespace in ``llmrt.toml`` gets the closest name (issue 22, 3)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from llmrt.actors.app.config import CONFIG_INVALID, ConfigError, load_config
from llmrt.actors.app.config._suggest import closest

CASES = {
    "adapter": (
        '[[provider]]\nroute = "a"\nadapter = "openai_chta"\n',
        3,
        "unknown adapter 'openai_chta' (did you mean 'openai_chat'?)",
    ),
    "provider-key": (
        '[[provider]]\nroute = "a"\nadapter = "openai_chat"\nbase_ulr = "http://h"\n',
        4,
        "unknown field `base_ulr` (did you mean `base_url`?)",
    ),
    "adapter-own-key": (
        '[[provider]]\nroute = "a"\nadapter = "demo"\ntokens_per_secnd = 5\n',
        4,
        "(did you mean `tokens_per_second`?)",
    ),
    "defaults-key": (
        "[defaults]\nstream_idle_timout = 3\n",
        2,
        "unknown field `stream_idle_timout` (did you mean `stream_idle_timeout`?)",
    ),
    "top-level-table": ("[gatway]\nidle_timeout = 3\n", 1, "(did you mean `gateway`?)"),
    "gateway-key": ("[gateway]\nidle_timout = 3\n", 2, "(did you mean `idle_timeout`?)"),
    "retry-key": (
        '[[provider]]\nroute = "a"\nadapter = "openai_chat"\n[provider.retry]\nmax_retrys = 2\n',
        5,
        "(did you mean `max_retries`?)",
    ),
    "model-key": (
        '[[provider]]\nroute = "a"\nadapter = "openai_chat"\n'
        'models = [{ id = "m", context_windw = 3 }]\n',
        4,
        "(did you mean `context_window`?)",
    ),
    "settings-key": ('[settings.home]\nbase_urll = "http://h"\n', 2, "(did you mean `base_url`?)"),
    "namespace": (
        '[[provider]]\nroute = "a"\nadapter = "openai_chat"\nbase_url = "http://h"\n'
        'settings_ns = "olama"\n',
        5,
        "unknown settings namespace 'olama' (did you mean 'ollama'?)",
    ),
    "preset": (
        '[[provider]]\nroute = "a"\nadapter = "openai_chat"\npreset = "deepsek"\n',
        4,
        "unknown preset 'deepsek' (did you mean 'deepseek'?)",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_misspelt_name_gets_the_closest_one(tmp_path: Path, case: str) -> None:
    text, line, expected = CASES[case]
    path = tmp_path / "llmrt.toml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    err = info.value
    assert err.code == CONFIG_INVALID
    assert err.line == line, str(err)
    assert expected in err.reason, str(err)


def test_nothing_close_means_no_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text('[[provider]]\nroute = "a"\nadapter = "openai_chat"\nzzzzzz = 1\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert "did you mean" not in str(info.value)
    assert closest("qqqq", ["base_url", "preset"]) is None
    # A secret-looking name is never matched (a hint would echo it back).
    assert closest("gsk_Xy7Qp2Lm9Rt4Vb8Nc3Kd6Fh1", ["gsk_Xy7Qp2Lm9Rt4Vb8Nc3Kd6Fh2"]) is None
