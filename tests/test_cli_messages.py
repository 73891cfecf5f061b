"""Messages a user reads: config depth, the serve refusal, abort reasons (issue 10, 5 and 12)."""

from __future__ import annotations

import io
import pathlib
from functools import partial

import pytest
import trio

import llmrt
from llmrt import ErrorCode, Finish, FinishAborted, GenerateOptions
from llmrt.actors.app.cli import main
from llmrt.actors.gateway import Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.scripted import ScriptedAdapter, Stall


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out, environ={}), out.getvalue()


def test_a_config_nested_100000_deep_is_a_one_line_config_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deep.toml"
    depth = 100_000
    path.write_text("# a hostile file\n[defaults]\nx = " + "[" * depth + "]" * depth + "\n")
    code, _ = run("providers", "--config", str(path))
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        f"llmrt: {path}:3: arrays or inline tables nested more than 64 levels deep"
    ]


def test_a_config_nested_64_deep_reaches_the_schema_check(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ok.toml"
    # 64 levels is the limit itself: the file parses, and the schema refuses the unknown key.
    path.write_text("[defaults]\nx = " + "[" * 64 + "]" * 64 + "\n")
    code, _ = run("providers", "--config", str(path))
    err = capsys.readouterr().err
    assert code == 2
    assert "levels deep" not in err and f"{path}:2: Object contains unknown field" in err


def test_serve_beyond_loopback_without_a_token_names_the_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _ = run("serve", "--host", "0.0.0.0", "--port", "0")
    err = capsys.readouterr().err
    assert code == 2
    assert "$LLMRT_GATEWAY_TOKEN" in err and "--token-env" in err
    assert "token=" not in err  # the Python API's wording
    code, _ = run("serve", "--host", "0.0.0.0", "--port", "0", "--token-env", "MY_TOKEN")
    assert "$MY_TOKEN" in capsys.readouterr().err


def options() -> GenerateOptions:
    return GenerateOptions(provider="p", model="m", messages=(llmrt.user_message("hi"),))


async def test_an_abort_reason_is_the_message_not_prefixed_twice() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter([Stall()]))
        async with rt.stream(options()) as call:
            call.abort("user pressed stop")
            chunks = [chunk async for chunk in call]
    finish = chunks[-1]
    assert isinstance(finish, Finish) and isinstance(finish.reason, FinishAborted)
    assert finish.reason.failure.message == "user pressed stop"


async def test_the_python_client_sends_its_abort_reason_to_the_gateway() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["p"], ScriptedAdapter([Stall()]))
        async with trio.open_nursery() as nursery:
            limits = Limits(shutdown_grace=0.1, close_timeout=1.0)
            server = await nursery.start(partial(serve_gateway, rt, limits=limits))
            with trio.fail_after(30):
                async with open_gateway_client(server.url) as client:
                    async with client.stream(options()) as call:
                        call.abort("the user closed the tab")
                        chunks = [chunk async for chunk in call]
            nursery.cancel_scope.cancel()
    finish = chunks[-1]
    assert isinstance(finish, Finish) and isinstance(finish.reason, FinishAborted)
    assert finish.reason.failure.code == ErrorCode.ABORTED
    assert finish.reason.failure.message == "the client aborted the call: the user closed the tab"
