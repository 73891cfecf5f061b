"""``NO_ADAPTER`` says what is registered, the closest name, and the variable that would
register the name asked for (issue 22, item 3: the runtime's part).

The runtime knows no preset: it reads the published topology, whose
configurable-provider directory the application layer fills from the
plugins' key variables (`register_settings`). The message holds names only,
never a key's value.
"""

from __future__ import annotations

from functools import partial

import pytest
import trio
from _cli_process import kill, spawn_cli
from conftest import collect, finish_reason, make_options

import llmrt
from llmrt import ErrorCode, FinishError, LlmError
from llmrt.actors.app.config import load_config, register_config, register_settings
from llmrt.actors.gateway import Limits, serve_gateway
from llmrt.adapter import ConfigurableProvider
from llmrt.adapters.scripted import ScriptedAdapter, text_script

BOUND = 30
SECRET = "sk-live-0123456789abcdefSECRET"


async def no_adapter(rt: llmrt.LlmRuntime, provider: str) -> str:
    reason = finish_reason(await collect(rt.stream(make_options(provider))))
    assert isinstance(reason, FinishError) and reason.failure.code == ErrorCode.NO_ADAPTER
    return reason.failure.message


def entry(provider: str, key_env: str | None = None) -> ConfigurableProvider:
    return ConfigurableProvider(
        provider=provider, display_name=provider, settings_ns="openai-compatible", key_env=key_env
    )


async def test_a_misspelt_route_gets_the_closest_name_and_the_registered_list(
    runtime: llmrt.LlmRuntime,
) -> None:
    await runtime.register_adapter(["demo", "alpha"], ScriptedAdapter(text_script("ok")))
    assert await no_adapter(runtime, "deme") == (
        "no adapter is registered for provider 'deme'; did you mean 'demo'? "
        "(registered: demo, alpha)"
    )
    # Nothing close: only the list.
    assert await no_adapter(runtime, "zzz") == (
        "no adapter is registered for provider 'zzz' (registered: demo, alpha)"
    )
    # The metadata calls raise the same message.
    with pytest.raises(LlmError) as info:
        await runtime.list_models("alpah")
    assert info.value.code == ErrorCode.NO_ADAPTER
    assert "did you mean 'alpha'?" in info.value.failure.message


async def test_a_dormant_route_names_the_variable_that_registers_it(
    runtime: llmrt.LlmRuntime,
) -> None:
    await runtime.register_adapter(["demo"], ScriptedAdapter(text_script("ok")))
    await runtime.register_configurable_providers(
        [entry("openai", "OPENAI_API_KEY"), entry("groq", "GROQ_API_KEY"), entry("lab")]
    )
    assert await no_adapter(runtime, "openai") == (
        "no adapter is registered for provider 'openai'; set OPENAI_API_KEY to register it "
        "(registered: demo)"
    )
    # Close to a dormant route: suggested with its variable.
    assert "did you mean 'groq' (set GROQ_API_KEY to register it)?" in await no_adapter(
        runtime, "grok"
    )
    # A directory entry without a variable (a route only configuration makes) adds nothing.
    assert await no_adapter(runtime, "lab") == (
        "no adapter is registered for provider 'lab' (registered: demo)"
    )


async def test_the_list_is_bounded_and_an_empty_runtime_says_so(
    runtime: llmrt.LlmRuntime,
) -> None:
    assert await no_adapter(runtime, "x") == (
        "no adapter is registered for provider 'x' (no provider is registered)"
    )
    names = [f"route-{n:02d}" for n in range(30)]
    await runtime.register_adapter(names, ScriptedAdapter(text_script("ok")))
    message = await no_adapter(runtime, "nothing-like-it")
    assert message.endswith("route-11 and 18 more)") and "route-12" not in message
    # A huge or malformed name is quoted cut short and gets no suggestion.
    huge = "route-0" + "x" * 100_000
    message = await no_adapter(runtime, huge)
    assert len(message) < 600 and "did you mean" not in message


async def test_register_settings_gives_each_dormant_preset_route_its_key_variable() -> None:
    config = load_config(environ={"DEEPSEEK_API_KEY": SECRET})
    async with llmrt.open_runtime() as rt:
        await register_config(rt, config, environ={"DEEPSEEK_API_KEY": SECRET})
        await register_settings(rt, config, environ={"DEEPSEEK_API_KEY": SECRET})
        keys = {e.provider: e.key_env for e in rt.list_configurable_providers()}
        assert keys["openai"] == "OPENAI_API_KEY" and keys["groq"] == "GROQ_API_KEY"
        # A registered route is not dormant: no hint (and it is served anyway).
        assert "deepseek" in {p.id for p in rt.list_providers()}
        assert keys.get("deepseek") is None
        message = await no_adapter(rt, "openai")
        assert "set OPENAI_API_KEY to register it" in message
        assert "registered: deepseek, demo" in message
        assert (
            SECRET not in message
            and SECRET not in llmrt.encode(rt.list_configurable_providers()).decode()
        )


def _no_adapter_line(out: str, err: str) -> str:
    lines = [line for line in (out + err).splitlines() if "NO_ADAPTER" in line]
    assert len(lines) == 1, (out, err)
    return lines[0]


async def test_llmrt_call_shows_the_hints_in_process_and_via_the_gateway() -> None:
    env = {"DEEPSEEK_API_KEY": SECRET}
    config = load_config(environ=env)
    limits = Limits(shutdown_grace=0.2, close_timeout=2.0)
    with trio.fail_after(BOUND):
        async with llmrt.open_runtime() as rt, trio.open_nursery() as nursery:
            await register_config(rt, config, environ=env)
            await register_settings(rt, config, environ=env)
            server = await nursery.start(partial(serve_gateway, rt, limits=limits))
            seen: dict[tuple[str, bool], str] = {}
            for provider in ("deme", "openai"):
                for via in (False, True):
                    extra = ("--via", server.url) if via else ()
                    cli = await spawn_cli("call", "hi", "-p", provider, *extra, env=env)
                    try:
                        code, out, err = await cli.finish()
                    finally:
                        await kill(cli)
                    assert code != 0, (out, err)
                    assert SECRET not in out + err
                    seen[provider, via] = _no_adapter_line(out, err)
            nursery.cancel_scope.cancel()
    for provider in ("deme", "openai"):
        assert seen[provider, False] == seen[provider, True]
    assert "did you mean 'demo'?" in seen["deme", False]
    assert "set OPENAI_API_KEY to register it" in seen["openai", False]
    assert "registered: deepseek, demo" in seen["openai", False]
