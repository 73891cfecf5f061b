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

Replay envelope of a successful finish: ``response`` holds the message id,
model, native stop reason and the request id; ``blocks`` has one entry per
emitted block: ``{"signature": ...}`` for a signed thinking block,
``{"redacted": ...}`` for a redacted one, ``None`` otherwise.
"""

from __future__ import annotations

from typing import Any

import msgspec

from llmrt import (
    BlockEnd,
    BlockStart,
    ContentBlock,
    ErrorCode,
    Finish,
    FinishError,
    FinishMaxTokens,
    FinishReason,
    FinishStop,
    FinishToolCalls,
    GenerateOptions,
    ImageBlock,
    LlmError,
    LlmFailure,
    Message,
    ModelSource,
    ReasoningBlock,
    ReasoningDelta,
    ReplayEnvelope,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    ToolResultBlock,
    UsageChunk,
)

from ._bodies import describe_json_error
from ._classify import classify_stream_error
from ._openai_wire import image_placeholder, system_prompt

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


class _Message(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    usage: _Usage | None = None


class _MessageStart(msgspec.Struct):
    message: _Message


class _Block(msgspec.Struct):
    type: str
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    id: str | None = None
    name: str | None = None


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
_BAD_JSON = (msgspec.DecodeError, msgspec.ValidationError)

_STOP = FinishStop()

#: Anthropic block types that have an llmrt form, and that form.
_BLOCK_KINDS = {
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


class _Open:
    """One emitted block: llmrt index, kind, fragments and replay facts."""

    __slots__ = ("call_id", "closed", "index", "kind", "name", "parts", "redacted", "signature")

    def __init__(self, index: int, kind: str) -> None:
        self.index = index
        self.kind = kind
        self.parts: list[str] = []
        self.signature = ""
        self.redacted: str | None = None
        self.call_id = ""
        self.name = ""
        self.closed = False

    def block(self) -> ContentBlock:
        text = "".join(self.parts)
        if self.kind == "text":
            return TextBlock(text=text)
        if self.kind == "reasoning":
            return ReasoningBlock(text=text)
        return ToolCallBlock(id=self.call_id, name=self.name, arguments=text or "{}")

    def replay_entry(self) -> dict[str, str] | None:
        if self.redacted is not None:
            return {"redacted": self.redacted}
        if self.kind == "reasoning" and self.signature:
            return {"signature": self.signature}
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
        "_by_index",
        "_done",
        "_message_id",
        "_model",
        "_request_id",
        "_stop_reason",
        "_usage",
    )

    def __init__(self, *, request_id: str | None = None) -> None:
        self._request_id = request_id
        self._blocks: list[_Open] = []
        self._by_index: dict[int, _Open] = {}
        self._usage: dict[str, int] | None = None
        self._message_id: str | None = None
        self._model: str | None = None
        self._stop_reason: str | None = None
        self._done = False

    @property
    def finished(self) -> bool:
        """True once a ``finish`` chunk has been returned."""
        return self._done

    def push(self, event: str, data: bytes) -> list[StreamChunk]:
        """Decode one SSE event; return the chunks it produces."""
        if self._done or event == "ping":
            return []
        if event == "message_stop":
            return self._complete()
        decoder = _DECODERS.get(event)
        if decoder is None:
            if event not in ("", "message"):
                return []  # an event type this decoder does not know: ignored
            # No event name: fall back on the payload's own ``type``.
            try:
                event = _type_decoder.decode(data).type
            except _BAD_JSON as exc:
                return self._fail(
                    ErrorCode.PROTOCOL,
                    f"malformed event from the provider: {describe_json_error(exc, data)}",
                )
            return self.push(event, data) if event not in ("", "message") else []
        try:
            payload = decoder.decode(data)
        except _BAD_JSON as exc:
            return self._fail(
                ErrorCode.PROTOCOL, f"malformed {event} event: {describe_json_error(exc, data)}"
            )
        out: list[StreamChunk] = []
        match payload:
            case _BlockDelta():
                self._delta(payload, out)
            case _BlockStart():
                self._start(payload, out)
            case _BlockStop():
                state = self._by_index.get(payload.index)
                if state is not None and not state.closed:
                    state.closed = True
                    out.append(BlockEnd(index=state.index, block=state.block()))
            case _MessageDelta():
                if payload.delta is not None and payload.delta.stop_reason is not None:
                    self._stop_reason = payload.delta.stop_reason
                if payload.usage is not None:
                    self._merge_usage(payload.usage)
            case _MessageStart():
                message = payload.message
                self._message_id, self._model = message.id, message.model
                if message.usage is not None:
                    self._merge_usage(message.usage)
            case _ErrorEvent():
                body = payload.error or _ErrorBody(message="provider reported an error")
                return self._fail_with(_classify_inband(body))
        return out

    def end(self) -> list[StreamChunk]:
        """The body ended: a ``NETWORK`` error finish unless a finish was already returned."""
        if self._done:
            return []
        return self._fail(ErrorCode.NETWORK, "response ended before message_stop")

    # --- internals ---

    def _start(self, payload: _BlockStart, out: list[StreamChunk]) -> None:
        block = payload.content_block
        kind = _BLOCK_KINDS.get(block.type)
        if kind is None or payload.index in self._by_index:
            return
        state = _Open(len(self._blocks), kind)
        self._blocks.append(state)
        self._by_index[payload.index] = state
        out.append(BlockStart(index=state.index, block_type=kind))
        if block.type == "text" and block.text:
            state.parts.append(block.text)
            out.append(TextDelta(index=state.index, text=block.text))
        elif block.type == "thinking":
            state.signature = block.signature or ""
            if block.thinking:
                state.parts.append(block.thinking)
                out.append(ReasoningDelta(index=state.index, text=block.thinking))
        elif block.type == "redacted_thinking":
            state.redacted = block.data or ""
        elif block.type == "tool_use":
            # ``input`` is always ``{}`` here; the arguments stream as partial_json.
            state.call_id, state.name = block.id or "", block.name or ""
            out.append(ToolCallDelta(index=state.index, id=state.call_id, name=state.name))

    def _delta(self, payload: _BlockDelta, out: list[StreamChunk]) -> None:
        state = self._by_index.get(payload.index)
        if state is None or state.closed:
            return
        delta = payload.delta
        kind = state.kind
        if kind == "text":
            if delta.type == "text_delta" and delta.text:
                state.parts.append(delta.text)
                out.append(TextDelta(index=state.index, text=delta.text))
        elif kind == "tool-call":
            if delta.type == "input_json_delta" and delta.partial_json:
                state.parts.append(delta.partial_json)
                out.append(ToolCallDelta(index=state.index, arguments_delta=delta.partial_json))
        elif delta.type == "thinking_delta":
            if delta.thinking:
                state.parts.append(delta.thinking)
                out.append(ReasoningDelta(index=state.index, text=delta.thinking))
        elif delta.type == "signature_delta" and delta.signature:
            state.signature += delta.signature

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

    def _fail(self, code: str, message: str) -> list[StreamChunk]:
        self._done = True
        return [Finish(reason=self._error(code, message))]

    def _fail_with(self, failure: LlmFailure) -> list[StreamChunk]:
        self._done = True
        if self._request_id is not None and failure.request_id is None:
            failure = msgspec.structs.replace(failure, request_id=self._request_id)
        return [Finish(reason=FinishError(failure=failure))]

    def _error(self, code: str, message: str) -> FinishError:
        return FinishError(
            failure=LlmFailure(message=message, code=code, request_id=self._request_id)
        )

    def _complete(self) -> list[StreamChunk]:
        self._done = True
        out: list[StreamChunk] = []
        for state in self._blocks:
            if not state.closed:
                state.closed = True
                out.append(BlockEnd(index=state.index, block=state.block()))
        usage = self._usage
        if usage is not None:
            out.append(
                UsageChunk(
                    usage=TokenUsage(
                        input_tokens=usage.get("input", 0),
                        output_tokens=usage.get("output", 0),
                        cache_read_tokens=usage.get("read"),
                        cache_write_tokens=usage.get("write"),
                        reasoning_tokens=usage.get("reasoning"),
                    )
                )
            )
        reason = self._reason()
        if type(reason) is FinishError:
            out.append(Finish(reason=reason))
            return out
        response = {
            key: value
            for key, value in (
                ("id", self._message_id),
                ("model", self._model),
                ("stopReason", self._stop_reason),
                ("requestId", self._request_id),
            )
            if value is not None
        }
        envelope = ReplayEnvelope(
            response=response, blocks=tuple(s.replay_entry() for s in self._blocks)
        )
        out.append(Finish(reason=reason, replay_state=envelope))
        return out

    def _reason(self) -> FinishReason:
        reason = self._stop_reason
        if reason == "tool_use":
            return FinishToolCalls()
        if reason == "max_tokens":
            return FinishMaxTokens()
        if reason == "refusal":
            return self._error(
                ErrorCode.INVALID_REQUEST, "the model refused to answer (stop_reason refusal)"
            )
        if reason == "model_context_window_exceeded":
            return self._error(
                ErrorCode.CONTEXT_WINDOW_EXCEEDED,
                "the model's context window was exhausted (stop_reason "
                "model_context_window_exceeded)",
            )
        if not self._blocks:
            return self._error(ErrorCode.EMPTY_RESPONSE, "the model returned no content")
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


def _tool_input(call: ToolCallBlock) -> Any:
    if not call.arguments.strip():
        return {}  # a call without arguments
    try:
        value = msgspec.json.decode(call.arguments)
    except msgspec.DecodeError:
        value = None
    if not isinstance(value, dict):
        raise LlmError(
            ErrorCode.INVALID_REQUEST,
            f"arguments of tool call {call.id!r} are not a JSON object",
        )
    return value


def _replay_entries(message: Message) -> tuple[Any, ...] | None:
    source = message.source
    if type(source) is not ModelSource or source.replay_state is None:
        return None
    entries = source.replay_state.blocks
    # Entries describe the stored blocks position by position; a mismatch
    # means the state does not describe this content, so none of it is used.
    if entries is None or len(entries) != len(message.content):
        return None
    return entries


def _assistant_content(message: Message) -> list[dict[str, Any]]:
    entries = _replay_entries(message)
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
                    "input": _tool_input(block),
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
    thinking does not allow).

    Raises `LlmError` (``INVALID_REQUEST``) when a tool call's arguments are
    not a JSON object (naming the call id), or a tool block sits in the wrong role.
    """
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
        body["tools"] = [
            {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
            for tool in options.tools
        ]
    if thinking_budget_tokens is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget_tokens}
    elif options.temperature is not None:
        body["temperature"] = options.temperature
    if options.stop:
        body["stop_sequences"] = list(options.stop)
    return body
