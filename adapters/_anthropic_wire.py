"""Anthropic Messages wire translation, without I/O.

Two directions:

* `AnthropicStreamDecoder` turns the SSE events of a streamed Messages
  response into llmrt `StreamChunk`s;
* `build_anthropic_body` turns a `GenerateOptions` into the request body.

Block mapping: ``text`` -> text, ``thinking`` -> reasoning (its signature is
replay state, never text), ``redacted_thinking`` -> a reasoning block with
empty text whose encrypted ``data`` is replay state (so it can be sent back,
as Anthropic requires within a tool loop), ``tool_use`` -> tool call. Other
block types (server tools and their results) have no llmrt form and are
skipped with their deltas. llmrt indices are assigned in first-seen order
over the blocks that are emitted.

Shapes beside the plain stream: a ``tool_use`` whose complete ``input``
arrives in ``content_block_start`` (programmatic tool calling) has that
input, raw, as its arguments, and fragments after it are ignored; blocks
carried whole in ``message_start.message.content`` are emitted, each opened
and closed at once. One response is one message: a ``message_start`` that
repeats the first one's ``id`` before any content block is harmless and
tolerated; one with another id, without an id, or after a content block is a
``PROTOCOL`` error.

Replay envelope of a successful finish: ``response`` holds the message id,
model, native stop reason and the request id; ``blocks`` has one entry per
emitted block: ``{"signature": ...}`` for a signed thinking block,
``{"redacted": ...}`` for a redacted one, ``None`` otherwise.
"""

from __future__ import annotations

from typing import Any

import msgspec

from llmrt import (
    ErrorCode,
    FinishMaxTokens,
    FinishReason,
    FinishStop,
    FinishToolCalls,
    GenerateOptions,
    ImageBlock,
    JsonSchemaFormat,
    LlmError,
    LlmFailure,
    Message,
    NamedToolChoice,
    ReasoningBlock,
    ReplayEnvelope,
    StreamChunk,
    TextBlock,
    TokenUsage,
    ToolCallBlock,
    ToolChoice,
    ToolResultBlock,
    ToolSchema,
)
from llmrt.vocabulary import require_block_types

from ._blocks import Block, BlockKind, BlockTracker
from ._bodies import describe_json_error
from ._classify import classify_stream_error
from ._prompt import image_placeholder, replay_entries, system_prompt, tool_arguments

__all__ = ["AnthropicStreamDecoder", "build_anthropic_body"]


# --- provider structs: only the fields we read; unknown fields are ignored ---


class _OutputDetails(msgspec.Struct):
    thinking_tokens: int | None = None


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    output_tokens_details: _OutputDetails | None = None


class _Block(msgspec.Struct):
    type: str
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    id: str | None = None
    name: str | None = None
    #: A tool call's input as sent: ``{}`` when the arguments stream as
    #: fragments, the whole object when they do not (programmatic tool calling).
    input: msgspec.Raw = msgspec.Raw()


class _Message(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    usage: _Usage | None = None
    #: Blocks that arrive whole with the message (a replayed or proxied response).
    content: list[_Block] | None = None
    stop_reason: str | None = None


class _MessageStart(msgspec.Struct):
    message: _Message


class _BlockStart(msgspec.Struct):
    index: int
    content_block: _Block


class _Delta(msgspec.Struct):
    type: str = ""
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    partial_json: str | None = None


class _BlockDelta(msgspec.Struct):
    index: int
    delta: _Delta


class _BlockStop(msgspec.Struct):
    index: int


class _StopInfo(msgspec.Struct):
    stop_reason: str | None = None


class _MessageDelta(msgspec.Struct):
    delta: _StopInfo | None = None
    usage: _Usage | None = None


class _ErrorBody(msgspec.Struct):
    type: str = ""
    message: str = ""


class _ErrorEvent(msgspec.Struct):
    error: _ErrorBody | None = None


class _Typed(msgspec.Struct):
    type: str = ""


_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    "message_start": msgspec.json.Decoder(_MessageStart),
    "content_block_start": msgspec.json.Decoder(_BlockStart),
    "content_block_delta": msgspec.json.Decoder(_BlockDelta),
    "content_block_stop": msgspec.json.Decoder(_BlockStop),
    "message_delta": msgspec.json.Decoder(_MessageDelta),
    "error": msgspec.json.Decoder(_ErrorEvent),
}
_type_decoder = msgspec.json.Decoder(_Typed)
_empty_object = msgspec.json.Decoder(dict[str, Any])
_BAD_JSON = (msgspec.DecodeError, msgspec.ValidationError)

_STOP = FinishStop()

#: Anthropic block types that have an llmrt form, and that form.
_BLOCK_KINDS: dict[str, BlockKind] = {
    "text": "text",
    "thinking": "reasoning",
    "redacted_thinking": "reasoning",
    "tool_use": "tool-call",
}

#: Anthropic error types (``error.type``) and their codes, HTTP status or not.


def _classify_inband(error: _ErrorBody) -> LlmFailure:
    """The failure of an in-band ``error`` event, from ``error.type`` (never the 200 status)."""
    return classify_stream_error(
        "anthropic", {"type": "error", "error": {"type": error.type, "message": error.message}}
    )


def _whole_input(raw: msgspec.Raw) -> str | None:
    """A tool call's complete input as raw JSON text; None if absent or the ``{}`` placeholder."""
    if not raw:
        return None
    text = bytes(raw).decode()
    try:
        placeholder = _empty_object.decode(raw) == {}
    except _BAD_JSON:
        placeholder = False
    return None if placeholder else text


def _replay_entry(block: _Block) -> dict[str, str] | None:
    """A block's replay fact, as it is known at its start (signatures may follow as deltas)."""
    if block.type == "redacted_thinking":
        return {"redacted": block.data or ""}
    if block.type == "thinking" and block.signature:
        return {"signature": block.signature}
    return None


class AnthropicStreamDecoder:
    """Incremental decoder of one streamed Messages response.

    Feed each SSE event to `push` (its ``event:`` name and ``data:`` bytes)
    and call `end` when the body ends. Both return the chunks to emit. The
    last chunk ever returned is a ``finish``; after it both return ``[]``.
    Never raises on provider input: malformed JSON is a ``PROTOCOL`` error
    finish, an ``error`` event an error finish classified from
    ``error.type``, and a body that ends before ``message_stop`` a
    ``NETWORK`` error finish. ``ping`` and unknown events are ignored.

    Usage in ``message_delta`` is cumulative: the last value of each field
    wins over earlier ones, including ``message_start``'s. Stop reasons:
    ``end_turn``/``stop_sequence`` -> stop; ``max_tokens`` -> max-tokens;
    ``tool_use`` -> tool-calls; ``refusal`` -> error ``INVALID_REQUEST`` (the
    same request would be refused again); ``model_context_window_exceeded``
    -> error ``CONTEXT_WINDOW_EXCEEDED``; ``pause_turn`` (a server-tool turn
    the caller may resume) and unknown reasons -> stop, with the native reason
    kept in the replay envelope. A stop without any block is ``EMPTY_RESPONSE``.

    ``request_id`` (the ``request-id`` response header) goes into failures and
    the replay envelope. Pure computation: no I/O, no checkpoints.
    """

    __slots__ = (
        "_blocks",
        "_content",
        "_message_id",
        "_model",
        "_started",
        "_stop_reason",
        "_usage",
        "_whole",
    )

    def __init__(self, *, request_id: str | None = None) -> None:
        self._blocks = BlockTracker(request_id=request_id, empty_arguments="{}")
        self._started = False
        #: Whether a content block was seen (streamed, or inside ``message_start``).
        self._content = False
        self._whole: set[int] = set()
        self._usage: dict[str, int] | None = None
        self._message_id: str | None = None
        self._model: str | None = None
        self._stop_reason: str | None = None

    @property
    def finished(self) -> bool:
        """True once a ``finish`` chunk has been returned."""
        return self._blocks.done

    def push(self, event: str, data: bytes) -> list[StreamChunk]:
        """Decode one SSE event; return the chunks it produces."""
        blocks = self._blocks
        if blocks.done or event == "ping":
            return []
        if event == "message_stop":
            self._complete()
            return blocks.take()
        decoder = _DECODERS.get(event)
        if decoder is None:
            if event not in ("", "message"):
                return []  # an event type this decoder does not know: ignored
            # No event name: fall back on the payload's own ``type``.
            try:
                event = _type_decoder.decode(data).type
            except _BAD_JSON as exc:
                blocks.fail(
                    ErrorCode.PROTOCOL,
                    f"malformed event from the provider: {describe_json_error(exc, data)}",
                )
                return blocks.take()
            return self.push(event, data) if event not in ("", "message") else []
        try:
            payload = decoder.decode(data)
        except _BAD_JSON as exc:
            blocks.fail(
                ErrorCode.PROTOCOL, f"malformed {event} event: {describe_json_error(exc, data)}"
            )
            return blocks.take()
        match payload:
            case _BlockDelta():
                self._content = True
                self._delta(payload)
            case _BlockStart():
                self._content = True
                self._start(payload)
            case _BlockStop():
                self._content = True
                block = blocks.get(payload.index)
                if block is not None:
                    blocks.close(block)
            case _MessageDelta():
                if payload.delta is not None and payload.delta.stop_reason is not None:
                    self._stop_reason = payload.delta.stop_reason
                if payload.usage is not None:
                    self._merge_usage(payload.usage)
            case _MessageStart():
                self._message_start(payload.message)
            case _ErrorEvent():
                body = payload.error or _ErrorBody(message="provider reported an error")
                blocks.fail_with(_classify_inband(body))
        return blocks.take()

    def end(self) -> list[StreamChunk]:
        """The body ended: a ``NETWORK`` error finish unless a finish was already returned."""
        self._blocks.end("message_stop")
        return self._blocks.take()

    # --- internals ---

    def _message_start(self, message: _Message) -> None:
        # One response is one message: another one, or one after content, would
        # merge two answers (or a retried one) into the first one's blocks. The
        # same message announced again before any content (a proxy that repeats
        # the start) says nothing new: its usage and stop reason merge as the
        # first one's did.
        if self._started and (self._content or not message.id or message.id != self._message_id):
            self._blocks.fail(ErrorCode.PROTOCOL, "a second message_start in one response stream")
            return
        self._started = True
        self._message_id, self._model = message.id, message.model
        if message.usage is not None:
            self._merge_usage(message.usage)
        if message.stop_reason is not None:
            self._stop_reason = message.stop_reason
        # Blocks that come whole with the message are complete: each is
        # opened and closed at once, under its position as its stream index
        # (later streamed blocks continue the numbering).
        for position, block in enumerate(message.content or ()):
            self._content = True
            state = self._open(position, block)
            if state is not None:
                self._blocks.close(state)

    def _start(self, payload: _BlockStart) -> None:
        self._open(payload.index, payload.content_block)

    def _open(self, index: int, block: _Block) -> Block | None:
        blocks = self._blocks
        kind = _BLOCK_KINDS.get(block.type)
        if kind is None or blocks.get(index) is not None:
            return None
        state = blocks.open(kind, index)
        state.replay = _replay_entry(block)
        if block.type == "text":
            blocks.text(state, block.text)
        elif block.type == "thinking":
            blocks.reasoning(state, block.thinking)
        elif block.type == "tool_use":
            arguments = _whole_input(block.input)
            if arguments is not None:
                # The input came whole: fragments that might follow would
                # append to a complete object, so none are taken.
                self._whole.add(state.index)
            blocks.tool_call(state, arguments, call_id=block.id or "", name=block.name or "")
        return state

    def _delta(self, payload: _BlockDelta) -> None:
        blocks = self._blocks
        state = blocks.get(payload.index)
        if state is None:
            return
        delta = payload.delta
        if state.kind == "text":
            if delta.type == "text_delta":
                blocks.text(state, delta.text)
        elif state.kind == "tool-call":
            if delta.type == "input_json_delta" and state.index not in self._whole:
                blocks.tool_call(state, delta.partial_json)
        elif delta.type == "thinking_delta":
            blocks.reasoning(state, delta.thinking)
        elif delta.type == "signature_delta" and delta.signature and not state.closed:
            entry = state.replay if isinstance(state.replay, dict) else {}
            if "redacted" not in entry:
                entry["signature"] = entry.get("signature", "") + delta.signature
                state.replay = entry

    def _merge_usage(self, usage: _Usage) -> None:
        current = self._usage if self._usage is not None else {}
        for key, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("read", usage.cache_read_input_tokens),
            ("write", usage.cache_creation_input_tokens),
            (
                "reasoning",
                usage.output_tokens_details.thinking_tokens
                if usage.output_tokens_details is not None
                else None,
            ),
        ):
            if value is not None:
                current[key] = value
        self._usage = current

    def _complete(self) -> None:
        usage = self._usage
        token_usage = None
        if usage is not None:
            token_usage = TokenUsage(
                input_tokens=usage.get("input", 0),
                output_tokens=usage.get("output", 0),
                cache_read_tokens=usage.get("read"),
                cache_write_tokens=usage.get("write"),
                reasoning_tokens=usage.get("reasoning"),
            )
        response = {
            key: value
            for key, value in (
                ("id", self._message_id),
                ("model", self._model),
                ("stopReason", self._stop_reason),
                ("requestId", self._blocks.request_id),
            )
            if value is not None
        }
        envelope = ReplayEnvelope(response=response, blocks=self._blocks.replay_blocks())
        self._blocks.finish(self._reason(), usage=token_usage, replay_state=envelope)

    def _reason(self) -> FinishReason:
        reason = self._stop_reason
        if reason == "tool_use":
            return FinishToolCalls()
        if reason == "max_tokens":
            return FinishMaxTokens()
        if reason == "refusal":
            return self._blocks.failure(
                ErrorCode.INVALID_REQUEST, "the model refused to answer (stop_reason refusal)"
            )
        if reason == "model_context_window_exceeded":
            return self._blocks.failure(
                ErrorCode.CONTEXT_WINDOW_EXCEEDED,
                "the model's context window was exhausted (stop_reason "
                "model_context_window_exceeded)",
            )
        # The tracker turns a stop without content into EMPTY_RESPONSE.
        return _STOP


# --- request body -------------------------------------------------------------


def _image(image: ImageBlock, image_input: bool) -> dict[str, Any]:
    if not image_input:
        return {"type": "text", "text": image_placeholder(image)}
    if image.url is not None:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    source = {"type": "base64", "media_type": image.media_type, "data": image.data}
    return {"type": "image", "source": source}


def _tool_result(result: ToolResultBlock, image_input: bool) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for block in result.content:
        if type(block) is TextBlock:
            if block.text:  # Anthropic rejects empty text blocks
                content.append({"type": "text", "text": block.text})
        elif type(block) is ImageBlock:
            content.append(_image(block, image_input))
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.tool_call_id}
    if content:
        out["content"] = content
    if result.is_error:
        out["is_error"] = True
    return out


def _assistant_content(message: Message) -> list[dict[str, Any]]:
    entries = replay_entries(message)
    out: list[dict[str, Any]] = []
    for position, block in enumerate(message.content):
        if type(block) is TextBlock:
            if block.text:
                out.append({"type": "text", "text": block.text})
        elif type(block) is ToolCallBlock:
            out.append(
                {
                    "type": "tool_use",
                    "id": block.id,
                    "name": block.name,
                    "input": tool_arguments(block),
                }
            )
        elif type(block) is ReasoningBlock:
            entry = entries[position] if entries is not None else None
            if not isinstance(entry, dict):
                continue  # unsigned thinking cannot be replayed
            signature, redacted = entry.get("signature"), entry.get("redacted")
            if isinstance(signature, str) and signature:
                out.append({"type": "thinking", "thinking": block.text, "signature": signature})
            elif isinstance(redacted, str) and redacted:
                out.append({"type": "redacted_thinking", "data": redacted})
        elif type(block) is ImageBlock:
            out.append({"type": "text", "text": image_placeholder(block)})
        elif type(block) is ToolResultBlock:
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                f"tool result for {block.tool_call_id!r} is in an assistant message; "
                "tool results belong to user messages",
            )
    return out


def _user_content(message: Message, image_input: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in message.content:
        if type(block) is TextBlock:
            if block.text:
                out.append({"type": "text", "text": block.text})
        elif type(block) is ImageBlock:
            out.append(_image(block, image_input))
        elif type(block) is ToolResultBlock:
            out.append(_tool_result(block, image_input))
        elif type(block) is ToolCallBlock:
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                f"tool call {block.id!r} is in a user message; tool calls belong to "
                "assistant messages",
            )
    return out


def _tool_choice(choice: ToolChoice, thinking: bool) -> dict[str, Any]:
    if choice == "auto" or choice == "none":
        return {"type": choice}
    if thinking:
        # Anthropic answers 400 for a forced tool with extended thinking on.
        raise LlmError(
            ErrorCode.INVALID_REQUEST,
            "with extended thinking (a reasoning effort) Anthropic allows only the tool "
            "choices `auto` and `none`; drop the effort or the forced tool",
        )
    if type(choice) is NamedToolChoice:
        return {"type": "tool", "name": choice.name}
    return {"type": "any"}  # required


def _tool(tool: ToolSchema) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.parameters,
    }
    if tool.strict is not None:
        out["strict"] = tool.strict
    return out


def build_anthropic_body(
    options: GenerateOptions,
    *,
    image_input: bool,
    default_max_tokens: int,
    thinking_budget_tokens: int | None = None,
) -> dict[str, Any]:
    """The Messages request body for ``options`` (a JSON-ready dict).

    System-role messages are folded into ``system`` (see `system_prompt`).
    Consecutive messages of one role are merged into one turn, and a user
    turn's ``tool_result`` blocks are put first, as Anthropic requires.
    Images become ``image`` blocks (base64 or url source) when ``image_input``,
    else text placeholders. Thinking goes back only with its signature from
    the message's replay envelope; other reasoning is left out. Empty text
    blocks are left out, and so are turns left empty. ``max_tokens`` is
    ``options.max_tokens`` or ``default_max_tokens``. ``thinking_budget_tokens``
    enables extended thinking (and then leaves ``temperature`` out, which
    thinking does not allow). A tool choice is ``tool_choice`` (``required`` is
    ``any``), a JSON schema ``output_config.format``, a tool's ``strict`` its
    ``strict``.

    Raises `LlmError` (``INVALID_REQUEST``) when a tool call's arguments are
    not a JSON object (naming the call id), or a tool block sits in the wrong role,
    and for a registered block type (`llmrt.vocabulary.register_content_block`) that the
    Messages API has no form for, a forced tool choice with extended thinking,
    and a JSON-object response format (the API has JSON schemas only).
    """
    # Extension blocks would otherwise be dropped silently below.
    require_block_types(options.messages, route=options.provider)
    turns: list[dict[str, Any]] = []
    for message in options.messages:
        if message.role == "system":
            continue
        if message.role == "assistant":
            content = _assistant_content(message)
        else:
            content = _user_content(message, image_input)
        if not content:
            continue
        if turns and turns[-1]["role"] == message.role:
            turns[-1]["content"].extend(content)
        else:
            turns.append({"role": message.role, "content": content})
    for turn in turns:
        if turn["role"] == "user":
            # A stable sort: tool results first, everything else after, in order.
            turn["content"].sort(key=lambda part: part["type"] != "tool_result")
    body: dict[str, Any] = {
        "model": options.model,
        "max_tokens": options.max_tokens or default_max_tokens,
        "messages": turns,
        "stream": True,
    }
    system = system_prompt(options)
    if system:
        body["system"] = system
    if options.tools:
        body["tools"] = [_tool(tool) for tool in options.tools]
    if options.tool_choice is not None:
        body["tool_choice"] = _tool_choice(
            options.tool_choice, thinking=thinking_budget_tokens is not None
        )
    fmt = options.response_format
    if fmt is not None:
        if type(fmt) is not JsonSchemaFormat:
            # The runtime refuses it first (no json-object feature); a direct caller gets this.
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                "the Messages API has no JSON-object mode; give a JSON schema",
            )
        body["output_config"] = {"format": {"type": "json_schema", "schema": fmt.schema}}
    if thinking_budget_tokens is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget_tokens}
    elif options.temperature is not None:
        body["temperature"] = options.temperature
    if options.stop:
        body["stop_sequences"] = list(options.stop)
    return body
