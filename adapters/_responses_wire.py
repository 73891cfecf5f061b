"""OpenAI Responses API wire translation (``POST /v1/responses``, ``stream: true``), without I/O.

Two directions:

* `ResponsesStreamDecoder` turns the semantic SSE events of a streamed
  response into llmrt `StreamChunk`s;
* `build_responses_body` turns a `GenerateOptions` into the request body.

Item mapping, keyed by ``output_index`` (parallel calls interleave): a
``message`` item's ``output_text`` and ``refusal`` deltas are text (a refusal
is what the model says to the user, as in chat completions); a ``reasoning``
item's summary deltas (``reasoning_summary_text``, summary parts separated by
a blank line) and raw ``reasoning_text`` deltas are reasoning; a
``function_call`` item is a tool call whose arguments stream as
``function_call_arguments`` deltas. ``response.output_item.done`` closes the
item's block. Other item types (built-in tools) have no llmrt form and are
skipped.

Replay state: the body asks for ``reasoning.encrypted_content`` with
``store: false``, so the provider keeps nothing and the encrypted reasoning
comes back in ``output_item.done``. A reasoning item's block entry is
``{"id", "encrypted", "summary"}`` (a reasoning item with no summary text
still gets an empty reasoning block, to carry it); other blocks' entries are
None. `build_responses_body` sends such items back as ``reasoning`` input
items on the next turn.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Final

import msgspec

from llmrt import (
    ErrorCode,
    FinishError,
    FinishMaxTokens,
    FinishReason,
    FinishStop,
    FinishToolCalls,
    GenerateOptions,
    ImageBlock,
    JsonObjectFormat,
    JsonSchemaFormat,
    LlmError,
    LlmFailure,
    Message,
    NamedToolChoice,
    ReasoningBlock,
    ReplayEnvelope,
    ResponseFormat,
    StreamChunk,
    TextBlock,
    TokenUsage,
    ToolCallBlock,
    ToolResultBlock,
)

from ._blocks import Block, BlockTracker
from ._classify import classify_stream_error
from ._prompt import image_placeholder, replay_entries, system_prompt, tool_result_text

__all__ = ["ResponsesStreamDecoder", "build_responses_body"]


# --- provider structs: only the fields we read; unknown fields are ignored ---


class _Summary(msgspec.Struct):
    text: str = ""


class _Item(msgspec.Struct):
    type: str = ""
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    encrypted_content: str | None = None
    summary: list[_Summary] | None = None


class _InputDetails(msgspec.Struct):
    cached_tokens: int | None = None
    #: Tokens written to the prompt cache (GitHub Copilot's and gpt-5.x's usage carry it).
    cache_write_tokens: int | None = None


class _OutputDetails(msgspec.Struct):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    input_tokens_details: _InputDetails | None = None
    output_tokens_details: _OutputDetails | None = None


class _Incomplete(msgspec.Struct):
    reason: str | None = None


class _Error(msgspec.Struct):
    code: str | None = None
    message: str | None = None
    type: str | None = None


class _Response(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    status: str | None = None
    usage: _Usage | None = None
    incomplete_details: _Incomplete | None = None
    error: _Error | None = None


class _Event(msgspec.Struct):
    """Every event type in one shape: each reads the few fields it has."""

    type: str = ""
    output_index: int | None = None
    item_id: str | None = None
    summary_index: int = 0
    delta: str | None = None
    arguments: str | None = None
    item: _Item | None = None
    response: _Response | None = None
    # The top-level ``error`` event: its fields flat, or (some proxies) in ``error``.
    code: str | None = None
    message: str | None = None
    error: _Error | None = None


_decoder = msgspec.json.Decoder(_Event)
_BAD_JSON = (msgspec.DecodeError, msgspec.ValidationError)

_TEXT_DELTAS: Final = frozenset({"response.output_text.delta", "response.refusal.delta"})
_REASONING_DELTAS: Final = frozenset(
    {"response.reasoning_summary_text.delta", "response.reasoning_text.delta"}
)
_TERMINAL: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _usage(raw: _Usage) -> TokenUsage:
    details = raw.input_tokens_details
    cached = details.cached_tokens if details is not None else None
    written = details.cache_write_tokens if details is not None else None
    output = raw.output_tokens_details
    return TokenUsage(
        # input_tokens includes the cached and the cache-written parts; llmrt's
        # counts are disjoint, so each is taken out of the uncached input.
        input_tokens=max(0, raw.input_tokens - (cached or 0) - (written or 0)),
        output_tokens=raw.output_tokens,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=output.reasoning_tokens if output is not None else None,
    )


def _failure(code: str | None, message: str | None, error_type: str | None = None) -> LlmFailure:
    """The failure of a ``response.failed`` or ``error`` event, from its error code."""
    failure = classify_stream_error(
        "openai",
        {"error": {"code": code or "", "message": message or "", "type": error_type or ""}},
    )
    if code and code.startswith("invalid_") and failure.code == ErrorCode.SERVER_ERROR:
        # invalid_prompt, invalid_image, ...: the request's fault, not the server's.
        failure = msgspec.structs.replace(failure, code=ErrorCode.INVALID_REQUEST)
    return failure


class ResponsesStreamDecoder:
    """Incremental decoder of one streamed Responses API response.

    Feed each SSE ``data:`` payload to `push` (the payload's ``type`` names
    the event) and call `end` when the body ends; both return the chunks to
    emit. The last chunk ever returned is a ``finish``; after it both return
    ``[]``. Never raises on provider input: malformed JSON is a ``PROTOCOL``
    error finish, a body that ends before a terminal event a ``NETWORK`` one.

    Terminal events: ``response.completed`` -> stop (tool-calls when the
    answer has a tool call); ``response.incomplete`` with reason
    ``max_output_tokens`` -> max-tokens, ``content_filter`` -> error
    ``INVALID_REQUEST``, any other reason -> error ``SERVER_ERROR``;
    ``response.failed`` and the ``error`` event -> the failure its error code
    classifies to (``invalid_*`` codes -> ``INVALID_REQUEST``). Usage
    (``response.usage`` of the terminal event) comes before the finish.
    Pure computation: no I/O.
    """

    __slots__ = ("_model", "_response_id", "_status", "_summary_at", "_t")

    def __init__(self, *, request_id: str | None = None) -> None:
        self._t = BlockTracker(request_id=request_id, empty_arguments="{}")
        self._response_id: str | None = None
        self._model: str | None = None
        self._status: str | None = None
        #: The summary part each reasoning block last received text for.
        self._summary_at: dict[int, int] = {}

    @property
    def finished(self) -> bool:
        """True once a ``finish`` chunk has been returned."""
        return self._t.done

    def push(self, data: bytes) -> list[StreamChunk]:
        """Decode one ``data:`` payload; return the chunks it produces."""
        t = self._t
        if t.done:
            return []
        try:
            event = _decoder.decode(data)
        except _BAD_JSON as exc:
            t.fail(ErrorCode.PROTOCOL, f"malformed event from the provider: {exc}")
            return t.take()
        kind = event.type
        if kind in _TEXT_DELTAS:
            block = self._block(event, "text")
            if block is not None and block.kind == "text":
                t.text(block, event.delta)
        elif kind in _REASONING_DELTAS:
            self._reasoning(event)
        elif kind == "response.function_call_arguments.delta":
            block = self._block(event, None)
            if block is not None and block.kind == "tool-call":
                t.tool_call(block, event.delta)
        elif kind == "response.output_item.added":
            self._added(event)
        elif kind == "response.output_item.done":
            self._done(event)
        elif kind == "response.function_call_arguments.done":
            block = self._block(event, None)
            if block is not None and block.kind == "tool-call" and not block.parts:
                t.tool_call(block, event.arguments)
        elif kind in _TERMINAL:
            self._terminal(kind, event.response)
        elif kind == "error":
            nested = event.error or _Error()
            t.fail_with(
                _failure(event.code or nested.code, event.message or nested.message, nested.type)
            )
        elif kind == "response.created" and event.response is not None:
            self._response_id = event.response.id
            self._model = event.response.model
        # Other events (content parts, annotations, built-in tools) add nothing.
        return t.take()

    def end(self) -> list[StreamChunk]:
        """The body ended: a ``NETWORK`` error finish unless a finish was already returned."""
        self._t.end("response.completed")
        return self._t.take()

    # --- internals ---

    @staticmethod
    def _key(event: _Event) -> Hashable:
        if event.output_index is not None:
            return ("output", event.output_index)
        return ("item", event.item_id)

    def _block(self, event: _Event, kind: str | None) -> Block | None:
        """The block of the event's item; a text or reasoning block opens on first use."""
        key = self._key(event)
        block = self._t.get(key)
        if block is None and kind in ("text", "reasoning"):
            block = self._t.open("text" if kind == "text" else "reasoning", key)
        return block

    def _reasoning(self, event: _Event) -> None:
        block = self._block(event, "reasoning")
        if block is None or block.kind != "reasoning" or not event.delta:
            return
        at = self._summary_at.get(block.index)
        if at is not None and event.summary_index != at and block.parts:
            self._t.reasoning(block, "\n\n")  # a new summary part
        self._summary_at[block.index] = event.summary_index
        self._t.reasoning(block, event.delta)

    def _added(self, event: _Event) -> None:
        item = event.item
        if item is None or item.type != "function_call":
            return  # messages and reasoning open on their first delta
        key = self._key(event)
        if self._t.get(key) is not None:
            return
        block = self._t.open("tool-call", key)
        self._t.tool_call(
            block, item.arguments, call_id=item.call_id or item.id or "", name=item.name or ""
        )

    def _done(self, event: _Event) -> None:
        t = self._t
        item = event.item
        key = self._key(event)
        block = t.get(key)
        if item is not None and item.type == "reasoning" and item.encrypted_content:
            if block is None:
                # Reasoning with no summary text still carries encrypted state.
                block = t.open("reasoning", key)
            block.replay = {
                "id": item.id,
                "encrypted": item.encrypted_content,
                "summary": [part.text for part in item.summary or ()],
            }
        elif item is not None and item.type == "function_call" and block is None:
            # A call announced only when done: it arrives whole.
            block = t.open("tool-call", key)
            t.tool_call(
                block, item.arguments, call_id=item.call_id or item.id or "", name=item.name or ""
            )
        if block is not None:
            t.close(block)

    def _terminal(self, kind: str, response: _Response | None) -> None:
        t = self._t
        response = response or _Response()
        if response.id:
            self._response_id = response.id
        if response.model:
            self._model = response.model
        self._status = response.status
        usage = _usage(response.usage) if response.usage is not None else None
        reason: FinishReason
        if kind == "response.failed":
            error = response.error or _Error(message="the response failed")
            failure = _failure(error.code, error.message, error.type)
            if failure.request_id is None and t.request_id is not None:
                failure = msgspec.structs.replace(failure, request_id=t.request_id)
            reason = FinishError(failure=failure)
        elif kind == "response.incomplete":
            why = response.incomplete_details.reason if response.incomplete_details else None
            if why == "max_output_tokens":
                reason = FinishMaxTokens()
            elif why == "content_filter":
                reason = t.failure(
                    ErrorCode.INVALID_REQUEST,
                    "the provider's content filter stopped the response "
                    "(incomplete_details.reason content_filter)",
                )
            else:
                reason = t.failure(
                    ErrorCode.SERVER_ERROR,
                    f"the response is incomplete (incomplete_details.reason {why})",
                )
        elif any(block.kind == "tool-call" for block in t.blocks):
            reason = FinishToolCalls()
        else:
            reason = FinishStop()
        response_facts = {
            key: value
            for key, value in (
                ("id", self._response_id),
                ("model", self._model),
                ("status", self._status),
            )
            if value is not None
        }
        envelope = ReplayEnvelope(response=response_facts, blocks=t.replay_blocks())
        t.finish(reason, usage=usage, replay_state=envelope)


# --- request body -------------------------------------------------------------


def _image(image: ImageBlock, image_input: bool) -> dict[str, Any]:
    if not image_input:
        return {"type": "input_text", "text": image_placeholder(image)}
    url = image.url if image.url is not None else f"data:{image.media_type};base64,{image.data}"
    return {"type": "input_image", "image_url": url, "detail": "auto"}


def _user_items(message: Message, image_input: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if type(block) is TextBlock:
            parts.append({"type": "input_text", "text": block.text})
        elif type(block) is ImageBlock:
            parts.append(_image(block, image_input))
        elif type(block) is ToolResultBlock:
            images: list[ImageBlock] = []
            output = tool_result_text(block, images, image_input)
            out.append(
                {"type": "function_call_output", "call_id": block.tool_call_id, "output": output}
            )
            if images:
                parts.append(
                    {"type": "input_text", "text": f"[images of tool result {block.tool_call_id}]"}
                )
                parts.extend(_image(image, True) for image in images)
        elif type(block) is ToolCallBlock:
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                f"tool call {block.id!r} is in a user message; tool calls belong to "
                "assistant messages",
            )
    if parts:
        out.append({"type": "message", "role": "user", "content": parts})
    return out


def _reasoning_item(entry: Any) -> dict[str, Any] | None:
    if not isinstance(entry, dict):
        return None
    encrypted, item_id = entry.get("encrypted"), entry.get("id")
    if not (isinstance(encrypted, str) and encrypted):
        return None
    summary = entry.get("summary")
    texts = [s for s in summary if isinstance(s, str)] if isinstance(summary, list) else []
    item: dict[str, Any] = {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text} for text in texts],
        "encrypted_content": encrypted,
    }
    if isinstance(item_id, str) and item_id:
        item["id"] = item_id
    return item


def _assistant_items(message: Message) -> list[dict[str, Any]]:
    entries = replay_entries(message)
    out: list[dict[str, Any]] = []
    texts: list[str] = []

    def flush() -> None:
        if texts:
            out.append({"type": "message", "role": "assistant", "content": "".join(texts)})
            texts.clear()

    for position, block in enumerate(message.content):
        if type(block) is TextBlock:
            texts.append(block.text)
        elif type(block) is ImageBlock:
            texts.append(image_placeholder(block))
        elif type(block) is ReasoningBlock:
            item = _reasoning_item(entries[position] if entries is not None else None)
            if item is not None:  # reasoning without its encrypted state cannot go back
                flush()
                out.append(item)
        elif type(block) is ToolCallBlock:
            flush()
            out.append(
                {
                    "type": "function_call",
                    "call_id": block.id,
                    "name": block.name,
                    "arguments": block.arguments,
                }
            )
        elif type(block) is ToolResultBlock:
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                f"tool result for {block.tool_call_id!r} is in an assistant message; "
                "tool results belong to user messages",
            )
    flush()
    return out


def _text_format(fmt: ResponseFormat) -> dict[str, Any]:
    if type(fmt) is JsonObjectFormat:
        return {"type": "json_object"}
    assert type(fmt) is JsonSchemaFormat, fmt
    out: dict[str, Any] = {"type": "json_schema", "name": fmt.name or "response"}
    out["schema"] = fmt.schema
    if fmt.description is not None:
        out["description"] = fmt.description
    if fmt.strict is not None:
        out["strict"] = fmt.strict
    return out


def build_responses_body(
    options: GenerateOptions, *, image_input: bool, reasoning: bool
) -> dict[str, Any]:
    """The Responses API request body for ``options`` (a JSON-ready dict).

    ``store`` is false: nothing is kept by the provider, and the conversation
    goes whole in ``input``. System text (`system_prompt`) is
    ``instructions``. Tool results are ``function_call_output`` items (text;
    their images follow in a user message when ``image_input``); images are
    ``input_image`` parts (a ``data:`` URL or the URL) or placeholders.
    Reasoning goes back as ``reasoning`` items with their encrypted content,
    from the message's replay envelope; reasoning without it is left out.
    ``reasoning`` (a reasoning model) asks for summaries and the encrypted
    reasoning (``include``), and leaves ``temperature`` out, which reasoning
    models refuse; an explicit effort goes to ``reasoning.effort``. A tool
    choice is ``tool_choice``, structured output ``text.format``, and a tool's
    ``strict`` its ``strict`` (False unless the tool says True).

    Raises `LlmError` (``INVALID_REQUEST``) for stop sequences (the Responses
    API has none) and for a tool block in the wrong role.
    """
    if options.stop:
        raise LlmError(
            ErrorCode.INVALID_REQUEST,
            "the OpenAI Responses API has no stop sequences; leave `stop` unset or use a "
            "chat-completions route",
        )
    items: list[dict[str, Any]] = []
    for message in options.messages:
        if message.role == "user":
            items.extend(_user_items(message, image_input))
        elif message.role == "assistant":
            items.extend(_assistant_items(message))
    body: dict[str, Any] = {
        "model": options.model,
        "input": items,
        "stream": True,
        "store": False,
    }
    system = system_prompt(options)
    if system:
        body["instructions"] = system
    if options.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                # The API's own default is strict; llmrt's is the schema as written.
                "strict": bool(tool.strict),
            }
            for tool in options.tools
        ]
    choice = options.tool_choice
    if choice is not None:
        body["tool_choice"] = (
            {"type": "function", "name": choice.name}
            if type(choice) is NamedToolChoice
            else str(choice)
        )
    if options.response_format is not None:
        body["text"] = {"format": _text_format(options.response_format)}
    if options.max_tokens is not None:
        body["max_output_tokens"] = options.max_tokens
    effort = options.reasoning_effort
    if reasoning or effort is not None:
        settings: dict[str, Any] = {"summary": "auto"}
        if effort is not None:
            settings["effort"] = effort
        body["reasoning"] = settings
        body["include"] = ["reasoning.encrypted_content"]
    elif options.temperature is not None:
        body["temperature"] = options.temperature
    return body
