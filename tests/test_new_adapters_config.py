"""The Gemini and Responses adapters in ``llmrt.toml``, key detection, the CLI and the gateway."""

from __future__ import annotations

import io
import pathlib
import queue
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import pytest
import trio

import llmrt
from llmrt.actors.app.cli import main
from llmrt.actors.app.config import ConfigError, build_adapter, load_config, register_config
from llmrt.actors.gateway import Limits, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.gemini import GeminiAdapter
from llmrt.adapters.openai_responses import OpenAIResponsesAdapter
from llmrt.testing import SSEScript, Upstream, open_upstream, sse_data

SECRET = "sk-test-secret-value-42"


def routes(environ: dict[str, str], path: pathlib.Path | None = None) -> list[tuple[str, str, Any]]:
    config = load_config(path, environ=environ)
    return [(s.route, s.adapter, s.api_key_env) for s in config.routes]


def test_key_variables_add_the_new_routes(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "none.toml"  # an explicit empty file: no llmrt.toml from the cwd
    missing.write_text("")
    assert routes({"GEMINI_API_KEY": SECRET}, missing) == [
        ("gemini", "gemini", "GEMINI_API_KEY"),
        ("demo", "demo", None),
    ]
    assert routes({"GOOGLE_API_KEY": SECRET}, missing)[0] == ("gemini", "gemini", "GOOGLE_API_KEY")
    both = {"GOOGLE_API_KEY": SECRET, "GEMINI_API_KEY": SECRET}
    assert routes(both, missing)[0] == ("gemini", "gemini", "GEMINI_API_KEY")
    assert routes({"OPENAI_API_KEY": SECRET}, missing) == [
        ("openai", "openai_chat", "OPENAI_API_KEY"),
        ("openai-responses", "openai_responses", "OPENAI_API_KEY"),
        ("demo", "demo", None),
    ]
    config = load_config(missing, environ={"OPENAI_API_KEY": SECRET, "GEMINI_API_KEY": SECRET})
    adapters = [build_adapter(spec, environ={}) for spec in config.routes]
    assert [type(a).__name__ for a in adapters] == [
        "OpenAIChatAdapter",
        "OpenAIResponsesAdapter",
        "GeminiAdapter",
        "DemoAdapter",
    ]


def test_file_entries_build_the_new_adapters(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text(
        textwrap.dedent(
            """\
            [[provider]]
            route = "g"
            adapter = "gemini"
            base_url = "http://127.0.0.1:9/"
            api_key_env = "GOOGLE_API_KEY"
            models = [{ id = "gemini-custom", image_input = true, efforts = ["low"] }]

            [[provider]]
            routes = ["r", "r2"]
            adapter = "openai_responses"
            display_name = "Responses proxy"
            """
        )
    )
    config = load_config(path, environ={"OPENAI_API_KEY": SECRET})
    assert [(s.route, s.adapter, s.api_key_env) for s in config.routes] == [
        ("g", "gemini", "GOOGLE_API_KEY"),
        ("r", "openai_responses", "OPENAI_API_KEY"),
        # OPENAI_API_KEY is used by the file, so it adds no route of its own.
        ("demo", "demo", None),
    ]
    gemini = build_adapter(config.routes[0], environ={})
    assert isinstance(gemini, GeminiAdapter)
    assert gemini.base_url == "http://127.0.0.1:9" and gemini.api_key_env == "GOOGLE_API_KEY"
    responses = build_adapter(config.routes[1], environ={})
    assert isinstance(responses, OpenAIResponsesAdapter)
    assert responses.base_url == "https://api.openai.com/v1"
    assert responses.provider_info("r").name == "Responses proxy"


def test_keys_of_other_adapters_are_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text('[[provider]]\nroute = "g"\nadapter = "gemini"\npreset = "openai"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.line == 4 and "preset" in caught.value.reason


def test_providers_lists_the_new_routes() -> None:
    out = io.StringIO()
    code = main(
        ["providers"], out=out, environ={"GOOGLE_API_KEY": SECRET, "OPENAI_API_KEY": SECRET}
    )
    text = out.getvalue()
    assert code == 0
    assert "gemini" in text and "key: $GOOGLE_API_KEY (set)" in text
    assert "openai-responses" in text and "openai_responses" in text
    assert SECRET not in text


# ---- llmrt call and the gateway against a local upstream ----------------------------------------

GEMINI_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
RESPONSES_PATH = "/v1/responses"


def gemini_body(text: str) -> list[bytes]:
    part = {"candidates": [{"index": 0, "content": {"parts": [{"text": text}]}}]}
    done = {"candidates": [{"index": 0, "finishReason": "STOP"}]}
    return [sse_data(part), sse_data(done)]


def responses_body(text: str) -> list[bytes]:
    delta = {"type": "response.output_text.delta", "output_index": 0, "delta": text}
    return [sse_data(delta), sse_data({"type": "response.completed", "response": {"id": "r"}})]


def router(request: Any) -> Any:
    if request.method != "POST":
        return None
    if request.path == GEMINI_PATH:
        return SSEScript(events=gemini_body("from gemini"))
    if request.path == RESPONSES_PATH:
        return SSEScript(events=responses_body("from responses"))
    return None


def config_file(tmp_path: pathlib.Path, base_url: str) -> pathlib.Path:
    path = tmp_path / "llmrt.toml"
    path.write_text(
        textwrap.dedent(
            f"""\
            [[provider]]
            route = "gemini"
            adapter = "gemini"
            base_url = "{base_url}"
            api_key_env = "TEST_GEMINI_KEY"

            [[provider]]
            route = "openai-responses"
            adapter = "openai_responses"
            base_url = "{base_url}/v1"
            api_key_env = "TEST_OPENAI_KEY"
            """
        )
    )
    return path


@contextmanager
def upstream_in_a_thread() -> Iterator[Upstream]:
    """The local upstream on its own trio loop, for code that runs `trio.run` itself."""
    ready: queue.Queue[tuple[Upstream, trio.lowlevel.TrioToken, trio.Event]] = queue.Queue()

    async def serve() -> None:
        async with open_upstream(router) as upstream:
            stop = trio.Event()
            ready.put((upstream, trio.lowlevel.current_trio_token(), stop))
            await stop.wait()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    upstream, token, stop = ready.get(timeout=10)
    try:
        yield upstream
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join(10)


ENV = {"TEST_GEMINI_KEY": "gemini-key-1", "TEST_OPENAI_KEY": "openai-key-1"}


@pytest.mark.parametrize(
    ("provider", "expected"),
    [("gemini", "from gemini"), ("openai-responses", "from responses")],
)
def test_llmrt_call_uses_the_new_routes(
    tmp_path: pathlib.Path, provider: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in ENV.items():  # the CLI's adapters read the process environment
        monkeypatch.setenv(name, value)
    with upstream_in_a_thread() as upstream:
        path = config_file(tmp_path, upstream.base_url)
        out, err = io.StringIO(), io.StringIO()
        code = main(
            ["call", "hi", "-p", provider, "--config", str(path), "--no-color"],
            out=out,
            err=err,
            environ=dict(ENV),
        )
    assert code == 0, err.getvalue()
    assert expected in out.getvalue()
    assert err.getvalue().rstrip().endswith("finish: stop")
    (sent,) = upstream.requests
    assert sent.path == (GEMINI_PATH if provider == "gemini" else RESPONSES_PATH)


async def test_the_gateway_serves_the_new_routes(tmp_path: pathlib.Path) -> None:
    async with open_upstream(router) as upstream, llmrt.open_runtime() as rt:
        config = load_config(config_file(tmp_path, upstream.base_url), environ={})
        await register_config(rt, config, environ=ENV)
        async with trio.open_nursery() as nursery:
            server = await nursery.start(
                partial(serve_gateway, rt, limits=Limits(shutdown_grace=0.2))
            )
            texts = {}
            async with open_gateway_client(server.url) as client:
                for provider, model in (
                    ("gemini", "gemini-2.5-flash"),
                    ("openai-responses", "gpt-4.1"),
                ):
                    request = llmrt.GenerateOptions(
                        provider=provider, model=model, messages=(llmrt.user_message("hi"),)
                    )
                    with trio.fail_after(10):
                        async with client.stream(request) as call:
                            chunks = [c async for c in call]
                    texts[provider] = "".join(
                        c.text for c in chunks if isinstance(c, llmrt.TextDelta)
                    )
                    assert isinstance(chunks[-1], llmrt.Finish)
                    assert isinstance(chunks[-1].reason, llmrt.FinishStop)
            nursery.cancel_scope.cancel()
    assert texts == {"gemini": "from gemini", "openai-responses": "from responses"}
