"""The warm ``llmrt`` runner (tests/_warm_llmrt.py) behaves as the command run cold.

The CLI tests run ``llmrt`` forked from a warm interpreter; these check the
runner against ``python -m llmrt.actors.app.cli`` itself: the same output and
exit status, the caller's streams, directory and environment, signals passed
on, and no child left behind when the stand-in process is killed.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
import trio
from _cli_process import kill, spawn_cli
from _serving import poll

#: Real seconds: far above what a working run takes.
BOUND = 30
TIMING = re.compile(r'\d+(\.\d+)?(?= ?ms\b)|"(ttft|first|total)[A-Za-z_]*": ?[\d.e-]+')


async def run(*argv: str, warm: bool, **kwargs: object) -> tuple[int, str, str]:
    cli = await spawn_cli(*argv, warm=warm, **kwargs)  # type: ignore[arg-type]
    try:
        with trio.fail_after(BOUND):
            return await cli.finish()
    finally:
        await kill(cli)


@pytest.mark.parametrize(
    "argv",
    [
        ("--version",),
        ("providers",),
        ("call", "-", "--json"),
        ("call", "hi", "-p", "deme"),  # an error: its message and status
        ("no-such-command",),
    ],
    ids=lambda argv: " ".join(argv),
)
async def test_a_warm_command_prints_and_exits_as_the_cold_one(
    argv: tuple[str, ...], tmp_path: Path
) -> None:
    config = tmp_path / "fast.toml"
    config.write_text('[[provider]]\nroute = "demo"\nadapter = "demo"\n')
    env = {"LLMRT_CONFIG": str(config)}
    stdin = b"a prompt from stdin\n"
    cold = await run(*argv, warm=False, env=env, stdin=stdin)
    warm = await run(*argv, warm=True, env=env, stdin=stdin)

    def steady(result: tuple[int, str, str]) -> tuple[int, str, str]:
        # Timings differ from run to run; the rest is the same.
        code, out, err = result
        return code, TIMING.sub("N", out), TIMING.sub("N", err)

    assert steady(warm) == steady(cold)
    assert warm[1] or warm[2], "the command printed nothing"


async def test_the_callers_directory_and_environment_are_the_commands(tmp_path: Path) -> None:
    # A relative --config is found from the caller's directory, and the key the
    # config names is looked up in the caller's environment.
    (tmp_path / "here.toml").write_text(
        '[[provider]]\nroute = "mine"\nadapter = "openai_chat"\n'
        'base_url = "http://127.0.0.1:9/v1"\napi_key_env = "WARM_TEST_KEY"\n'
    )
    argv = ("providers", "--config", "here.toml")
    cold = await run(*argv, warm=False, cwd=tmp_path, env={"WARM_TEST_KEY": "sk-warm-test-1"})
    warm = await run(*argv, warm=True, cwd=tmp_path, env={"WARM_TEST_KEY": "sk-warm-test-1"})
    assert warm == cold
    assert warm[0] == 0, warm
    assert "mine" in warm[1]
    # Without the variable the route is reported as such, by both alike.
    gone = await run(*argv, warm=True, cwd=tmp_path)
    assert gone == await run(*argv, warm=False, cwd=tmp_path)
    assert gone != warm


async def test_a_signal_reaches_the_command_and_its_status_comes_back() -> None:
    seen = {}
    for warm in (False, True):
        cli = await spawn_cli("serve", "--port", "0", warm=warm)
        try:
            with trio.fail_after(BOUND):
                await cli.read_until("gateway listening on ")
                cli.proc.send_signal(signal.SIGTERM)
                code, out, _ = await cli.finish()
        finally:
            await kill(cli)
        assert "shutting down" in out, (warm, out)
        seen[warm] = code
    assert seen[True] == seen[False]


async def accepts(port: int) -> bool:
    with trio.socket.socket() as sock:
        try:
            await sock.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return False
    return True


async def test_killing_the_stand_in_kills_the_command() -> None:
    cli = await spawn_cli("serve", "--port", "0")
    try:
        with trio.fail_after(BOUND):
            text = await cli.read_until("\n")
            port = int(text.split("127.0.0.1:")[1].split("/")[0])
            assert await accepts(port)
            cli.proc.kill()
            await cli.proc.wait()

            # The forked command is gone too: its port refuses, soon.
            async def refused() -> bool:
                return not await accepts(port)

            await poll(refused, within=BOUND)
    finally:
        await kill(cli)
