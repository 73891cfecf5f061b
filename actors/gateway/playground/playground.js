// The llmrt playground: a client of the gateway's websocket protocol llmrt.v1
// (docs/protocol.md), nothing else. Plain JavaScript, no dependencies.
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "llmrt.playground.token";
// The newest call's elements carry these data-testid hooks (moved on each send).
const NEWEST_HOOKS = {
  ".output": "output", ".reasoning-text": "reasoning", ".tool-calls": "tool-calls",
  ".usage": "usage", ".finish": "finish", ".abort-latency": "abort-latency",
  ".first": "first-chunk", ".total": "total-time", ".continue": "continue",
  ".state": "call-state",
};
const RETRY_MAX_MS = 4000;

let ws = null;
let opened = false;          // the current socket reached "open"
let retryMs = 500;           // next automatic reconnect delay
let retryTimer = null;
let seq = 0;                 // request ids: c1, c2, ... (calls), m1, m2, ... (metadata)
const meta = new Map();      // metadata request id -> function(frame)
const calls = new Map();     // call id -> Call (live calls only)
let newest = null;           // the newest Call
let history = [];            // messages sent before the next prompt

// ---- small helpers ----------------------------------------------------------------------

function hex(bytes) {
  const a = new Uint8Array(bytes);
  crypto.getRandomValues(a);  // available without a secure context, unlike randomUUID
  return Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
}

function ms(value) {
  return value < 10 ? value.toFixed(1) + " ms" : Math.round(value) + " ms";
}

function showError(code, message) {
  const el = $("error");
  el.textContent = code + ": " + message;
  el.classList.add("shown");
}

function clearError() {
  const el = $("error");
  el.textContent = "";
  el.classList.remove("shown");
}

function setStatus(text, kind) {
  const el = $("status");
  el.textContent = text;
  el.dataset.state = kind;
}

function defaultUrl() {
  const param = new URLSearchParams(location.search).get("gateway");
  if (param) return param;
  if (location.protocol === "http:" || location.protocol === "https:") {
    return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/";
  }
  return "ws://127.0.0.1:8765/";
}

function send(frame) {
  if (!ws || ws.readyState !== WebSocket.OPEN) return false;
  ws.send(JSON.stringify(frame));
  return true;
}

function request(frame, onReply) {
  frame.id = "m" + ++seq;
  meta.set(frame.id, onReply);
  send(frame);
}

// ---- the connection ---------------------------------------------------------------------

function connect() {
  clearTimeout(retryTimer);
  retryTimer = null;
  $("retry-note").textContent = "";
  if (ws) {
    ws.onclose = ws.onmessage = ws.onopen = null;
    ws.close(1000, "reconnecting");
    connectionLost("the connection was replaced");
  }
  const token = $("token").value.trim();
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
  // Browsers cannot set headers on a websocket: the token travels as a subprotocol,
  // offered next to llmrt.v1, which the gateway answers with.
  const protocols = token ? ["llmrt.bearer." + token, "llmrt.v1"] : ["llmrt.v1"];
  opened = false;
  setStatus("connecting", "connecting");
  let socket;
  try {
    socket = new WebSocket($("url").value.trim(), protocols);
  } catch (err) {
    // A malformed URL, or a token that is no HTTP token (spaces, commas...).
    setStatus("closed (not started)", "closed");
    showError(token ? "BAD_TOKEN_OR_URL" : "BAD_URL", err.message);
    return;
  }
  ws = socket;
  socket.onopen = () => {
    opened = true;
    retryMs = 500;
    setStatus("open", "open");
    clearError();
  };
  socket.onmessage = (ev) => {
    let frame;
    try {
      frame = JSON.parse(ev.data);
    } catch (err) {
      showError("BAD_SERVER_FRAME", err.message);
      return;
    }
    onFrame(frame);
  };
  socket.onclose = (ev) => onClose(socket, ev);
}

function onClose(socket, ev) {
  if (socket !== ws) return;
  ws = null;
  setStatus("closed " + ev.code + (ev.reason ? " " + ev.reason : ""), "closed");
  updateControls();
  connectionLost("the connection closed before the call finished");
  if (opened) {
    retryMs = 500;
    scheduleRetry();
    return;
  }
  // The handshake failed, and browsers do not tell why (no HTTP status).
  if (!sameOriginGateway()) {
    showError("HANDSHAKE_FAILED", "no websocket to " + socket.url + ": the gateway is down, " +
      "or it refused this page's origin or token");
    scheduleRetry();
    return;
  }
  // Ask the gateway's HTTP side whether it is up: if it is, it refused this
  // handshake (a missing or wrong token) and retrying cannot help.
  fetch("/healthz", { cache: "no-store" }).then(
    (response) => {
      if (socket !== ws && ws !== null) return;
      if (response.ok) {
        showError("AUTH", $("token").value.trim()
          ? "the gateway refused the handshake: the token is wrong"
          : "the gateway refused the handshake: it requires a token");
      } else {
        scheduleRetry();
      }
    },
    () => { if (ws === null) scheduleRetry(); },
  );
}

function sameOriginGateway() {
  try {
    return new URL($("url").value.trim()).host === location.host;
  } catch (err) {
    return false;
  }
}

function scheduleRetry() {
  const wait = retryMs;
  retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
  $("retry-note").textContent = "reconnecting in " + (wait / 1000).toFixed(1) + " s";
  retryTimer = setTimeout(connect, wait);
}

function connectionLost(why) {
  meta.clear();
  for (const call of calls.values()) call.fail("CONNECTION_CLOSED", why);
  calls.clear();
}

function onFrame(frame) {
  switch (frame.type) {
    case "hello":
      $("status").title = "protocol " + frame.protocol + ", server " + frame.server;
      request({ type: "list-providers" }, onProviders);
      break;
    case "chunk":
      withCall(frame, (call) => call.chunk(frame.chunk));
      break;
    case "chunks":
      withCall(frame, (call) => { for (const c of frame.chunks) call.chunk(c); });
      break;
    case "retry":
      withCall(frame, (call) => call.retry(frame));
      break;
    case "result": {
      const handler = meta.get(frame.id);
      meta.delete(frame.id);
      if (handler) handler(frame.value);
      break;
    }
    case "error":
      onErrorFrame(frame);
      break;
    default:
      break;  // pong, and frame types a later protocol version may add
  }
}

function withCall(frame, fn) {
  const call = calls.get(frame.id);
  if (call) fn(call);
}

function onErrorFrame(frame) {
  const call = frame.id !== undefined ? calls.get(frame.id) : undefined;
  const endsRequest = frame.code !== "DUPLICATE_ID" && frame.code !== "UNKNOWN_ID";
  if (call && frame.code === "UNKNOWN_ID") {
    call.note("the abort came too late: the call had already ended");
    return;
  }
  if (frame.id !== undefined && endsRequest) meta.delete(frame.id);
  if (call && endsRequest) {
    call.fail(frame.code, frame.message);
    return;
  }
  showError(frame.code, frame.message);
}

// ---- providers, models, efforts -------------------------------------------------------------

function fillSelect(select, items, keep) {
  select.textContent = "";
  for (const [value, label] of items) select.add(new Option(label, value));
  if (keep !== undefined && items.some(([v]) => v === keep)) select.value = keep;
}

function onProviders(providers) {
  const keep = $("provider").value || "demo";
  fillSelect($("provider"), providers.map((p) => [p.id, p.id + " - " + p.name]), keep);
  loadModels();
}

function loadModels() {
  const provider = $("provider").value;
  const keep = $("model").value;
  fillSelect($("model"), [], undefined);
  updateControls();
  if (!provider) return;
  request({ type: "list-models", provider }, (models) => {
    if ($("provider").value !== provider) return;
    fillSelect($("model"), models.map((m) => [m.id, m.name && m.name !== m.id ? m.id + " - " + m.name : m.id]), keep);
    loadModelInfo();
  });
}

function loadModelInfo() {
  const provider = $("provider").value;
  const model = $("model").value;
  const keep = $("effort").value;
  fillSelect($("effort"), [["", "default"]], "");
  updateControls();
  if (!model) return;
  request({ type: "resolve-model", provider, model }, (info) => {
    if ($("model").value !== model) return;
    const reasoning = info.reasoning;
    const efforts = reasoning ? reasoning.efforts.map((e) => [e.id, e.name || e.id]) : [];
    const label = reasoning && reasoning.defaultEffort ? "default (" + reasoning.defaultEffort + ")" : "default";
    fillSelect($("effort"), [["", label], ...efforts], keep);
    $("max-tokens").placeholder = info.defaultMaxTokens ? "default (" + info.defaultMaxTokens + ")" : "default";
  });
}

function updateControls() {
  const open = ws !== null && ws.readyState === WebSocket.OPEN;
  $("send").disabled = !open || !$("provider").value || !$("model").value;
  $("abort").disabled = !(newest && newest.running);
  $("new-chat").disabled = history.length === 0;
  $("history").textContent = history.length
    ? "continuing: " + history.length + " messages of history"
    : "new conversation";
}

// ---- calls ------------------------------------------------------------------------------

class Call {
  constructor(id, request) {
    this.id = id;
    this.request = request;
    this.running = true;
    this.blocks = [];           // assembled blocks by index (from block-end)
    this.replayState = undefined;
    this.startedAt = performance.now();
    this.firstAt = null;
    this.abortedAt = null;
    this.textNodes = new Map(); // block index -> Text node being streamed into
    const root = $("call-template").content.firstElementChild.cloneNode(true);
    this.root = root;
    this.el = (sel) => root.querySelector(sel);
    this.el(".title").textContent = id + "  " + request.provider + " / " + request.model;
    this.el(".abort-one").addEventListener("click", () => this.abort());
    this.el(".continue").addEventListener("click", () => this.continueHere());
  }

  chunk(c) {
    if (this.firstAt === null) {
      this.firstAt = performance.now();
      this.el(".first").textContent = "first chunk " + ms(this.firstAt - this.startedAt);
      this.setState("streaming");
    }
    switch (c.type) {
      case "block-start":
        if (c.blockType === "reasoning") this.el(".reasoning").hidden = false;
        break;
      case "reasoning-delta":
        this.el(".reasoning").hidden = false;
        this.append(c.index, ".reasoning-text", c.text);
        break;
      case "text-delta":
        this.append(c.index, ".output", c.text);
        break;
      case "block-end":
        this.blocks[c.index] = c.block;
        if (c.block.type === "tool-call") this.showToolCall(c.block);
        break;
      case "usage":
        this.showUsage(c.usage);
        break;
      case "finish":
        this.finish(c);
        break;
      default:
        break;  // tool-call-delta: a tool call is shown once complete
    }
  }

  append(index, sel, text) {
    let node = this.textNodes.get(index);
    if (!node) {
      node = document.createTextNode("");
      this.el(sel).append(node);
      this.textNodes.set(index, node);
    }
    node.data += text;
  }

  showToolCall(block) {
    let args = block.arguments;
    try {
      args = JSON.stringify(JSON.parse(block.arguments), null, 2);
    } catch (err) {
      // Not JSON: the raw text is what the model produced; show it as it is.
    }
    const box = document.createElement("div");
    box.className = "tool-call";
    const name = document.createElement("b");
    name.textContent = block.name;
    const pre = document.createElement("pre");
    pre.textContent = args;
    box.append("tool call ", name, " (" + block.id + ")", pre);
    this.el(".tool-calls").append(box);
  }

  showUsage(u) {
    const parts = ["input " + u.inputTokens, "output " + u.outputTokens];
    if (u.reasoningTokens) parts.push("reasoning " + u.reasoningTokens);
    if (u.cacheReadTokens) parts.push("cache read " + u.cacheReadTokens);
    if (u.cacheWriteTokens) parts.push("cache write " + u.cacheWriteTokens);
    this.el(".usage").textContent = "usage: " + parts.join(", ");
  }

  finish(c) {
    const now = performance.now();
    const reason = c.reason;
    this.replayState = c.replayState;
    this.end();
    this.el(".total").textContent = "total " + ms(now - this.startedAt);
    const code = reason.failure ? " " + reason.failure.code : "";
    this.el(".finish").textContent = "finish: " + reason.kind + code;
    this.setState(reason.kind);
    if (reason.kind === "aborted" && this.abortedAt !== null) {
      this.el(".abort-latency").textContent = "abort took " + ms(now - this.abortedAt);
    }
    if (reason.kind === "error") this.fail(reason.failure.code, reason.failure.message);
    if (reason.kind !== "error" && reason.kind !== "aborted") this.el(".continue").hidden = false;
  }

  retry(frame) {
    // Everything the failed attempt streamed is void (docs/protocol.md, "Retried calls").
    for (const sel of [".reasoning-text", ".output", ".tool-calls", ".usage"]) this.el(sel).textContent = "";
    this.textNodes.clear();
    this.blocks = [];
    this.note("attempt " + frame.attempt + " failed (" + frame.failure.code + ": " +
      frame.failure.message + "); retrying in " + ms(frame.delayMs));
  }

  fail(code, message) {
    this.end();
    if (this.el(".finish").textContent === "") this.el(".finish").textContent = "error " + code;
    this.setState("error");
    this.el(".call-error").textContent = code + ": " + message;
    showError(code, message);
  }

  note(text) {
    const p = document.createElement("p");
    p.className = "note";
    p.textContent = text;
    this.el(".call-error").append(p);
  }

  end() {
    if (!this.running) return;
    this.running = false;
    calls.delete(this.id);
    this.el(".abort-one").disabled = true;
    updateControls();
  }

  setState(text) {
    this.el(".state").textContent = text;
    this.root.dataset.state = text;
  }

  abort() {
    if (!this.running || this.abortedAt !== null) return;
    this.abortedAt = performance.now();
    this.setState("aborting");
    send({ type: "abort", id: this.id });
  }

  continueHere() {
    const source = { kind: "model", provider: this.request.provider, model: this.request.model };
    if (this.replayState !== undefined) source.replayState = this.replayState;
    const content = this.blocks.filter((b) => b !== undefined);
    history = [...this.request.messages, { id: "msg_" + hex(16), role: "assistant", content, source }];
    updateControls();
    $("prompt").focus();
  }
}

function makeTesthooksNewest(call) {
  for (const [sel, hook] of Object.entries(NEWEST_HOOKS)) {
    if (newest) newest.el(sel).removeAttribute("data-testid");
    call.el(sel).dataset.testid = hook;
  }
  newest = call;
}

function readRequest() {
  const text = $("prompt").value;
  const request = {
    provider: $("provider").value,
    model: $("model").value,
    messages: [...history, {
      id: "msg_" + hex(16), role: "user", content: [{ type: "text", text }], source: { kind: "user" },
    }],
  };
  const system = $("system").value;
  if (system.trim()) request.system = system;
  if ($("effort").value) request.reasoningEffort = $("effort").value;
  // Out-of-range numbers are sent as typed: the gateway names the bad field.
  const maxTokens = $("max-tokens").value.trim();
  if (maxTokens) request.maxTokens = Number(maxTokens);
  const temperature = $("temperature").value.trim();
  if (temperature) request.temperature = Number(temperature);
  if ($("tools-on").checked) request.tools = JSON.parse($("tools").value);
  return request;
}

function startCall(event) {
  event.preventDefault();
  if ($("send").disabled) return;
  let req;
  try {
    req = readRequest();
  } catch (err) {
    showError("BAD_TOOLS", "the tools are not valid JSON: " + err.message);
    return;
  }
  const id = "c" + ++seq;
  const call = new Call(id, req);
  calls.set(id, call);
  makeTesthooksNewest(call);
  $("calls").prepend(call.root);
  clearError();
  if (!send({ type: "call", id, request: req })) call.fail("CONNECTION_CLOSED", "not connected");
  updateControls();
}

// ---- wiring -----------------------------------------------------------------------------

function init() {
  $("url").value = defaultUrl();
  $("token").value = sessionStorage.getItem(TOKEN_KEY) || "";
  $("connection").addEventListener("submit", (ev) => { ev.preventDefault(); retryMs = 500; connect(); });
  $("provider").addEventListener("change", loadModels);
  $("model").addEventListener("change", loadModelInfo);
  $("form").addEventListener("submit", startCall);
  $("prompt").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) $("form").requestSubmit();
  });
  $("abort").addEventListener("click", () => { if (newest) newest.abort(); });
  $("new-chat").addEventListener("click", () => { history = []; updateControls(); });
  connect();
}

init();
