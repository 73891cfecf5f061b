"""Key-shaped values where a name belongs are refused, never echoed (issue 21, finding 7).

``api_key_env = "gsk_..."`` (or a 32-character random string, or ``fw_...``)
used to pass as a variable name and then be shown by ``llmrt providers``, the
serve banner and the ``MISSING_CREDENTIAL`` failure every gateway client
receives; ``preset = "<key>"`` was quoted by its error.
"""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio
from _cli_process import kill, spawn_cli

import llmrt
from llmrt import ErrorCode, Finish, FinishError, GenerateOptions
from llmrt.actors.app.config import (
    CONFIG_INVALID,
    Config,
    ConfigError,
    RouteSpec,
    describe,
    load_config,
)
from llmrt.actors.gateway import GatewayServer, Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapter import looks_like_secret
from llmrt.adapters.openai_chat import OpenAIChatAdapter

# Made-up values in the documented shapes.
GROQ = "gsk_" + "Xy7Qp2Lm9Rt4Vb8Nc3Kd6Fh1Jw5Zs0Ag" + "Te4Ui8Oq2Pl6Mn0Bv"
FIREWORKS = "fw_3ZkQ9sLmR2vX8pT4nW6yB1cD"
RANDOM_32 = "Zq9xLw7Rt2Vb8NmK4pHs6Yd3Gf5Jc1Ae"
GOOGLE = "AIzaSyD4e7Gh2Kq9Lm3Np8Rs1Tv6Wx0Yz5Ab3C"
XAI = "xai-Ab3De6Gh9Jk2Mn5Pq8St1Vw4Yz7Bc0Ef"
KEYS = [GROQ, FIREWORKS, RANDOM_32, GOOGLE, XAI]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llmrt.toml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            """\
            [[provider]]
            route = "groq"
            adapter = "openai_chat"
            preset = "groq"
            api_key_env = "{key}"
            """,
            5,
        ),
        (
            """\
            [settings.home]
            discovery = "openai"
            base_url = "http://127.0.0.1:8000/v1"
            api_key_env = "{key}"
            """,
            4,
        ),
        (
            """\
            [[provider]]
            route = "x"
            adapter = "openai_chat"
            preset = "{key}"
            """,
            4,
        ),
        (
            # A preset key where no preset applies: refused before the schema speaks.
            """\
            [[provider]]
            route = "a"
            adapter = "anthropic"
            preset = "{key}"
            """,
            4,
        ),
    ],
    ids=["provider-api_key_env", "settings-api_key_env", "preset", "preset-elsewhere"],
)
def test_a_key_where_a_name_belongs_is_refused_without_echo(
    tmp_path: Path, key: str, text: str, line: int
) -> None:
    assert looks_like_secret(key)
    path = write(tmp_path, text.format(key=key))
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    err = info.value
    assert err.code == CONFIG_INVALID
    assert err.line == line and str(err).startswith(f"{path}:{line}: ")
    assert "looks like an API key" in err.reason and "not shown" in err.reason
    for piece in (key, key[:12], key[-12:]):
        assert piece not in str(err)


@pytest.mark.parametrize(
    "text",
    [
        'adapter = "{key}"',  # an unknown adapter's error names the value
        'adapter = "openai_chat"\nstream_idle_timeout = "{key}"',
        'adapter = "openai_chat"\n[provider.retry]\nmode = "{key}"',  # an invalid choice
        'adapter = "openai_chat"\nroutes = ["{key}", "{key}"]',  # a duplicate name
    ],
    ids=["adapter", "wrong-type", "choice", "route-name"],
)
def test_no_config_error_quotes_a_secret_looking_value(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, '[[provider]]\nroute = "r"\n' + text.format(key=GROQ) + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert GROQ not in str(info.value) and GROQ[:12] not in str(info.value)


@pytest.mark.parametrize(
    "name",
    ["GROQ_API_KEY", "MY_COMPANY_OPENAI_API_KEY_PRODUCTION", "AZUREOPENAIKEY2024PROD", "HF_TOKEN"],
)
def test_variable_names_are_not_taken_for_keys(tmp_path: Path, name: str) -> None:
    path = write(
        tmp_path,
        f"""\
        [[provider]]
        route = "groq"
        adapter = "openai_chat"
        preset = "groq"
        api_key_env = "{name}"
        """,
    )
    (spec, *_) = load_config(path, environ={}).routes
    assert spec.api_key_env == name


def test_describe_never_shows_a_key_shaped_variable_name() -> None:
    # Only a route built in code can hold one (the loader refuses it).
    spec = RouteSpec(route="groq", adapter="openai_chat", source="code", api_key_env=GROQ)
    lines = describe(Config(routes=(spec,)))
    assert GROQ not in "\n".join(lines) and "not shown" in lines[0]


@asynccontextmanager
async def gateway(rt: llmrt.LlmRuntime) -> AsyncIterator[GatewayServer]:
    async with trio.open_nursery() as nursery:
        limits = Limits(shutdown_grace=0.2, close_timeout=2.0)
        server = await nursery.start(partial(serve_gateway, rt, limits=limits))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def test_a_key_shaped_variable_name_never_reaches_a_frame() -> None:
    # An adapter built in code, bypassing the loader: its MISSING_CREDENTIAL failure
    # used to read "the environment variable gsk_... is unset", to every client.
    adapter = OpenAIChatAdapter(base_url="http://127.0.0.1:9/v1", api_key_env=GROQ, environ={})
    request = GenerateOptions(provider="p", model="m", messages=(llmrt.user_message("hi"),))
    with trio.fail_after(30):
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["p"], adapter)
            async with gateway(rt) as server:
                async with (
                    open_gateway_client(server.url) as client,
                    client.stream(request) as call,
                ):
                    chunks = [chunk async for chunk in call]
    finish = chunks[-1]
    assert type(finish) is Finish and type(finish.reason) is FinishError
    assert finish.reason.failure.code == ErrorCode.MISSING_CREDENTIAL
    text = llmrt.encode(finish).decode()
    assert GROQ not in text and GROQ[:12] not in text
    assert "named by api_key_env" in text


async def test_llmrt_providers_refuses_the_file_and_prints_no_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""\
        [[provider]]
        route = "groq"
        adapter = "openai_chat"
        preset = "groq"
        api_key_env = "{GROQ}"
        """,
    )
    cli = await spawn_cli("providers", "--config", str(path))
    try:
        with trio.fail_after(30):
            code, out, err = await cli.finish()
    finally:
        await kill(cli)
    assert code == 2, (out, err)
    assert f"{path}:5: " in err and "looks like an API key" in err
    assert GROQ not in out + err and GROQ[:12] not in out + err


# ---- --token-env: a name, never a token ----------------------------------------------------


async def run_cli(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    cli = await spawn_cli(*argv, env=env)
    try:
        with trio.fail_after(30):
            return await cli.finish()
    finally:
        await kill(cli)


@pytest.mark.parametrize("key", KEYS)
async def test_serve_refuses_a_token_pasted_as_token_env_and_never_shows_it(key: str) -> None:
    # Before: the banner said "auth: on (bearer token from $<the token>)".
    code, out, err = await run_cli("serve", "--port", "0", "--token-env", key, env={key: "x"})
    assert code == 2, (out, err)
    assert "argument --token-env: this looks like a token" in err
    assert "(the value is not shown)" in err
    assert key not in out + err and key[:12] not in out + err
    assert "listening" not in out


@pytest.mark.parametrize(
    "command",
    [["call", "hi"], ["providers"], ["models", "demo"], ["stats"]],
    ids=lambda command: command[0],
)
async def test_every_gateway_client_command_refuses_a_token_as_token_env(
    command: list[str],
) -> None:
    # Refused before connecting: nothing listens on the --via port.
    code, out, err = await run_cli(*command, "--via", "ws://127.0.0.1:9/", "--token-env", GROQ)
    assert code == 2, (out, err)
    # argparse's refusal is the last word: no connection was tried.
    last = err.splitlines()[-1]
    assert last.startswith(f"llmrt {command[0]}: error: argument --token-env: this looks like")
    assert "cannot connect" not in err
    assert GROQ not in out + err and GROQ[:12] not in out + err


async def test_a_token_env_that_is_no_variable_name_is_refused_unquoted() -> None:
    # Not key-shaped (spaces, too short), so only the name check catches it.
    pasted = "hunter2 pass!"
    code, out, err = await run_cli("serve", "--port", "0", "--token-env", pasted)
    assert code == 2, (out, err)
    assert "must be the NAME of an environment variable" in err
    assert pasted not in out + err and "hunter2" not in out + err


async def test_a_token_env_name_is_still_shown_in_the_banner() -> None:
    cli = await spawn_cli(
        "serve", "--port", "0", "--token-env", "MY_GATEWAY_TOKEN", env={"MY_GATEWAY_TOKEN": KEYS[2]}
    )
    try:
        with trio.fail_after(30):
            text = await cli.read_until("providers:")
    finally:
        await kill(cli)
    assert "auth: on (bearer token from $MY_GATEWAY_TOKEN)" in text
    assert KEYS[2] not in text
