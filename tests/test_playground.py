"""The browser playground, driven in a real headless Chromium against real ``llmrt serve``.

The browser is the distribution's ``chromium``, driven through Selenium and the
distribution's ``chromium-driver``: Debian builds the two from one source
version, so they always match, and nothing is downloaded (Playwright's wheel
expects its own browser build). Every wait is an explicit, bounded wait on a
DOM condition; no test sleeps for a fixed time.

Console errors: every scenario collects the browser's console and asserts that
the page's scripts logged no error and threw nothing. A scenario that provokes
a refused or failed connection (wrong token, gateway stopped, foreign origin)
also gets the error lines Chromium itself writes for a failed network request
(source ``network``); only those, and only for the expected URLs, are allowed.
A scenario that itself tries a connection the page's policy forbids also gets
the browser's refusal of that one URL.

Other gateways than the page's own are `FakeGateway`s: loopback websocket
servers that record every handshake, and send what a test scripts.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import pathlib
import queue
import re
import shutil
import signal
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio
from _cli_process import cli_argv
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest, serve_websocket

import llmrt.actors.gateway
from llmrt.adapters.demo import DEMO_PACE_ENV
from llmrt.testing import SSEScript, Upstream, anthropic_events, serve_upstream

PAGE_DIR = pathlib.Path(llmrt.actors.gateway.__file__).parent / "playground"
REPO = pathlib.Path(__file__).resolve().parent.parent
SCREENSHOT = REPO / "docs" / "playground.png"
TOKEN = "tok_" + "Zx9" * 10
#: A second demo route, paced slowly enough to act on a call mid-stream.
CONFIG = '[[provider]]\nroute = "slow-demo"\nadapter = "demo"\ntokens_per_second = 20\n'
WAIT = 10.0


def _executable(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(
        f"none of {names} is installed: the browser tests need the distribution's "
        "chromium and chromium-driver packages (.ci/run installs them)"
    )


# ---- the gateway, as a real process ------------------------------------------------------


class Gateway:
    """One ``llmrt serve`` process on loopback; `start` again brings it back on the same port."""

    def __init__(
        self, tmp: pathlib.Path, *, token: str | None = None, config: str = "", paced: bool = False
    ) -> None:
        self.config = tmp / "llmrt.toml"
        self.config.write_text(CONFIG + config)
        self.env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        self.env.pop("LLMRT_GATEWAY_TOKEN", None)
        self.env.pop("LLMRT_CONFIG", None)
        if paced:  # the built-in demo at its own pace, for a page watched streaming
            self.env.pop(DEMO_PACE_ENV, None)
        self.env["PYTHONUNBUFFERED"] = "1"
        if token is not None:
            self.env["LLMRT_GATEWAY_TOKEN"] = token
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        argv = [*cli_argv(), "serve", "--port", str(self.port), "--config", str(self.config)]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"listening on ws://127\.0\.0\.1:(\d+)/", line)
        assert match, (line, self.proc.stderr.read() if self.proc.stderr else "")
        self.port = int(match.group(1))

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def get(
        self, path: str, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(self.http_url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=WAIT) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()


@contextlib.contextmanager
def running(
    tmp: pathlib.Path,
    *,
    token: str | None = None,
    config: str = "",
    env: dict[str, str] | None = None,
    paced: bool = False,
) -> Iterator[Gateway]:
    gateway = Gateway(tmp, token=token, config=config, paced=paced)
    gateway.env.update(env or {})
    gateway.start()
    try:
        yield gateway
    finally:
        gateway.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with running(tmp_path_factory.mktemp("gateway")) as gw:
        yield gw


@pytest.fixture(scope="module")
def token_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway that wants `TOKEN`, for the tests that only connect to it (each from a new tab)."""
    with running(tmp_path_factory.mktemp("token-gateway"), token=TOKEN) as gw:
        yield gw


# ---- a static server for the page (a foreign origin) ----------------------------------------


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def static_server(directory: pathlib.Path = PAGE_DIR) -> Iterator[str]:
    """Serve the playground's files (or ``directory``) from another origin than any gateway's."""
    handler = functools.partial(_Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def anthropic_upstream(
    text: tuple[str, ...] = ("Replayed ", "answer."), signature: str = "c2lnbmF0dXJl"
) -> Iterator[Upstream]:
    """A local Anthropic Messages upstream (thinking with a signature, then text), in a thread."""
    script = SSEScript(
        events=anthropic_events(text, thinking_chunks=["Thinking."], signature=signature)
    )
    started: queue.Queue[tuple[Upstream, trio.lowlevel.TrioToken, trio.CancelScope]] = queue.Queue()

    async def main() -> None:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                upstream = await nursery.start(functools.partial(serve_upstream, script))
                started.put((upstream, trio.lowlevel.current_trio_token(), scope))

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    upstream, token, scope = started.get(timeout=WAIT)
    try:
        yield upstream
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join(WAIT)


class FakeGateway:
    """A websocket server on loopback that records every handshake it receives.

    It accepts ``llmrt.v1`` and runs ``script(connection)`` (by default it
    only holds the connection open): a gateway that is not the page's own,
    and one that can send frames no real gateway sends.
    """

    def __init__(self, script: Callable[[WebSocketConnection], Awaitable[None]] | None) -> None:
        self.script = script
        self.handshakes: list[dict[str, str]] = []
        self.port = 0

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    async def handle(self, request: WebSocketRequest) -> None:
        # wsproto hands the websocket headers over parsed; put the offered
        # subprotocols back with the others.
        seen = {k.decode().lower(): v.decode() for k, v in request.headers}
        seen["sec-websocket-protocol"] = ", ".join(request.proposed_subprotocols)
        seen["path"] = request.path
        self.handshakes.append(seen)
        connection = await request.accept(subprotocol="llmrt.v1")
        with contextlib.suppress(ConnectionClosed):
            if self.script is not None:
                await self.script(connection)
            while True:
                await connection.get_message()


@contextlib.contextmanager
def fake_gateway(
    script: Callable[[WebSocketConnection], Awaitable[None]] | None = None,
) -> Iterator[FakeGateway]:
    fake = FakeGateway(script)
    started: queue.Queue[tuple[trio.lowlevel.TrioToken, trio.CancelScope]] = queue.Queue()

    async def main() -> None:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                server = await nursery.start(
                    functools.partial(serve_websocket, fake.handle, "127.0.0.1", 0, None)
                )
                fake.port = server.port
                started.put((trio.lowlevel.current_trio_token(), scope))

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    token, scope = started.get(timeout=WAIT)
    try:
        yield fake
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join(WAIT)


# ---- the browser -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def driver() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = _executable("chromium", "chromium-browser")
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=_executable("chromedriver"))
    drv = webdriver.Chrome(options=options, service=service)
    drv.set_page_load_timeout(WAIT)
    drv.set_script_timeout(WAIT)
    try:
        yield drv
    finally:
        drv.quit()


class Page:
    """One fresh tab (fresh ``sessionStorage``) on the playground, with its console."""

    def __init__(self, driver: WebDriver) -> None:
        self.d = driver
        self.console: list[dict[str, Any]] = []
        self.opened = False

    def open(self, url: str) -> None:
        if not self.opened:  # one fresh tab per test; later pages replace the first
            self.d.switch_to.new_window("tab")
            self.opened = True
        self.d.get(url)
        # Record every frame the page sends: the protocol as the browser spoke it.
        self.d.execute_script(
            "window.__sent = [];"
            "const send = WebSocket.prototype.send;"
            "WebSocket.prototype.send = function (data) {"
            "  window.__sent.push(JSON.parse(data)); return send.call(this, data); };"
        )

    def wait(self, what: Callable[[], Any], timeout: float = WAIT, message: str = "") -> Any:
        # An element the page replaced while ``what`` read it (the provider list
        # rebuilt on providers-changed) is read again at the next poll.
        return WebDriverWait(
            self.d,
            timeout,
            poll_frequency=0.05,
            ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
        ).until(lambda _: what(), message=message)

    def js(self, script: str, *args: Any) -> Any:
        return self.d.execute_script(script, *args)

    def text(self, testid: str) -> str:
        found = self.js(
            "const el = document.querySelector(`[data-testid='${arguments[0]}']`);"
            "return el === null ? null : el.textContent;",
            testid,
        )
        return "" if found is None else str(found)

    def el(self, testid: str) -> Any:
        return self.d.find_element(By.CSS_SELECTOR, f"[data-testid='{testid}']")

    def option_values(self, testid: str) -> list[str]:
        """The values of a select's options, read in one script (the page may rebuild them)."""
        found = self.js(
            "const el = document.querySelector(`[data-testid='${arguments[0]}']`);"
            "return el === null ? [] : Array.from(el.options, (o) => o.value);",
            testid,
        )
        return [str(value) for value in found]

    def wait_text(self, testid: str, needle: str, timeout: float = WAIT) -> str:
        self.wait(
            lambda: needle in self.text(testid),
            timeout,
            f"{testid!r} never showed {needle!r} (it shows {self.text(testid)!r}; "
            f"error: {self.text('error')!r}; note: {self.text('connection-note')!r})",
        )
        return self.text(testid)

    def wait_open(self) -> None:
        self.wait_text("status", "open")
        # The provider list arrived and ``demo`` (the default choice) is selected.
        self.wait(lambda: self.el("send").is_enabled(), message="send never enabled")

    def choose(self, testid: str, value: str) -> None:
        self.wait(
            lambda: value in [o.get_attribute("value") for o in Select(self.el(testid)).options],
            message=f"{testid} never offered {value!r}",
        )
        Select(self.el(testid)).select_by_value(value)

    def fill(self, testid: str, value: str) -> None:
        field = self.el(testid)
        field.clear()
        field.send_keys(value)

    def send(self, prompt: str) -> None:
        self.fill("prompt", prompt)
        self.el("send").click()

    def sent(self, type: str) -> list[dict[str, Any]]:
        frames = self.js("return window.__sent;") or []
        return [f for f in frames if f.get("type") == type]

    def collect_console(self) -> list[dict[str, Any]]:
        self.console += self.d.get_log("browser")
        return self.console

    def close(self) -> None:
        if not self.opened:
            return
        # Leave the page first: its timers and sockets stop, so nothing it does
        # later can reach the next test's console.
        self.d.get("about:blank")
        self.collect_console()
        self.d.close()
        self.d.switch_to.window(self.d.window_handles[0])


def assert_no_console_errors(
    page: Page, allowed_network: tuple[str, ...] = (), refused_by_policy: tuple[str, ...] = ()
) -> None:
    """No error or warning from the page; failed requests only to the ``allowed`` URLs.

    ``refused_by_policy``: URLs the test itself tried to reach against the
    page's Content-Security-Policy; the browser's refusals of those are allowed.
    """
    bad = []
    for entry in page.collect_console():
        if entry["level"] not in ("SEVERE", "WARNING"):
            continue
        if entry.get("source") == "network" and any(u in entry["message"] for u in allowed_network):
            continue
        if "Content Security Policy" in entry["message"] and any(
            u.rstrip("/") in entry["message"] for u in refused_by_policy
        ):
            continue
        bad.append(entry)
    assert bad == []


@pytest.fixture
def page(driver: WebDriver) -> Iterator[Page]:
    driver.get_log("browser")  # drop what an earlier test left
    p = Page(driver)
    try:
        yield p
    finally:
        p.close()


def in_flight(gateway: Gateway) -> float:
    """The gateway's own count of calls in flight, from its metrics."""
    status, _, body = gateway.get("metrics")
    assert status == 200
    text = body.decode()
    values = re.findall(r"^llmrt_calls_in_flight(?:\{[^}]*\})? (\S+)$", text, re.MULTILINE)
    assert values, text
    return sum(float(v) for v in values)


def page_url(gateway: Gateway) -> str:
    """The playground as the gateway serves it: on its own port, at ``/``."""
    return gateway.http_url


# ---- scenarios -------------------------------------------------------------------------------


@pytest.fixture
def paced_gateway(tmp_path: pathlib.Path) -> Iterator[Gateway]:
    """A gateway whose built-in demo keeps its 60 tokens a second (the suite unpaces it)."""
    with running(tmp_path, paced=True) as gw:
        yield gw


def test_streams_reasoning_text_and_usage(paced_gateway: Gateway, page: Page) -> None:
    gateway = paced_gateway
    page.open(page_url(gateway))
    page.wait_open()
    assert Select(page.el("provider")).first_selected_option.get_attribute("value") == "demo"
    page.choose("model", "demo-1")
    page.choose("effort", "high")  # the model's efforts, from resolve-model
    page.fill("system", "Be brief")
    page.fill("max-tokens", "200")
    page.fill("temperature", "0.5")
    # Count the distinct states the output goes through: it streams, not lands.
    page.js(
        "window.__lengths = new Set();"
        "new MutationObserver(() => {"
        "  const el = document.querySelector(\"[data-testid='output']\");"
        "  if (el) window.__lengths.add(el.textContent.length);"
        "}).observe(document.body, {subtree: true, childList: true, characterData: true});"
    )
    page.send("hello playground")
    assert page.wait_text("finish", "finish: stop") == "finish: stop"
    assert page.text("output").startswith('You said: "hello playground". This answer comes')
    reasoning = page.text("reasoning")
    assert reasoning.startswith("The user wrote 2 words.") and "No facts need checking" in reasoning
    # Input counts the system prompt's words too (demo counts words as tokens).
    assert page.text("usage") == "usage: input 4, output 39, reasoning 24"
    assert re.fullmatch(r"first chunk \d+(\.\d)? ms", page.text("first-chunk"))
    assert re.fullmatch(r"total \d+(\.\d)? ms", page.text("total-time"))
    # At 60 tokens per second the text arrives over several frames, even when
    # a loaded gateway batches some chunks into one ``chunks`` frame.
    lengths = page.js("return [...window.__lengths];")
    assert len(lengths) >= 3, lengths
    assert page.text("error") == "" and page.text("abort-latency") == ""
    (call,) = page.sent("call")
    request = call["request"]
    assert request["provider"] == "demo" and request["model"] == "demo-1"
    assert request["system"] == "Be brief" and request["reasoningEffort"] == "high"
    assert request["maxTokens"] == 200 and request["temperature"] == 0.5
    assert request["messages"][0]["content"] == [{"type": "text", "text": "hello playground"}]
    assert_no_console_errors(page)


def test_abort_mid_stream(gateway: Gateway, page: Page) -> None:
    page.open(page_url(gateway))
    page.wait_open()
    screenshot = os.environ.get("LLMRT_UPDATE_SCREENSHOT") == "1"
    if screenshot:  # a tool call answered with a result, above a call streaming
        page.fill("system", "Answer in one sentence.")
        page.el("tools-on").click()
        page.send("What is the weather in Lisbon?")
        page.wait_text("finish", "finish: tool-calls")
        editor = page.d.find_element(By.CSS_SELECTOR, "[data-testid='tool-results'] textarea")
        editor.clear()
        editor.send_keys('{"city": "Lisbon", "temperature_c": 21, "sky": "clear"}')
        page.el("send-tool-result").click()
        page.wait(lambda: page.text("total-time") != "", message="no answer to the tool result")
        page.el("tools-on").click()
        page.el("new-chat").click()
    page.choose("provider", "slow-demo")
    page.choose("model", "demo-1")
    # The demo echoes the prompt, so a long one keeps the call streaming for
    # seconds after the first 30 characters: room for the driver's round trips
    # before the abort on a loaded machine.
    page.send(
        "Tell me about trio, structured concurrency and llmrt: how nurseries, cancel"
        " scopes and memory channels keep thousands of streaming model calls in order,"
        " and how one abort ends exactly one of them"
    )
    page.wait(lambda: len(page.text("output")) > 30, message="no text streamed")
    if screenshot:
        SCREENSHOT.write_bytes(page.d.get_screenshot_as_png())
    assert page.text("finish") == ""
    assert page.text("call-state") == "streaming"
    page.el("abort").click()
    assert page.wait_text("finish", "finish: aborted") == "finish: aborted ABORTED"
    latency = page.wait_text("abort-latency", "ms")
    assert re.fullmatch(r"abort took \d+(\.\d)? ms", latency)
    assert "This answer comes from llmrt's demo model, streamed token by token." not in (
        page.text("output")
    )
    assert not page.el("abort").is_enabled()
    assert page.sent("abort") == [{"type": "abort", "id": page.sent("call")[-1]["id"]}]
    page.wait(lambda: in_flight(gateway) == 0, message="a call is still in flight")
    assert_no_console_errors(page)


def test_tool_call_is_rendered(gateway: Gateway, page: Page) -> None:
    page.open(page_url(gateway))
    page.wait_open()
    page.el("tools-on").click()
    page.send("weather in Paris")
    assert page.wait_text("finish", "finish: tool-calls") == "finish: tool-calls"
    tools = page.text("tool-calls")
    assert tools.startswith("tool call get_weather (call_demo_1)")
    # The arguments, pretty-printed, shaped from the schema (the demo fills `city`).
    assert tools.endswith('{\n  "city": "weather in Paris"\n}')
    (call,) = page.sent("call")
    assert call["request"]["tools"][0]["name"] == "get_weather"
    assert_no_console_errors(page)


def test_continues_a_conversation(gateway: Gateway, page: Page) -> None:
    page.open(page_url(gateway))
    page.wait_open()
    page.send("first question")
    page.wait_text("finish", "finish: stop")
    first_text = page.text("output")
    page.el("continue").click()
    assert page.text("history") == "continuing: 2 messages of history"
    page.send("second question")
    page.wait(lambda: len(page.sent("call")) == 2)
    page.wait_text("finish", "finish: stop")
    assert page.text("output").startswith('You said: "second question".')
    first, second = (f["request"]["messages"] for f in page.sent("call"))
    assert len(first) == 1 and len(second) == 3
    assert second[0] == first[0]
    assistant = second[1]
    assert assistant["role"] == "assistant"
    assert assistant["source"] == {"kind": "model", "provider": "demo", "model": "demo-1"}
    assert [b["type"] for b in assistant["content"]] == ["reasoning", "text"]
    assert assistant["content"][1]["text"] == first_text
    assert second[2]["content"] == [{"type": "text", "text": "second question"}]
    # The demo counts every text block of the history as input.
    assert page.text("usage").startswith(f"usage: input {2 + len(first_text.split()) + 2},")
    page.el("new-chat").click()
    assert page.text("history") == "new conversation"
    assert_no_console_errors(page)


def test_three_concurrent_calls(gateway: Gateway, page: Page) -> None:
    page.open(page_url(gateway))
    page.wait_open()
    page.choose("provider", "slow-demo")
    page.choose("model", "demo-1")
    panels = "document.querySelectorAll('article.call')"
    # The page itself keeps the most calls it ever showed streaming at once, so
    # no poll can miss the overlap; the three sends go in one script, so the
    # driver's round trips cannot spread them past the first call's finish.
    page.js(
        "window.__most = 0;"
        "new MutationObserver(() => { window.__most = Math.max(window.__most,"
        f"  [...{panels}].filter(a => a.dataset.state === 'streaming').length); }})"
        ".observe(document.body,"
        "  {subtree: true, attributes: true, attributeFilter: ['data-state']});"
        "for (const prompt of arguments[0]) {"
        "  document.getElementById('prompt').value = prompt;"
        "  document.querySelector(\"[data-testid='send']\").click(); }",
        ["one", "two", "three"],
    )
    page.wait(
        lambda: page.js("return window.__most;") == 3,
        message="the three calls never streamed at the same time",
    )
    page.wait(
        lambda: page.js(f"return [...{panels}].every(a => a.dataset.state === 'stop')"),
        timeout=15,
        message="not every call finished",
    )
    outputs = page.js(f"return [...{panels}].map(a => a.querySelector('.output').textContent)")
    assert [o.split(".")[0] for o in outputs] == [
        'You said: "three"',
        'You said: "two"',
        'You said: "one"',
    ]
    assert len({f["id"] for f in page.sent("call")}) == 3
    assert_no_console_errors(page)


def test_the_usage_line_shows_the_price(tmp_path: pathlib.Path, page: Page) -> None:
    priced = '[[price]]\nprovider = "demo"\nmodel = "demo-1"\ninput_mtok = 1.5\noutput_mtok = 2.0\n'
    with running(tmp_path, config=priced) as gw:
        page.open(page_url(gw))
        page.wait_open()
        page.choose("model", "demo-1")
        page.send("hello playground")
        page.wait_text("finish", "finish: stop")
        usage = page.text("usage")
        found = re.fullmatch(
            r"usage: input (\d+), output (\d+), reasoning \d+ \| \$(\d+\.\d{6})", usage
        )
        assert found is not None, usage
        spent_in, spent_out = int(found[1]), int(found[2])
        assert found[3] == f"{(spent_in * 1.5 + spent_out * 2.0) / 1e6:.6f}"
        assert_no_console_errors(page)


def test_token_wrong_then_right(token_gateway: Gateway, page: Page) -> None:
    gw = token_gateway
    page.open(page_url(gw))
    # No token: refused, and said so.
    assert page.wait_text("error", "AUTH: ").startswith("AUTH: ")
    assert page.text("status").startswith("closed")
    page.fill("token", "wrong-token")
    page.el("reconnect").click()
    page.wait_text("error", "the token is wrong")
    assert page.text("status").startswith("closed")
    page.fill("token", TOKEN)
    page.el("reconnect").click()
    page.wait_open()
    assert page.text("error") == ""
    page.send("with a token")
    page.wait_text("finish", "finish: stop")
    # The token is kept for this tab only, for this gateway's origin only,
    # and never put in the URL.
    key = f"llmrt.playground.token:ws://127.0.0.1:{gw.port}"
    assert page.js("return sessionStorage.getItem(arguments[0])", key) == TOKEN
    assert page.js("return Object.keys(sessionStorage)") == [key]
    assert page.js("return localStorage.length") == 0
    assert TOKEN not in page.d.current_url
    assert_no_console_errors(page, allowed_network=(gw.ws_url,))


def test_gateway_stopped_then_back(tmp_path: pathlib.Path, page: Page) -> None:
    with running(tmp_path) as gw:
        page.open(page_url(gw))
        page.wait_open()
        gw.stop()
        assert page.wait_text("status", "closed") == "closed 1001 the gateway is shutting down"
        assert not page.el("send").is_enabled()
        gw.start()  # the same port
        page.wait_open()  # the page reconnected by itself
        page.send("back again")
        page.wait_text("finish", "finish: stop")
        assert_no_console_errors(page, allowed_network=(gw.ws_url, gw.http_url))


def test_the_provider_list_follows_a_reload(tmp_path: pathlib.Path, page: Page) -> None:
    with running(tmp_path) as gw:
        page.open(page_url(gw))
        page.wait_open()
        page.choose("provider", "slow-demo")
        assert gw.proc is not None
        gw.config.write_text(CONFIG + '[[provider]]\nroute = "added-demo"\nadapter = "demo"\n')
        gw.proc.send_signal(signal.SIGHUP)  # the gateway sends providers-changed
        page.wait(
            lambda: "added-demo" in page.option_values("provider"),
            message="the new route never appeared in the list",
        )
        # The list was asked again, and the choice made before survived it.
        assert len(page.sent("list-providers")) >= 1
        chosen = page.d.execute_script(
            "return document.querySelector(\"[data-testid='provider']\").value"
        )
        assert chosen == "slow-demo"
        gw.config.write_text(CONFIG)
        gw.proc.send_signal(signal.SIGHUP)
        page.wait(
            lambda: "added-demo" not in page.option_values("provider"),
            message="the removed route stayed in the list",
        )
        assert_no_console_errors(page)


def test_a_foreign_origin_cannot_connect(gateway: Gateway, page: Page) -> None:
    with static_server() as foreign:
        page.open(f"{foreign}index.html?gateway={gateway.ws_url}")
        # The URL only fills in the field; the person presses Connect.
        page.wait_text("status", "not connected")
        assert page.el("gateway-url").get_attribute("value") == gateway.ws_url
        page.el("reconnect").click()
        page.wait_text("error", "HANDSHAKE_FAILED")
        assert page.text("status").startswith("closed")
        page.wait_text("status", "closed")
        assert "open" not in page.text("status")
        assert Select(page.el("provider")).options == []
        assert not page.el("send").is_enabled()
        assert_no_console_errors(page, allowed_network=(gateway.ws_url,))
    # The same page, served by the gateway itself, connects.
    page.open(page_url(gateway))
    page.wait_open()


def test_the_page_is_one_small_offline_file(gateway: Gateway) -> None:
    status, headers, body = gateway.get("")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert body == (PAGE_DIR / "index.html").read_bytes()
    assert len(body) < 40 * 1024
    # Nothing is fetched from another host: no absolute URL, and the gateway's
    # policy (default-src 'none', same origin only) would block one anyway.
    assert re.search(rb"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", body) is None
    assert b"default-src 'none'" in headers["Content-Security-Policy"].encode()
    # No inline event handler attributes (the policy would not run them).
    assert re.search(rb"\son[a-z]+\s*=", body) is None


def test_a_refused_call_shows_its_code_and_message(gateway: Gateway, page: Page) -> None:
    page.open(page_url(gateway))
    page.wait_open()
    page.fill("max-tokens", "0")  # the gateway, not the page, judges the request
    page.send("too small")
    error = page.wait_text("error", "INVALID_REQUEST")
    assert error.startswith("INVALID_REQUEST: invalid request: ") and "$.request.maxTokens" in error
    assert page.text("finish") == "error INVALID_REQUEST"
    assert page.text("call-state") == "error"
    assert not page.el("abort").is_enabled()
    assert_no_console_errors(page)


def test_continuing_sends_the_replay_state_back(tmp_path: pathlib.Path, page: Page) -> None:
    with anthropic_upstream() as upstream:
        route = (
            '[[provider]]\nroute = "claude"\nadapter = "anthropic"\n'
            f'base_url = "{upstream.base_url}"\napi_key_env = "PLAYGROUND_UPSTREAM_KEY"\n'
        )
        env = {"PLAYGROUND_UPSTREAM_KEY": "sk-playground-test"}
        with running(tmp_path, config=route, env=env) as gw:
            page.open(page_url(gw))
            page.wait_open()
            page.choose("provider", "claude")
            page.wait(lambda: page.el("send").is_enabled(), message="no claude model")
            page.send("first")
            page.wait_text("finish", "finish: stop")
            assert page.text("output") == "Replayed answer."
            assert page.text("reasoning") == "Thinking."
            page.el("continue").click()
            page.send("second")
            page.wait(lambda: len(page.sent("call")) == 2)
            page.wait_text("call-state", "stop")
            assistant = page.sent("call")[1]["request"]["messages"][1]
            source = assistant["source"]
            assert source["kind"] == "model" and source["provider"] == "claude"
            # The adapter's replay state (the thinking signature among it), sent back as is.
            assert "c2lnbmF0dXJl" in json.dumps(source["replayState"])
            assert [b["type"] for b in assistant["content"]] == ["reasoning", "text"]
            assert_no_console_errors(page)
        # The upstream saw the replayed thinking block, signature included.
        assert b"c2lnbmF0dXJl" in upstream.requests[-1].body


# ---- the gateway the page talks to, and its token (hostile review 2, finding 1) -----------


def connect_src(headers: dict[str, str]) -> str:
    policy = dict(
        part.strip().split(" ", 1) for part in headers["Content-Security-Policy"].split(";")
    )
    return policy["connect-src"]


def test_a_gateway_named_in_the_url_gets_no_handshake_and_no_token(
    tmp_path: pathlib.Path, token_gateway: Gateway, page: Page
) -> None:
    gw = token_gateway
    with fake_gateway() as other:
        lure = gw.http_url + "?gateway=" + urllib.parse.quote(other.ws_url, safe="")
        # The operator connects with the gateway's token: it is kept in the tab.
        page.open(page_url(gw))
        page.wait_text("error", "AUTH: ")
        page.fill("token", TOKEN)
        page.el("reconnect").click()
        page.wait_open()
        # Later, a page elsewhere (another port on this machine) sends the tab
        # back to the playground, naming its own server as the gateway.
        attacker = tmp_path / "attacker"
        attacker.mkdir()
        (attacker / "go.html").write_text(f"<script>location.replace({json.dumps(lure)})</script>")
        with static_server(attacker) as elsewhere:
            page.d.get(elsewhere + "go.html")
            page.wait(lambda: page.d.current_url == lure, message="the lure never loaded")
        page.wait_text("status", "not connected")
        assert page.text("connection-note") == "press Connect to connect to this gateway"
        # The URL filled in the field; the token kept for the own origin is not shown for it.
        assert page.el("gateway-url").get_attribute("value") == other.ws_url
        assert page.el("token").get_attribute("value") == ""
        # Even a script on the page could not reach it: the policy names the own origin only.
        refused = page.d.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "document.addEventListener('securitypolicyviolation',"
            "  (e) => done([e.effectiveDirective, e.blockedURI]), {once: true});"
            "try { new WebSocket(arguments[0]); } catch (err) { /* refused at once */ }",
            other.ws_url,
        )
        assert refused[0] == "connect-src" and refused[1].startswith(other.ws_url.rstrip("/"))
        assert other.handshakes == []
        # The header, as served for that URL: without the browser's word that the
        # playground itself asked (Sec-Fetch-Site: same-origin), only 'self'.
        query = lure.removeprefix(gw.http_url)
        for site in (None, "none", "same-site", "cross-site"):
            headers = {} if site is None else {"Sec-Fetch-Site": site}
            assert connect_src(gw.get(query, headers)[1]) == "'self'", site
        chosen = connect_src(gw.get(query, {"Sec-Fetch-Site": "same-origin"})[1])
        assert chosen == f"'self' ws://127.0.0.1:{other.port}"

        # The person chooses that gateway: the page loads itself for it and
        # connects, offering no token (none was given for that origin).
        page.el("reconnect").click()
        page.wait_text("status", "open")
        page.wait(lambda: len(other.handshakes) == 1, message="no handshake at the chosen gateway")
        (handshake,) = other.handshakes
        assert handshake["sec-websocket-protocol"] == "llmrt.v1"
        assert handshake["origin"] == gw.http_url.rstrip("/")
        assert not any(TOKEN in value for value in handshake.values())
        # Back to the own gateway: its token comes back with its origin, and is used.
        page.fill("gateway-url", gw.ws_url)
        assert page.el("token").get_attribute("value") == TOKEN
        page.el("reconnect").click()
        page.wait_open()
        page.send("with a token again")
        page.wait_text("finish", "finish: stop")
        assert page.js("return Object.keys(sessionStorage)") == [
            f"llmrt.playground.token:ws://127.0.0.1:{gw.port}"
        ]
        assert len(other.handshakes) == 1
        assert_no_console_errors(
            page, allowed_network=(gw.ws_url,), refused_by_policy=(other.ws_url,)
        )


# ---- frames in parts (hostile review 2, finding 10) ------------------------------------------


def test_a_finish_and_a_block_end_sent_in_parts_are_shown(
    tmp_path: pathlib.Path, page: Page
) -> None:
    # 4096 bytes is the smallest frame limit: the text block's block-end and the
    # finish (whose replay state holds the signature) cannot go in one message.
    text = ("A" * 3000, "B" * 3000)
    signature = "c2ln" * 1500
    with anthropic_upstream(text, signature) as upstream:
        config = (
            '[[provider]]\nroute = "claude"\nadapter = "anthropic"\n'
            f'base_url = "{upstream.base_url}"\napi_key_env = "PLAYGROUND_UPSTREAM_KEY"\n'
            "[gateway]\nmax_frame_bytes = 4096\n"
        )
        env = {"PLAYGROUND_UPSTREAM_KEY": "sk-playground-test"}
        with running(tmp_path, config=config, env=env) as gw:
            page.open(page_url(gw))
            page.wait_open()
            page.choose("provider", "claude")
            page.wait(lambda: page.el("send").is_enabled(), message="no claude model")
            page.send("a long answer")
            assert page.wait_text("finish", "finish: stop") == "finish: stop"
            assert page.text("call-state") == "stop"
            assert page.text("output") == "".join(text)
            assert page.text("usage").startswith("usage: input 12,")
            # What the parts carried, as the conversation now holds it.
            answer = page.js("return history[history.length - 1]")
            assert [b["type"] for b in answer["content"]] == ["reasoning", "text"]
            assert answer["content"][1]["text"] == "".join(text)
            assert signature in json.dumps(answer["source"]["replayState"])
            assert not page.el("abort").is_enabled()
            assert_no_console_errors(page)


def _parts_of_many_frames(count: int) -> Callable[[WebSocketConnection], Awaitable[None]]:
    async def script(connection: WebSocketConnection) -> None:
        await connection.send_message(json.dumps({"type": "hello", "protocol": "llmrt.v1"}))
        for n in range(count):
            await connection.send_message(
                json.dumps({"type": "part", "id": f"p{n}", "data": "{", "more": True})
            )

    return script


def _parts_of_one_huge_frame(mebibytes: int) -> Callable[[WebSocketConnection], Awaitable[None]]:
    async def script(connection: WebSocketConnection) -> None:
        await connection.send_message(json.dumps({"type": "hello", "protocol": "llmrt.v1"}))
        slice_ = "x" * (1 << 20)
        for _ in range(mebibytes):
            await connection.send_message(
                json.dumps({"type": "part", "id": "big", "data": slice_, "more": True})
            )

    return script


@pytest.mark.parametrize(
    ("script", "code"),
    [
        (
            _parts_of_many_frames(33),
            "TOO_MANY_PARTS: the gateway sent parts of more than 32 frames",
        ),
        (
            _parts_of_one_huge_frame(33),
            "PARTS_TOO_LARGE: frames sent in parts hold more than 32 MiB",
        ),
    ],
    ids=["frames", "bytes"],
)
def test_parts_are_bounded(
    gateway: Gateway,
    page: Page,
    script: Callable[[WebSocketConnection], Awaitable[None]],
    code: str,
) -> None:
    with fake_gateway(script) as other:
        page.open(page_url(gateway))
        page.wait_open()
        page.fill("gateway-url", other.ws_url)
        page.el("reconnect").click()  # the person chooses it: the page loads itself for it
        page.wait_text("error", code)
        assert page.text("status") == "closed (" + code.split(":")[0] + ")"
        # The page closed the connection itself and does not reconnect on its own.
        page.wait(lambda: page.js("return ws === null && retryTimer === null"))
        assert len(other.handshakes) == 1
        assert_no_console_errors(page)


# ---- a chat (new user's first hour, item 8) --------------------------------------------------


def test_an_empty_conversation_shows_a_hint(gateway: Gateway, page: Page) -> None:
    page.open(page_url(gateway))
    page.wait_open()
    hint = page.el("empty-hint")
    assert hint.is_displayed()
    assert "press Send" in hint.text and "Offer tools" in hint.text
    page.send("hello")
    page.wait(lambda: not hint.is_displayed(), message="the hint stayed")
    page.wait_text("finish", "finish: stop")
    assert_no_console_errors(page)


def test_the_prompt_is_cleared_and_the_next_message_continues(gateway: Gateway, page: Page) -> None:
    page.open(page_url(gateway))
    page.wait_open()
    page.send("first question")
    page.wait(lambda: page.el("prompt").get_attribute("value") == "", message="prompt kept")
    assert page.text("turn") == "youfirst question"
    page.wait_text("finish", "finish: stop")
    assert page.text("history") == "continuing: 2 messages of history"
    page.el("prompt").send_keys("second question")  # typed into the emptied field
    page.el("send").click()
    page.wait(lambda: len(page.sent("call")) == 2)
    page.wait_text("finish", "finish: stop")
    first, second = (f["request"]["messages"] for f in page.sent("call"))
    assert second[0] == first[0]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[2]["content"] == [{"type": "text", "text": "second question"}]
    assert page.el("prompt").get_attribute("value") == ""
    assert_no_console_errors(page)


def test_a_tool_call_is_answered_with_a_tool_result(gateway: Gateway, page: Page) -> None:
    page.open(page_url(gateway))
    page.wait_open()
    page.el("tools-on").click()
    page.send("weather in Paris")
    page.wait_text("finish", "finish: tool-calls")
    (call,) = page.sent("call")
    # A plain message now would follow an unanswered tool call: refused, and kept.
    page.send("never mind the tool")
    page.wait_text("error", "TOOL_RESULT_NEEDED")
    assert len(page.sent("call")) == 1
    assert page.el("prompt").get_attribute("value") == "never mind the tool"
    editor = page.d.find_element(By.CSS_SELECTOR, "[data-testid='tool-results'] textarea")
    assert json.loads(editor.get_attribute("value")) is not None  # an editable JSON starting point
    editor.clear()
    editor.send_keys("{not json")
    page.el("send-tool-result").click()
    page.wait_text("error", "BAD_TOOL_RESULT")
    assert len(page.sent("call")) == 1
    editor.clear()
    editor.send_keys('{"temperature_c": 18, "sky": "clear"}')
    page.el("send-tool-result").click()
    page.wait(lambda: len(page.sent("call")) == 2, message="the tool result was not sent")
    # The second assistant turn: it streams and finishes (whatever the demo answers).
    panels = "document.querySelectorAll('article.call')"
    page.wait(
        lambda: (
            page.js(f"return {panels}[0].dataset.state") in ("stop", "tool-calls", "max-tokens")
        ),
        message="the answer to the tool result never finished",
    )
    assert page.js(f"return {panels}.length") == 2
    assert page.text("turn").startswith("tool result")
    first, second = (f["request"] for f in page.sent("call"))
    assert second["provider"] == first["provider"] and second["tools"] == first["tools"]
    sent_user, assistant, result = second["messages"]
    assert sent_user == first["messages"][0]
    assert assistant["role"] == "assistant"
    (tool_call,) = [b for b in assistant["content"] if b["type"] == "tool-call"]
    assert tool_call["name"] == "get_weather"
    assert result == {
        "id": result["id"],
        "role": "user",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": tool_call["id"],
                "content": [{"type": "text", "text": '{"temperature_c": 18, "sky": "clear"}'}],
            }
        ],
        "source": {"kind": "tool", "tool": "get_weather"},
    }
    assert call["request"]["messages"] == [sent_user]
    # Sent once: the editor and its button are done.
    sent = page.js(f"return {panels}[1].querySelector('.answer-tools')")
    assert not sent.is_enabled() and sent.text == "tool result sent"
    assert_no_console_errors(page)


FIT = """
const el = arguments[0];
const style = getComputedStyle(el);
const ctx = document.createElement('canvas').getContext('2d');
ctx.font = style.font;
const text = el.tagName === 'SELECT' ? el.options[el.selectedIndex].text
  : (el.value || el.placeholder || el.textContent);
const room = el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)
  - (el.tagName === 'SELECT' ? 20 : 0);  // the select's arrow
const width = ctx.measureText(text).width;
const box = el.getBoundingClientRect();
return {text, width, room,
        fits: width <= room + 1,  // clientWidth is whole pixels, text widths are not
        inside: box.left >= 0 && box.right <= document.documentElement.clientWidth};
"""


@pytest.mark.parametrize("width", [1280, 420])
def test_controls_are_not_cut_off(gateway: Gateway, page: Page, width: int) -> None:
    page.d.set_window_size(width, 900)
    try:
        page.open(page_url(gateway))
        page.wait_open()
        page.choose("provider", "slow-demo")  # the longest label
        page.wait(lambda: page.el("send").is_enabled())
        for testid in ("provider", "model", "effort", "token", "gateway-url", "reconnect", "send"):
            fit = page.js(FIT, page.el(testid))
            assert fit["fits"] and fit["inside"], (testid, fit)
        assert page.js("return document.documentElement.scrollWidth") <= width
    finally:
        page.d.set_window_size(1280, 900)
    assert_no_console_errors(page)
