"""Reloading ``llmrt.toml`` while serving (`llmrt.actors.app._reload`): a valid file moves
the runtime to it without disturbing calls in flight; a broken one changes nothing.

The calls that stream across a reload are held open by their consumers: each
stream is longer than the call's buffer, so its call keeps its registration
leased until the consumer reads on, whatever the clock does.
"""

from __future__ import annotations

from pathlib import Path

import trio

import llmrt
from llmrt.actors.app import config as configuration
from llmrt.actors.app._reload import describe_reload, served_config
from llmrt.testing import SSEScript, open_upstream, openai_events

#: Chunks of each held stream: more than the call's buffer (256), so it cannot finish alone.
HELD_CHUNKS = 400
CALLS = 100


def _entry(route: str, base_url: str, *, aliases: tuple[str, ...] = ()) -> str:
    routes = f"routes = {list((route, *aliases))!r}".replace("'", '"') if aliases else ""
    name = "" if aliases else f'route = "{route}"\n'
    return (
        f'[[provider]]\n{name}{routes}\nadapter = "openai_chat"\n'
        f'preset = "openai-compatible"\nbase_url = "{base_url}"\n'
        f'models = [{{ id = "m", context_window = 8192 }}]\n\n'
    )


def _options(provider: str) -> llmrt.GenerateOptions:
    return llmrt.GenerateOptions(
        provider=provider, model="m", messages=(llmrt.user_message("hello"),)
    )


async def _text(rt: llmrt.LlmRuntime, provider: str) -> tuple[str, llmrt.Finish]:
    async with rt.stream(_options(provider)) as call:
        text = ""
        async for chunk in call:
            if isinstance(chunk, llmrt.TextDelta):
                text += chunk.text
            if isinstance(chunk, llmrt.Finish):
                return text, chunk
    raise AssertionError("no finish")


def _id(info: llmrt.ProviderInfo) -> str:
    return info.id


def _script(word: str, count: int) -> SSEScript:
    return SSEScript(events=openai_events([word] * count, model="m"))


async def test_reload_moves_a_route_and_adds_one_while_calls_stream(tmp_path: Path) -> None:
    path = tmp_path / "llmrt.toml"
    with trio.fail_after(60):
        async with (
            open_upstream(_script("a", HELD_CHUNKS)) as old,
            open_upstream(_script("b", 3)) as new,
        ):
            path.write_text(_entry("main", old.base_url))
            config = configuration.load_config(path, environ={})
            async with served_config(config, path=path, environ={}) as served:
                rt = served.runtime
                results: list[tuple[str, llmrt.Finish]] = []
                started = trio.Semaphore(0)
                resume = trio.Event()

                async def held() -> None:
                    async with rt.stream(_options("main")) as call:
                        text = ""
                        async for chunk in call:
                            if isinstance(chunk, llmrt.TextDelta):
                                if not text:
                                    started.release()
                                    await resume.wait()
                                text += chunk.text
                            if isinstance(chunk, llmrt.Finish):
                                results.append((text, chunk))

                async with trio.open_nursery() as nursery:
                    for _ in range(CALLS):
                        nursery.start_soon(held)
                    for _ in range(CALLS):
                        await started.acquire()
                    # Every call streams from the old URL, its adapter leased.
                    assert len(old.requests) == CALLS
                    previous = served.registration("main")
                    updates_seen = 0
                    async with rt.adapters_updated() as updates:
                        path.write_text(
                            _entry("main", new.base_url) + _entry("extra", new.base_url)
                        )
                        result = await served.reload()
                        try:
                            updates.receive_nowait()
                            updates_seen += 1
                        except trio.WouldBlock:
                            pass
                    assert result.ok, result
                    assert result.changed == ("main",)
                    assert result.added == ("extra",)
                    assert result.removed == ()
                    assert updates_seen >= 1
                    # New calls see the new facts: the new URL, the new route.
                    text, finish = await _text(rt, "main")
                    assert text == "bbb" and isinstance(finish.reason, llmrt.FinishStop)
                    text, finish = await _text(rt, "extra")
                    assert text == "bbb" and isinstance(finish.reason, llmrt.FinishStop)
                    assert len(old.requests) == CALLS
                    assert len(new.requests) == 2
                    resume.set()
                assert len(results) == CALLS
                for text, finish in results:
                    assert isinstance(finish.reason, llmrt.FinishStop), finish
                    assert text == "a" * HELD_CHUNKS
                names = [info.id for info in rt.list_providers()]
                assert sorted(names) == ["demo", "extra", "main"]
                # The old registration drains its calls, then closes: one adapter per route.
                assert previous is not None and previous is not served.registration("main")
                await previous.dispose()  # idempotent: returns once the reload's dispose is done
                assert rt.statistics().registrations == 3  # main, extra, demo


async def test_a_broken_file_changes_nothing_and_says_where(tmp_path: Path) -> None:
    path = tmp_path / "llmrt.toml"
    with trio.fail_after(30):
        async with open_upstream(_script("a", 2)) as up:
            path.write_text(_entry("main", up.base_url))
            config = configuration.load_config(path, environ={})
            async with served_config(config, path=path, environ={}) as served:
                rt = served.runtime
                before = rt.list_providers()
                path.write_text(_entry("main", up.base_url) + '[[provider]]\nroute = "x"\n')
                result = await served.reload()
                assert not result.ok
                assert result.error is not None
                assert result.error.code == configuration.CONFIG_INVALID
                assert result.error.message.startswith(f"{path}:")
                line = int(result.error.message[len(str(path)) + 1 :].split(":")[0])
                assert line >= 7  # within the broken entry, past the good one
                assert "refused, the old configuration serves on" in describe_reload(result)
                # Everything serves as before.
                assert sorted(rt.list_providers(), key=_id) == sorted(before, key=_id)
                text, finish = await _text(rt, "main")
                assert text == "aa" and isinstance(finish.reason, llmrt.FinishStop)
                # A syntax error too.
                path.write_text("[[provider]\n")
                result = await served.reload()
                assert not result.ok and result.error is not None
                assert result.error.message.startswith(f"{path}:1")
                assert sorted(rt.list_providers(), key=_id) == sorted(before, key=_id)


async def test_an_adapter_that_refuses_its_routes_undoes_the_reload(tmp_path: Path) -> None:
    """A step the registry refuses (a route named like a group) leaves the old configuration."""
    path = tmp_path / "llmrt.toml"
    group = '[[group]]\nname = "pool"\n[[group.deployment]]\nroute = "main"\nmodel = "m"\n\n'
    with trio.fail_after(30):
        async with open_upstream(_script("a", 2)) as up:
            path.write_text(_entry("main", up.base_url) + group)
            config = configuration.load_config(path, environ={})
            async with served_config(config, path=path, environ={}) as served:
                rt = served.runtime
                before = rt.list_providers()
                # Valid alone, but "pool" is the old group's name until the groups move.
                path.write_text(_entry("main", up.base_url + "/") + _entry("pool", up.base_url))
                result = await served.reload()
                assert not result.ok and result.error is not None
                assert result.error.code == llmrt.ErrorCode.DUPLICATE_ADAPTER
                assert sorted(rt.list_providers(), key=_id) == sorted(before, key=_id)
                text, finish = await _text(rt, "main")
                assert text == "aa" and isinstance(finish.reason, llmrt.FinishStop)
                text, finish = await _text(rt, "pool")
                assert text == "aa" and isinstance(finish.reason, llmrt.FinishStop)


async def test_unchanged_routes_keep_their_registration(tmp_path: Path) -> None:
    path = tmp_path / "llmrt.toml"
    with trio.fail_after(30):
        async with open_upstream(_script("a", 2)) as up:
            path.write_text(_entry("main", up.base_url) + _entry("gone", up.base_url))
            config = configuration.load_config(path, environ={})
            async with served_config(config, path=path, environ={}) as served:
                rt = served.runtime
                kept = served.registration("main")
                assert kept is not None
                # A comment moves the lines: the entry is the same, its adapter stays.
                path.write_text("# moved\n\n" + _entry("main", up.base_url))
                result = await served.reload()
                assert result.ok
                assert (result.added, result.changed, result.removed) == ((), (), ("gone",))
                assert describe_reload(result) == "reload: applied (removed gone)"
                assert [info.id for info in rt.list_providers()] == ["main", "demo"]
                assert served.registration("main") is kept
                assert served.registration("gone") is None
                path.write_text(
                    "# moved\n\n" + _entry("main", up.base_url) + "[gateway]\nidle_timeout = 5\n"
                )
                result = await served.reload()
                assert result.ok and result.restart_needed == ("gateway",)
                assert "needs a restart to apply: [gateway]" in describe_reload(result)
                # The front door's aliases and the call log's writer are taken at start too.
                path.write_text(
                    "# moved\n\n"
                    + _entry("main", up.base_url)
                    + "[gateway]\nidle_timeout = 5\n"
                    + '[aliases]\n"m" = "main/m"\n'
                    + '[call_log]\ndirectory = "calls"\n'
                )
                result = await served.reload()
                assert result.ok
                assert result.restart_needed == ("call_log", "aliases")
                assert served.registration("main") is kept
