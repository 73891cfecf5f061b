"""Discovery wired through: ``llmrt.toml`` settings namespaces, ``llmrt models``, the gateway.

Every endpoint is a real loopback upstream (`llmrt.testing.open_upstream`);
the CLI runs in a worker thread (its own ``trio.run``) while the upstream
and the gateway run in the test's.
"""

from __future__ import annotations

import io
import json
import pathlib
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio
from test_discovery import KEY, OLLAMA_TAGS, closed_port, ollama_router

import llmrt
from llmrt import ErrorCode
from llmrt.actors.app.cli import main
from llmrt.actors.app.config import (
    Config,
    ConfigError,
    load_config,
    register_config,
    register_settings,
)
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway._protocol import JSON, ClientFrame, DiscoverModelsFrame
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapter import ConfigurableProvider, DiscoveredModel, ModelDiscoveryRequest
from llmrt.adapters._presets import PRESETS
from llmrt.testing import ErrorScript, SSEScript, open_upstream


def write(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "llmrt.toml"
    path.write_text(textwrap.dedent(text))
    return path


def ollama_file(tmp_path: pathlib.Path, base_url: str) -> pathlib.Path:
    return write(
        tmp_path,
        f"""\
        [settings.home]
        discovery = "ollama"

        [[provider]]
        route = "home-llama"
        adapter = "openai_chat"
        preset = "ollama"
        base_url = "{base_url}/v1"
        settings_ns = "home"

        [[provider]]
        route = "proxy"
        adapter = "openai_chat"
        base_url = "{base_url}/v1"
        api_key_env = "PROXY_KEY"
        """,
    )


async def run_cli(*argv: str, environ: dict[str, str] | None = None) -> tuple[int, str]:
    """``llmrt ARGV`` in a worker thread (the CLI runs its own trio loop)."""
    out = io.StringIO()
    env = environ if environ is not None else {}
    code = await trio.to_thread.run_sync(partial(main, list(argv), out=out, environ=env))
    return code, out.getvalue()


# ---- llmrt.toml ------------------------------------------------------------------------------


async def test_settings_namespaces_declare_providers_and_discovery(
    tmp_path: pathlib.Path,
) -> None:
    async with open_upstream(ollama_router, models=("proxied-a", "proxied-b")) as up:
        env = {"PROXY_KEY": KEY}
        config = load_config(ollama_file(tmp_path, up.base_url), environ=env)
        assert [(s.name, s.discovery) for s in config.settings] == [
            ("openai-compatible", "openai"),
            ("ollama", "ollama"),
            ("home", "ollama"),
        ]
        assert config.settings[2].source == "config file line 1"
        async with llmrt.open_runtime() as rt:
            await register_config(rt, config, environ=env)
            await register_settings(rt, config, environ=env)
            directory = rt.list_configurable_providers()
            assert directory[:2] == (
                ConfigurableProvider(
                    provider="home-llama",
                    display_name="Ollama",
                    settings_ns="home",
                    settings_path=("provider", "0"),
                    declared=False,
                ),
                ConfigurableProvider(
                    provider="proxy",
                    display_name="OpenAI-compatible server",
                    settings_ns="openai-compatible",
                    settings_path=("provider", "1"),
                    declared=True,
                ),
            )
            # Hosted presets without a key are offered, dormant.
            dormant = {e.provider: e for e in directory[2:]}
            assert set(dormant) == {p.route for p in PRESETS.values() if p.route}
            assert dormant["groq"].settings_path == () and dormant["groq"].declared is False
            assert "groq" not in {p.id for p in rt.list_providers()}

            home = await rt.discover_models("home", ModelDiscoveryRequest(provider="home-llama"))
            proxied = await rt.discover_models(
                "openai-compatible", ModelDiscoveryRequest(provider="proxy")
            )
    assert [m.id for m in home] == [m["model"] for m in OLLAMA_TAGS["models"][:2]] + [
        "old-server-only-name"
    ]
    assert proxied == (DiscoveredModel(id="proxied-a"), DiscoveredModel(id="proxied-b"))
    assert [r.path for r in up.requests] == ["/api/tags", "/v1/models"]
    assert up.requests[1].headers["authorization"] == f"Bearer {KEY}"


async def test_a_namespace_default_endpoint_answers_requests_that_name_none(
    tmp_path: pathlib.Path,
) -> None:
    async with open_upstream(SSEScript(events=()), models=("lone",)) as up:
        path = write(
            tmp_path,
            f"""\
            [settings.lab]
            base_url = "{up.base_url}"
            api_key_env = "LAB_KEY"
            """,
        )
        config = load_config(path, environ={})
        async with llmrt.open_runtime() as rt:
            await register_settings(rt, config, environ={"LAB_KEY": KEY})
            found = await rt.discover_models("lab", ModelDiscoveryRequest())
    assert found == (DiscoveredModel(id="lone"),)
    assert up.requests[0].headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ('[settings.home]\ndiscovery = "grpc"\n', 2, "unknown discovery 'grpc'; use \"openai\""),
        ("[settings.home]\n\nbase_url = 5\n", 3, "got `int` - at `$.settings.home.base_url`"),
        ('[settings.home]\nbase_urll = "http://h"\n', 2, "unknown field `base_urll`"),
        ('[settings.home]\nbase_url = "ftp://h"\n', 2, "base_url must start with http://"),
        (
            '[settings.home]\nbase_url = "http://h"\napi_key_env = "sk-live abc"\n',
            3,
            "NAME of an environment variable",
        ),
        ('[settings.home]\napi_key_env = "K"\n', 2, "api_key_env needs a `base_url`"),
        ('[settings.home]\napi_key = "sk-1"\n', 2, "`api_key` is refused"),
        ('[settings."bad name"]\n', 1, "invalid settings namespace name"),
        (
            '[[provider]]\nroute = "x"\nadapter = "openai_chat"\nbase_url = "http://h"\n'
            'settings_ns = "nowhere"\n',
            5,
            "unknown settings namespace 'nowhere': declare it with [settings.nowhere]",
        ),
        (
            '[[provider]]\nroute = "x"\nadapter = "anthropic"\nsettings_ns = "ollama"\n',
            4,
            "`settings_ns` does not apply to adapter 'anthropic'",
        ),
    ],
)
def test_bad_settings_are_file_line_errors(
    tmp_path: pathlib.Path, text: str, line: int, needle: str
) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert info.value.line == line, str(info.value)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert needle in str(info.value)
    assert "sk-1" not in str(info.value) and "sk-live" not in str(info.value)


def test_routes_default_to_their_presets_namespace(tmp_path: pathlib.Path) -> None:
    path = write(
        tmp_path,
        """\
        [[provider]]
        route = "o"
        adapter = "openai_chat"
        preset = "ollama"

        [[provider]]
        route = "v"
        adapter = "openai_chat"
        preset = "vllm"
        """,
    )
    config = load_config(path, environ={"GROQ_API_KEY": "k"})
    assert [(s.route, s.namespace) for s in config.routes] == [
        ("o", "ollama"),
        ("v", "openai-compatible"),
        ("groq", "openai-compatible"),
        ("demo", None),
    ]


# ---- llmrt models ----------------------------------------------------------------------------


async def test_llmrt_models_prints_discovered_models_with_their_source(
    tmp_path: pathlib.Path,
) -> None:
    async with open_upstream(ollama_router, models=("proxied-a",)) as up:
        path = str(ollama_file(tmp_path, up.base_url))
        code, text = await run_cli("models", "home-llama", "--config", path)
        assert code == 0
        assert text.splitlines() == [
            "llama3.2:latest\tllama3.2:latest\tdiscovered:home",
            "qwen2.5-coder:7b\tqwen2.5-coder:7b\tdiscovered:home",
            "old-server-only-name\told-server-only-name\tdiscovered:home",
        ]
        code, text = await run_cli("models", "proxy", "--config", path, environ={"PROXY_KEY": KEY})
        assert code == 0
        assert text == "proxied-a\tproxied-a\tdiscovered:openai-compatible\n"
    # A route outside every namespace keeps its adapter's list.
    code, text = await run_cli("models", "demo")
    assert code == 0 and text.splitlines()[0] == "demo-1\tdemo-1\tadapter"


async def test_llmrt_models_falls_back_on_the_table_when_the_endpoint_is_unreachable(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    path = write(
        tmp_path,
        f"""\
        [[provider]]
        route = "fast"
        adapter = "openai_chat"
        preset = "groq"
        base_url = "http://127.0.0.1:{port}/openai/v1"
        models = [ {{ id = "my-fine-tune" }} ]
        """,
    )
    code, text = await run_cli(
        "models", "fast", "--config", str(path), environ={"GROQ_API_KEY": KEY}
    )
    assert code == 0
    expected = [f"{m.id}\t{m.name}\ttable" for m in PRESETS["groq"].models]
    assert text.splitlines() == [*expected, "my-fine-tune\tmy-fine-tune\ttable"]
    err = capsys.readouterr().err
    assert "the endpoint of 'fast' is unreachable" in err
    assert "showing the preset's table instead" in err
    assert f"127.0.0.1:{port}" in err and KEY not in err

    # An endpoint without a model list (404) falls back the same way.
    no_list = ErrorScript(status=404, body={"error": {"message": "Not Found"}})
    async with open_upstream(lambda request: no_list) as up:
        path.write_text(path.read_text().replace(f"http://127.0.0.1:{port}", up.base_url))
        code, text = await run_cli(
            "models", "fast", "--config", str(path), environ={"GROQ_API_KEY": KEY}
        )
    assert code == 0 and text.splitlines()[0] == expected[0]
    assert "has no model list (HTTP 404)" in capsys.readouterr().err


async def test_without_a_table_an_unreachable_endpoint_is_an_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        f"""\
        [[provider]]
        route = "local"
        adapter = "openai_chat"
        preset = "vllm"
        base_url = "http://127.0.0.1:{closed_port()}/v1"
        """,
    )
    code, text = await run_cli("models", "local", "--config", str(path))
    assert code == 1 and text == ""
    assert "NETWORK" in capsys.readouterr().err


# ---- the gateway -----------------------------------------------------------------------------


@asynccontextmanager
async def configured_gateway(
    config: Config, environ: dict[str, str], **limits: Any
) -> AsyncIterator[GatewayServer]:
    async with llmrt.open_runtime() as rt:
        await register_config(rt, config, environ=environ)
        await register_settings(rt, config, environ=environ)
        async with trio.open_nursery() as nursery:
            settings = Limits(shutdown_grace=0.1, close_timeout=1.0, **limits)
            server = await nursery.start(partial(serve_gateway, rt, limits=settings))
            try:
                yield server
            finally:
                nursery.cancel_scope.cancel()


async def test_the_gateway_serves_the_directory_and_discovery(tmp_path: pathlib.Path) -> None:
    env = {"PROXY_KEY": KEY}
    async with open_upstream(ollama_router, models=("proxied-a",)) as up:
        config = load_config(ollama_file(tmp_path, up.base_url), environ=env)
        async with (
            configured_gateway(config, env) as server,
            open_gateway_client(server.url) as client,
        ):
            directory = await client.list_configurable_providers()
            assert [(e.provider, e.settings_ns) for e in directory[:2]] == [
                ("home-llama", "home"),
                ("proxy", "openai-compatible"),
            ]
            found = await client.discover_models(
                "home", ModelDiscoveryRequest(provider="home-llama")
            )
            assert found[0] == DiscoveredModel(id="llama3.2:latest", name="llama3.2:latest")

            with pytest.raises(llmrt.LlmError) as info:
                await client.discover_models("nowhere")
            assert info.value.code == ErrorCode.NO_ADAPTER

            # A client-chosen URL is refused unless the gateway allows it.
            draft = ModelDiscoveryRequest(base_url=up.base_url, api_key=KEY)
            with pytest.raises(llmrt.LlmError) as info:
                await client.discover_models("openai-compatible", draft)
            assert info.value.code == ErrorCode.INVALID_REQUEST
            assert "discover_any_url" in str(info.value)
            asked = len(up.requests)

            # `llmrt models --via` asks the same frames.
            code, text = await run_cli("models", "proxy", "--via", server.url)
            assert code == 0
            assert text == "proxied-a\tproxied-a\tdiscovered:openai-compatible\n"
    assert asked == 1 and len(up.requests) == 2


async def test_a_gateway_that_allows_any_url_never_echoes_the_drafts_key(
    tmp_path: pathlib.Path,
) -> None:
    echoing = ErrorScript(status=401, body={"error": {"message": f"bad key {KEY}"}})
    config = load_config(write(tmp_path, ""), environ={})
    async with (
        open_upstream(lambda request: echoing) as up,
        # The upstream is on loopback, which a client-named URL reaches only when allowed.
        configured_gateway(
            config, {}, discover_any_url=True, discover_allow_private=True
        ) as server,
        open_gateway_client(server.url) as client,
    ):
        draft = ModelDiscoveryRequest(base_url=up.base_url + "/v1", api_key=KEY)
        with pytest.raises(llmrt.LlmError) as info:
            await client.discover_models("openai-compatible", draft)
    assert info.value.code == ErrorCode.AUTH
    assert KEY not in str(info.value) and KEY[:12] not in str(info.value)
    assert up.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_the_discovery_frames_as_documented() -> None:
    frame = DiscoverModelsFrame(
        id="r1",
        settings_ns="ollama",
        request=ModelDiscoveryRequest(provider="home", base_url="http://h:11434", api="ollama"),
    )
    assert json.loads(JSON.encode(frame)) == {
        "type": "discover-models",
        "id": "r1",
        "settingsNs": "ollama",
        "request": {"provider": "home", "baseURL": "http://h:11434", "api": "ollama"},
    }
    decoded = JSON.decode_client(
        b'{"type":"discover-models","id":"r2","settingsNs":"openai-compatible"}'
    )
    assert decoded == DiscoverModelsFrame(id="r2", settings_ns="openai-compatible")
    listing = JSON.decode_client(b'{"type":"list-configurable-providers","id":"r3"}')
    assert listing.id == "r3"  # type: ignore[union-attr]


def test_every_client_frame_is_documented() -> None:
    doc = (pathlib.Path(__file__).parents[1] / "docs" / "protocol.md").read_text()
    for frame in ClientFrame.__args__:
        assert f"| `{frame.__struct_config__.tag}` |" in doc, frame
    assert "### Provider directory and model discovery" in doc


def test_discover_any_url_comes_from_the_gateway_table(tmp_path: pathlib.Path) -> None:
    from argparse import Namespace

    from llmrt.actors.app.cli._serving import gateway_limits

    flags = Namespace(
        idle_timeout=None,
        max_connections_per_peer=None,
        max_pending_bytes=None,
        max_frame_bytes=None,
    )
    config = load_config(write(tmp_path, "[gateway]\ndiscover_any_url = true\n"), environ={})
    assert gateway_limits(flags, config.gateway).discover_any_url is True
    config = load_config(write(tmp_path, ""), environ={})
    assert gateway_limits(flags, config.gateway).discover_any_url is False
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, '[gateway]\ndiscover_any_url = "yes"\n'), environ={})
    assert info.value.line == 2
