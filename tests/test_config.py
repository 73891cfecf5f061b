"""``llmrt.toml`` loading, validation errors with file and line, env detection, registration."""

from __future__ import annotations

import textwrap
import tomllib
from pathlib import Path

import pytest
import trio
from conftest import collect, finish_reason, make_options

import llmrt
from llmrt import (
    AlwaysRetryPolicy,
    ErrorCode,
    FinishError,
    FinishStop,
    LlmError,
    NormalRetryPolicy,
    TextDelta,
)
from llmrt.actors.app.config import (
    CONFIG_INVALID,
    Config,
    ConfigError,
    RouteSpec,
    build_adapter,
    describe,
    load_config,
    register_config,
)
from llmrt.actors.app.config._schema import format_path, locate_lines, parse_path
from llmrt.adapters.anthropic import AnthropicAdapter
from llmrt.adapters.demo import BUILTIN_DEMO_TOKENS_PER_SECOND, DEMO_PACE_ENV, DemoAdapter
from llmrt.adapters.openai_chat import ModelSpec, OpenAIChatAdapter

FULL = """\
# llmrt providers
[defaults]
stream_idle_timeout = 300      # seconds

[[provider]]
route = "deepseek"
adapter = "openai_chat"
preset = "deepseek-official"
base_url = "https://api.deepseek.com"
api_key_env = "DEEPSEEK_API_KEY"
display_name = "DeepSeek"
stream_idle_timeout = 120
models = [ { id = "deepseek-chat", context_window = 1048565, default_max_tokens = 4096, image_input = false, efforts = ["none"] } ]
[provider.retry]
mode = "normal"
max_retries = 3
initial_delay_ms = 1000
max_delay_ms = 30000
jitter_ratio = 0.2
retryable_codes = ["RATE_LIMIT", "OVERLOADED"]

[[provider]]
routes = ["local", "ollama"]
adapter = "openai_chat"
preset = "openai-compatible"
base_url = "http://127.0.0.1:11434/v1"

[[provider]]
route = "claude"
adapter = "anthropic"
default_max_tokens = 8192
retry = { mode = "always", initial_delay_ms = 500 }

[[provider]]
route = "slow-demo"
adapter = "demo"
tokens_per_second = 20
"""  # noqa: E501  (the models line is the documented example, kept on one line)

#: A stand-in key value: it must never show up in a message, repr or description.
SECRET = "sk-test-0123456789abcdef"


def write(tmp_path: Path, text: str, name: str = "llmrt.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# ---- a valid file ------------------------------------------------------------------------------


def test_full_file_round_trips_into_route_specs(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), environ={})
    assert [spec.providers for spec in config.routes] == [
        ("deepseek",),
        ("local", "ollama"),
        ("claude",),
        ("slow-demo",),
        ("demo",),
    ]
    deepseek, local, claude, slow, demo = config.routes
    assert deepseek == RouteSpec(
        route="deepseek",
        adapter="openai_chat",
        source="config file line 5",
        preset="deepseek-official",
        base_url="https://api.deepseek.com",
        api_key_env="DEEPSEEK_API_KEY",
        display_name="DeepSeek",
        stream_idle_timeout=120.0,
        models=(
            ModelSpec(
                id="deepseek-chat",
                context_window=1_048_565,
                default_max_tokens=4_096,
                image_input=False,
                efforts=("none",),
            ),
        ),
        retry=NormalRetryPolicy(
            max_retries=3,
            initial_delay_ms=1000,
            max_delay_ms=30000,
            jitter_ratio=0.2,
            retryable_codes=("RATE_LIMIT", "OVERLOADED"),
        ),
    )
    assert local.source == "config file line 22"
    assert local.api_key_env is None  # openai-compatible: no key unless one is named
    assert local.stream_idle_timeout == 300.0  # from [defaults]
    assert claude.api_key_env == "ANTHROPIC_API_KEY"  # the adapter's default
    assert claude.retry == AlwaysRetryPolicy(initial_delay_ms=500)
    assert claude.default_max_tokens == 8192
    assert slow.tokens_per_second == 20
    assert demo.source == "built-in"
    assert demo.stream_idle_timeout == 300.0
    assert config.file == str(tmp_path / "llmrt.toml")
    assert config.route("ollama") is local
    assert config.route("nope") is None


def test_build_adapter_makes_the_configured_adapter(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), environ={})
    deepseek, local, claude, slow, demo = (build_adapter(spec) for spec in config.routes)
    assert isinstance(deepseek, OpenAIChatAdapter)
    assert deepseek.preset == "deepseek-official"
    assert deepseek.display_name == "DeepSeek"
    assert isinstance(local, OpenAIChatAdapter)
    assert local.base_url == "http://127.0.0.1:11434/v1"
    assert isinstance(claude, AnthropicAdapter)
    assert claude.default_max_tokens == 8192
    assert isinstance(slow, DemoAdapter)
    assert slow.tokens_per_second == 20
    assert isinstance(demo, DemoAdapter)
    assert demo.tokens_per_second == BUILTIN_DEMO_TOKENS_PER_SECOND


@pytest.mark.parametrize(("value", "pace"), [("250", 250.0), ("0", None), ("", 60.0)])
def test_the_pace_variable_sets_the_built_in_demo_route_only(
    tmp_path: Path, value: str, pace: float | None
) -> None:
    config = load_config(write(tmp_path, FULL), environ={DEMO_PACE_ENV: value})
    *_, slow, demo = (build_adapter(spec) for spec in config.routes)
    assert isinstance(slow, DemoAdapter) and isinstance(demo, DemoAdapter)
    assert slow.tokens_per_second == 20  # a route of the file keeps its own pace
    assert demo.tokens_per_second == pace  # "": as if unset, the built-in 60
    assert config.routes[-1].source == "built-in"


@pytest.mark.parametrize("value", ["fast", "-1", "inf", "nan"])
def test_a_bad_pace_variable_is_refused_naming_it(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, ""), environ={DEMO_PACE_ENV: value})
    assert err.value.code == CONFIG_INVALID
    assert f"environment {DEMO_PACE_ENV}: must be a number of tokens per second" in str(err.value)
    assert repr(value) in str(err.value)


async def test_full_file_registers_into_a_runtime(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), environ={})
    async with llmrt.open_runtime() as rt:
        handles = await register_config(rt, config)
        assert len(handles) == 5
        assert [p.id for p in rt.list_providers()] == [
            "deepseek",
            "local",
            "ollama",
            "claude",
            "slow-demo",
            "demo",
        ]
        assert rt.list_providers()[0].name == "DeepSeek"
        assert rt.provider_retry_policy("deepseek") == config.routes[0].retry
        assert rt.provider_retry_policy("claude") == AlwaysRetryPolicy(initial_delay_ms=500)
        assert rt.provider_retry_policy("ollama") == NormalRetryPolicy()
        model = await rt.resolve_model_info("deepseek", "deepseek-chat")
        assert model.context is not None and model.context.context_window == 1_048_565


async def test_call_through_the_registered_demo_route_finishes(tmp_path: Path) -> None:
    config = load_config(None, environ={"LLMRT_CONFIG": str(write(tmp_path, FULL))})
    async with llmrt.open_runtime() as rt:
        await register_config(rt, config)
        chunks = await collect(rt.stream(make_options("demo", "demo-1", prompt="hello there")))
        assert isinstance(finish_reason(chunks), FinishStop)
        text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
        assert 'You said: "hello there"' in text


async def test_routes_are_registered_with_their_idle_timeout(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # One token every 10 s against a 1 s idle timeout: the watchdog ends the call.
    path = write(
        tmp_path,
        """\
        [[provider]]
        route = "sluggish"
        adapter = "demo"
        tokens_per_second = 0.1
        stream_idle_timeout = 1
        """,
    )
    config = load_config(path, environ={})
    async with llmrt.open_runtime() as rt:
        await register_config(rt, config)
        reason = finish_reason(await collect(rt.stream(make_options("sluggish", "demo-1"))))
        assert isinstance(reason, FinishError)
        assert reason.failure.code == ErrorCode.TIMEOUT
        assert "1 s" in reason.failure.message


async def test_adapters_read_keys_from_the_given_environ(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), environ={})
    async with llmrt.open_runtime() as rt:
        await register_config(rt, config, environ={})
        # The key is checked before any I/O: no network is touched.
        reason = finish_reason(await collect(rt.stream(make_options("deepseek", "deepseek-chat"))))
        assert isinstance(reason, FinishError)
        assert reason.failure.code == ErrorCode.MISSING_CREDENTIAL


async def test_register_config_is_all_or_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./llmrt.toml
    config = load_config(None, environ={"DEEPSEEK_API_KEY": SECRET, "LLMRT_CONFIG": ""})
    assert [spec.route for spec in config.routes] == ["deepseek", "demo"]
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["demo"], DemoAdapter())
        with pytest.raises(LlmError) as caught:
            await register_config(rt, config)
        assert caught.value.code == ErrorCode.DUPLICATE_ADAPTER
        # The deepseek route registered before the failure was taken back.
        assert [p.id for p in rt.list_providers()] == ["demo"]


# ---- bad files: one ConfigError with file, line and reason ---------------------------------


BAD_CASES = {
    "typo-key": (
        """\
        [[provider]]
        route = "deepseek"
        adapter = "openai_chat"
        base_ulr = "https://example.com"
        """,
        4,
        ["unknown field `base_ulr`", "$.provider[0]"],
    ),
    "wrong-type": (
        """\
        [[provider]]
        route = "x"
        adapter = "demo"

        [[provider]]
        route = "y"
        adapter = "demo"
        stream_idle_timeout = "fast"
        """,
        8,
        ["Expected `float | null`, got `str`", "$.provider[1].stream_idle_timeout"],
    ),
    "unknown-adapter": (
        """\
        [[provider]]
        route = "a"
        adapter = "demo"

        [[provider]]
        route = "b"
        adapter = "openai_chta"
        """,
        7,
        ["unknown adapter 'openai_chta'", "$.provider[1].adapter", "openai_chat"],
    ),
    "unknown-preset": (
        """\
        [[provider]]
        route = "ds"
        adapter = "openai_chat"
        preset = "deepsek"
        """,
        4,
        ["unknown preset 'deepsek'", "deepseek-official", "$.provider[0].preset"],
    ),
    "duplicate-route": (
        """\
        [[provider]]
        route = "local"
        adapter = "demo"

        [[provider]]
        routes = ["other", "local"]
        adapter = "demo"
        """,
        6,
        ["duplicate route 'local'", "provider[0]", "$.provider[1].routes[1]"],
    ),
    "bad-route-name": (
        """\
        [[provider]]
        adapter = "demo"
        route = "deep seek"
        """,
        3,
        ["invalid provider route name 'deep seek'", "$.provider[0].route"],
    ),
    "missing-route": (
        """\
        [defaults]

        [[provider]]
        adapter = "demo"
        """,
        3,
        ["needs `route", "$.provider[0]"],
    ),
    "missing-adapter": (
        """\
        [[provider]]
        route = "x"
        """,
        1,
        ["missing required field `adapter`", "$.provider[0]"],
    ),
    "retry-max-delay-below-initial": (
        """\
        [[provider]]
        route = "ds"
        adapter = "openai_chat"
        preset = "deepseek-official"
        [provider.retry]
        initial_delay_ms = 5000
        max_delay_ms = 100
        """,
        7,
        ["max_delay_ms must be finite and >= initial_delay_ms", "$.provider[0].retry.max_delay_ms"],
    ),
    "retry-negative-retries": (
        """\
        [[provider]]
        route = "ds"
        adapter = "openai_chat"
        preset = "deepseek-official"

        [provider.retry]
        mode = "normal"
        max_retries = -1
        """,
        8,
        ["max_retries must be >= 0", "$.provider[0].retry.max_retries"],
    ),
    "retry-jitter-out-of-range": (
        """\
        [[provider]]
        route = "ds"
        adapter = "openai_chat"
        preset = "openai"
        retry = { jitter_ratio = 2 }
        """,
        5,
        ["jitter_ratio must be within [0, 1]", "$.provider[0].retry.jitter_ratio"],
    ),
    "retry-unknown-mode": (
        """\
        [[provider]]
        route = "ds"
        adapter = "anthropic"
        [provider.retry]
        mode = "sometimes"
        """,
        5,
        ["unknown retry mode 'sometimes'", "$.provider[0].retry.mode"],
    ),
    "retry-max-with-always": (
        """\
        [[provider]]
        route = "ds"
        adapter = "anthropic"
        [provider.retry]
        mode = "always"
        max_retries = 2
        """,
        6,
        ['max_retries applies only to mode = "normal"'],
    ),
    "retry-codes-with-always": (
        """\
        [[provider]]
        route = "ds"
        adapter = "anthropic"
        [provider.retry]
        mode = "always"
        retryable_codes = ["RATE_LIMIT"]
        """,
        6,
        [
            'retryable_codes applies only to mode = "normal"',
            "$.provider[0].retry.retryable_codes",
        ],
    ),
    "retry-unknown-code": (
        """\
        [[provider]]
        route = "ds"
        adapter = "anthropic"
        [provider.retry]
        retryable_codes = [
          "RATE_LIMIT",
          "RATE_LIMTI",
        ]
        """,
        7,
        ["unknown error code 'RATE_LIMTI'", "$.provider[0].retry.retryable_codes[1]"],
    ),
    "idle-zero": (
        """\
        [[provider]]
        route = "x"
        adapter = "demo"
        stream_idle_timeout = 0
        """,
        4,
        ["stream_idle_timeout must be a positive", "$.provider[0].stream_idle_timeout"],
    ),
    "defaults-idle-negative": (
        """\
        [defaults]
        stream_idle_timeout = -5
        """,
        2,
        ["stream_idle_timeout must be a positive", "$.defaults.stream_idle_timeout"],
    ),
    "key-for-another-adapter": (
        """\
        [[provider]]
        route = "claude"
        adapter = "anthropic"
        preset = "openai"
        """,
        4,
        ["`preset` does not apply to adapter 'anthropic'", "openai_chat"],
    ),
    "compatible-without-base-url": (
        """\
        [[provider]]
        route = "local"
        adapter = "openai_chat"
        """,
        1,
        ["preset 'openai-compatible' needs `base_url`"],
    ),
    "base-url-scheme": (
        """\
        [[provider]]
        route = "local"
        adapter = "openai_chat"
        base_url = "ftp://example.com"
        """,
        4,
        ["base_url must start with http:// or https://"],
    ),
    "provider-as-plain-table": (
        """\
        [provider]
        route = "x"
        adapter = "demo"
        """,
        1,
        ["Expected `array`, got `table`", "$.provider"],
    ),
    "models-array-of-tables": (
        """\
        [[provider]]
        route = "local"
        adapter = "openai_chat"
        base_url = "http://127.0.0.1:8000/v1"

        [[provider.models]]
        id = "a"

        [[provider.models]]
        id = "b"
        context_window = 0
        """,
        11,
        ["Expected `int` >= 1", "$.provider[0].models[1].context_window"],
    ),
    "model-listed-twice": (
        """\
        [[provider]]
        route = "local"
        adapter = "openai_chat"
        base_url = "http://127.0.0.1:8000/v1"
        models = [
          { id = "a" },
          { id = "a", name = "again" },
        ]
        """,
        7,
        ["model 'a' is listed twice", "$.provider[0].models[1].id"],
    ),
    "unknown-top-level-table": (
        """\
        [defaults]
        stream_idle_timeout = 10

        [server]
        port = 8080
        """,
        4,
        ["unknown field `server`"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_config_names_file_line_and_reason(tmp_path: Path, case: str) -> None:
    text, line, reasons = BAD_CASES[case]
    path = write(tmp_path, text, name=f"{case}.toml")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    err = caught.value
    assert isinstance(err, ValueError)
    assert err.file == str(path)
    assert err.line == line, str(err)
    assert str(err).startswith(f"{path}:{line}: "), str(err)
    for reason in reasons:
        assert reason in err.reason, str(err)


@pytest.mark.parametrize("key", ["api_key", "apiKey"])
def test_api_key_in_the_file_is_refused_without_echoing_it(tmp_path: Path, key: str) -> None:
    path = write(
        tmp_path,
        f"""\
        [[provider]]
        route = "deepseek"
        adapter = "openai_chat"
        preset = "deepseek-official"
        {key} = "{SECRET}"
        """,
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    err = caught.value
    assert err.line == 5
    assert f"`{key}` is refused" in str(err)
    assert "environment variable" in str(err) and "api_key_env" in str(err)
    assert SECRET not in str(err) and SECRET not in repr(err)
    assert caught.value.__cause__ is None and caught.value.__context__ is None


def test_a_key_pasted_into_api_key_env_is_refused_without_echoing_it(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""\
        [[provider]]
        route = "deepseek"
        adapter = "openai_chat"
        preset = "deepseek-official"
        api_key_env = "{SECRET}"
        """,
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.line == 5
    assert "NAME of an environment variable" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_toml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        [[provider]]
        route = "x"
        adapter = demo
        """,
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    err = caught.value
    assert (err.file, err.line, err.column) == (str(path), 3, 11)
    assert str(err).startswith(f"{path}:3:11: TOML syntax error: ")
    assert "(at line" not in str(err)  # said once, in the prefix


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_bytes(b"[defaults]\n# caf\xe9\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.line == 2
    assert "UTF-8" in str(caught.value)


# ---- which file ---------------------------------------------------------------------------------


def test_a_missing_file_named_explicitly_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as caught:
        load_config(missing, environ={})
    assert caught.value.file == str(missing)
    assert caught.value.line is None
    assert "no such config file" in str(caught.value)
    with pytest.raises(ConfigError):
        load_config(None, environ={"LLMRT_CONFIG": str(missing)})


def test_no_file_at_all_is_fine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(environ={})
    assert config.file is None
    assert [(s.route, s.adapter, s.source) for s in config.routes] == [("demo", "demo", "built-in")]


def test_default_file_and_env_var_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, '[[provider]]\nroute = "here"\nadapter = "demo"\n')
    assert load_config(environ={}).routes[0].route == "here"
    other = write(tmp_path, '[[provider]]\nroute = "there"\nadapter = "demo"\n', "other.toml")
    assert load_config(environ={"LLMRT_CONFIG": str(other)}).routes[0].route == "there"
    # An explicit path wins over the variable.
    named = load_config("llmrt.toml", environ={"LLMRT_CONFIG": str(other)})
    assert named.routes[0].route == "here"
    assert named.file == "llmrt.toml"


# ---- zero-config detection -------------------------------------------------------------------


def test_env_detection_adds_routes_for_set_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    environ = {"DEEPSEEK_API_KEY": SECRET, "OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": SECRET}
    config = load_config(environ=environ)
    assert [(s.route, s.adapter, s.preset, s.api_key_env, s.source) for s in config.routes] == [
        ("deepseek", "openai_chat", "deepseek-official", "DEEPSEEK_API_KEY",
         "environment DEEPSEEK_API_KEY"),
        ("anthropic", "anthropic", None, "ANTHROPIC_API_KEY", "environment ANTHROPIC_API_KEY"),
        ("demo", "demo", None, None, "built-in"),
    ]  # fmt: skip
    assert config.keys_set == {"DEEPSEEK_API_KEY", "ANTHROPIC_API_KEY"}
    lines = describe(config)
    assert lines[0].split() == [
        "deepseek",
        "openai_chat/deepseek-official",
        "key:",
        "$DEEPSEEK_API_KEY",
        "(set)",
        "[environment",
        "DEEPSEEK_API_KEY]",
    ]
    assert lines[2].startswith("demo ")
    assert "key: none" in lines[2]
    for text in (*lines, repr(config), str(config)):
        assert SECRET not in text


def test_env_detection_skips_variables_the_file_already_uses(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        [[provider]]
        route = "ds"
        adapter = "openai_chat"
        preset = "deepseek-official"    # its default key variable is DEEPSEEK_API_KEY

        [[provider]]
        route = "gpt"
        adapter = "openai_chat"
        preset = "openai-compatible"
        base_url = "https://proxy.example/v1"
        api_key_env = "OPENAI_API_KEY"
        """,
    )
    environ = {"DEEPSEEK_API_KEY": SECRET, "OPENAI_API_KEY": SECRET, "ANTHROPIC_API_KEY": ""}
    config = load_config(path, environ=environ)
    assert [s.route for s in config.routes] == ["ds", "gpt", "demo"]
    lines = describe(config)
    assert "key: $DEEPSEEK_API_KEY (set)" in lines[0]
    assert "[config file line 1]" in lines[0]


def test_env_detection_never_takes_a_route_name_the_file_uses(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        [[provider]]
        route = "openai"
        adapter = "openai_chat"
        base_url = "http://127.0.0.1:9000/v1"
        api_key_env = "MY_PROXY_KEY"
        """,
    )
    config = load_config(path, environ={"OPENAI_API_KEY": SECRET})
    assert [(s.route, s.api_key_env) for s in config.routes] == [
        ("openai", "MY_PROXY_KEY"),
        ("demo", None),
    ]
    assert "key: $MY_PROXY_KEY (NOT SET)" in describe(config)[0]


# ---- the demo route --------------------------------------------------------------------------


def test_a_demo_route_in_the_file_replaces_the_built_in_one(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        [[provider]]
        route = "demo"
        adapter = "demo"
        tokens_per_second = 50
        """,
    )
    config = load_config(path, environ={})
    assert [(s.route, s.source, s.tokens_per_second) for s in config.routes] == [
        ("demo", "config file line 1", 50)
    ]


def test_a_file_may_name_another_adapter_demo(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        [[provider]]
        routes = ["local", "demo"]
        adapter = "openai_chat"
        base_url = "http://127.0.0.1:9000/v1"
        """,
    )
    config = load_config(path, environ={})
    assert [s.providers for s in config.routes] == [("local", "demo")]
    assert isinstance(build_adapter(config.routes[0]), OpenAIChatAdapter)


def test_demo_is_present_with_any_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for environ in ({}, {"OPENAI_API_KEY": SECRET}, {"LLMRT_CONFIG": ""}):
        config = load_config(None, environ=environ)
        assert config.routes[-1].route == "demo"
        assert isinstance(config, Config)


# ---- the locator ------------------------------------------------------------------------------


def test_locator_finds_keys_past_strings_comments_and_dotted_keys() -> None:
    text = textwrap.dedent(
        '''\
        title = """
        route = "not a key"
        [[provider]] also not a header
        """  # comment with [brackets]
        'quoted key' = 'it"s'
        [[provider]]
        "route" = "a"   # [not a header]
        extra.mode = "always"
        models = [
          "x, y", # the comma is inside the string
          { id = "b", name = "}" },
        ]
        [provider.retry]
        max_retries = 1
        [[provider]]
        route = 'c'
        '''
    )
    tomllib.loads(text)  # the locator only ever sees valid TOML
    lines = locate_lines(text)
    assert lines[("title",)] == 1
    assert ("route",) not in lines
    assert lines[("quoted key",)] == 5
    assert lines[("provider", 0)] == 6
    assert lines[("provider", 0, "route")] == 7
    assert lines[("provider", 0, "extra")] == 8
    assert lines[("provider", 0, "extra", "mode")] == 8
    assert lines[("provider", 0, "retry")] == 13
    assert lines[("provider", 0, "models", 1)] == 11
    assert lines[("provider", 0, "models", 1, "name")] == 11
    assert lines[("provider", 0, "retry", "max_retries")] == 14
    assert lines[("provider", 1)] == 15
    assert lines[("provider", 1, "route")] == 16


def test_paths_format_and_parse_like_msgspec() -> None:
    path = ("provider", 1, "models", 0, "id")
    assert format_path(path) == "$.provider[1].models[0].id"
    assert parse_path(format_path(path)) == path


def test_the_documented_example_loads(tmp_path: Path) -> None:
    doc = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text("utf-8")
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    config = load_config(write(tmp_path, example), environ={})
    assert [s.route for s in config.routes] == ["deepseek", "local", "claude", "slow-demo", "demo"]
    assert config.routes[1].models[0].id == "qwen3:8b"
