"""OpenAI chat-completions wire translation (OpenAI and every compatible server), without I/O.

Three parts:

* `Dialect`: what differs between servers that speak chat completions, as
  data (where reasoning arrives, how usage counts it, what goes back);
  `DIALECTS` holds the built-in ones by name (both defined in
  `llmrt.adapters._dialects`, which the presets import without this module);
* `OpenAIStreamDecoder` turns the ``data:`` payloads of a streamed chat
  completion into llmrt `StreamChunk`s;
* `build_openai_body` turns a `GenerateOptions` into the request body.

Decoding rules (see ``tests/wire/README.md``): empty and null deltas never
open a block; llmrt block indices follow first-seen order across reasoning,
text and tool calls; tool-call arguments are concatenated raw, never parsed;
usage and the finish are emitted only at ``[DONE]``, usage first, because
OpenAI sends usage after the finish chunk and DeepSeek on the same chunk.
``delta.content`` may be a string or a list of typed parts (Mistral's
``text`` and ``thinking`` parts). Every failure ends the stream with an
``error`` finish; nothing raises.
"""

from __future__ import annotations

import copy
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
    JsonObjectFormat,
    JsonSchemaFormat,
    LlmError,
    LlmFailure,
    Message,
    NamedToolChoice,
    ReasoningBlock,
    ResponseFormat,
    StreamChunk,
    TextBlock,
    TokenUsage,
    ToolCallBlock,
    ToolChoice,
    ToolResultBlock,
    ToolSchema,
)
from llmrt.vocabulary import (
    require_block_types,
)

from ._blocks import Block, BlockTracker
from ._bodies import describe_json_error
from ._classify import classify_stream_error
from ._dialects import DIALECTS, Dialect, UsageRule, dialect_of
from ._prompt import image_placeholder, system_prompt, tool_result_text

__all__ = [
    "DIALECTS",
    "Dialect",
    "OpenAIStreamDecoder",
    "build_openai_body",
    "dialect_of",
    "openai_response_format",
]


# --- provider structs: only the fields we read; unknown fields are ignored ---


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _Function | None = None


class _Part(msgspec.Struct):
    """One typed content part (Mistral): ``text``, or ``thinking`` holding text parts."""

    type: str = ""
    text: str | None = None
    thinking: list[_Part] | str | None = None


class _Delta(msgspec.Struct):
    content: str | list[_Part] | None = None
    reasoning_content: str | None = None
    #: Any type: only a string is reasoning text (an object here is some other server's shape).
    reasoning: Any = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _CompletionDetails(msgspec.Struct):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None
    prompt_cache_hit_tokens: int | None = None
    prompt_cache_miss_tokens: int | None = None


class _ApiError(msgspec.Struct):
    message: str | None = None
    type: str | None = None
    code: str | int | None = None


class _GroqExtra(msgspec.Struct):
    usage: _Usage | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: _ApiError | str | None = None
    #: Groq's own place for the stream's usage (on the last chunk).
    x_groq: _GroqExtra | None = None


_decoder = msgspec.json.Decoder(_Chunk)
_BAD_JSON = (msgspec.DecodeError, msgspec.ValidationError)

_STOP = FinishStop()
_TOOL_CALLS = FinishToolCalls()
_MAX_TOKENS = FinishMaxTokens()


def _usage(raw: _Usage, rule: UsageRule) -> TokenUsage:
    hit, miss = raw.prompt_cache_hit_tokens, raw.prompt_cache_miss_tokens
    details = raw.prompt_tokens_details
    cached = details.cached_tokens if details is not None else None
    cache_read: int | None
    if hit is not None and miss is not None:
        # DeepSeek: hit + miss = prompt_tokens; the miss count is the uncached input.
        input_tokens, cache_read = miss, hit
    else:
        # OpenAI: cached_tokens is inside prompt_tokens.
        input_tokens = max(0, raw.prompt_tokens - (cached or 0))
        cache_read = cached
    completion = raw.completion_tokens_details
    reasoning = completion.reasoning_tokens if completion is not None else None
    output = raw.completion_tokens
    if reasoning:
        excluded = rule == "excluded" or (
            rule == "by-total"
            and raw.total_tokens == raw.prompt_tokens + raw.completion_tokens + reasoning
        )
        # llmrt's output count includes reasoning; a count below the reasoning
        # it contains cannot include it, whatever the dialect says.
        if excluded or output < reasoning:
            output += reasoning
    return TokenUsage(
        input_tokens=input_tokens,
        output_tokens=output,
        cache_read_tokens=cache_read,
        reasoning_tokens=reasoning,
    )


def _classify_inband(provider_kind: str, error: _ApiError | str) -> LlmFailure:
    """Classify an in-band ``{"error": ...}`` object of a 200 stream."""
    if isinstance(error, str):
        return classify_stream_error(provider_kind, {"error": {"message": error}})
    return classify_stream_error(provider_kind, {"error": msgspec.structs.asdict(error)})


class OpenAIStreamDecoder:
    """Incremental decoder of one streamed chat completion (OpenAI or DeepSeek).

    Feed each SSE ``data:`` payload to `push` (including ``[DONE]``) and call
    `end` when the body ends. Both return the chunks to emit, possibly none.
    The last chunk ever returned is a ``finish``; after it, both return ``[]``.
    Never raises on provider input: malformed JSON is a ``PROTOCOL`` error
    finish, an in-band error object a classified error finish, and a body
    that ends before ``[DONE]`` a ``NETWORK`` error finish.

    Only choice 0 is read (llmrt never asks for ``n > 1``). Refusal text
    (``delta.refusal``) is what the model says to the user, so it joins the
    text block. Pure computation: no I/O, no checkpoints.
    """

    __slots__ = (
        "_blocks",
        "_dialect",
        "_finish_reason",
        "_saw_tool_call",
        "_text_block",
        "_usage",
    )

    def __init__(
        self,
        *,
        provider_kind: str = "openai",
        request_id: str | None = None,
        dialect: Dialect | None = None,
    ) -> None:
        self._dialect = dialect or dialect_of(provider_kind)
        self._blocks = BlockTracker(request_id=request_id)
        self._text_block: Block | None = None
        self._saw_tool_call = False
        self._finish_reason: str | None = None
        self._usage: _Usage | None = None

    @property
    def finished(self) -> bool:
        """True once a ``finish`` chunk has been returned."""
        return self._blocks.done

    def push(self, data: bytes) -> list[StreamChunk]:
        """Decode one ``data:`` payload; return the chunks it produces."""
        blocks = self._blocks
        if blocks.done:
            return []
        if data.startswith(b"[DONE]"):
            self._complete()
            return blocks.take()
        try:
            chunk = _decoder.decode(data)
        except _BAD_JSON as exc:
            blocks.fail(
                ErrorCode.PROTOCOL,
                f"malformed chunk from the provider: {describe_json_error(exc, data)}",
            )
            return blocks.take()
        if chunk.error is not None:
            blocks.fail_with(_classify_inband(self._dialect.name, chunk.error))
            return blocks.take()
        if chunk.usage is not None:
            self._usage = chunk.usage
        elif chunk.x_groq is not None and chunk.x_groq.usage is not None:
            self._usage = chunk.x_groq.usage
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None:
                # Reasoning precedes the answer, so it is read first.
                if delta.reasoning_content is not None or delta.reasoning is not None:
                    self._reasoning(self._reasoning_text(delta))
                content = delta.content
                if content:
                    if isinstance(content, str):
                        self._text(content)
                    else:
                        self._append_parts(content)
                if delta.refusal:
                    self._text(delta.refusal)
                if delta.tool_calls:
                    for call in delta.tool_calls:
                        self._append_tool(call)
            if choice.finish_reason is not None:
                self._finish_reason = choice.finish_reason
        return blocks.take()

    def end(self) -> list[StreamChunk]:
        """The body ended: a ``NETWORK`` error finish unless a finish was already returned."""
        self._blocks.end("[DONE]")
        return self._blocks.take()

    # --- internals ---

    def _reasoning_text(self, delta: _Delta) -> str | None:
        for field in self._dialect.reasoning_fields:
            text = delta.reasoning_content if field == "reasoning_content" else delta.reasoning
            if text and isinstance(text, str):
                return text
        return None

    def _append_parts(self, parts: list[_Part]) -> None:
        # Parts of other types (references, images) have no streamed llmrt form.
        for part in parts:
            if part.type == "text":
                self._text(part.text)
            elif part.type == "thinking":
                inner = part.thinking
                if isinstance(inner, str):
                    self._reasoning(inner)
                else:
                    for piece in inner or ():
                        if piece.type in ("text", ""):
                            self._reasoning(piece.text)

    def _text(self, text: str | None) -> None:
        # Empty and null deltas never open a block.
        if text:
            block = self._text_block
            if block is None:
                block = self._text_block = self._blocks.open("text", "text")
            self._blocks.text(block, text)

    def _reasoning(self, text: str | None) -> None:
        if text:
            block = self._blocks.get("reasoning") or self._blocks.open("reasoning", "reasoning")
            self._blocks.reasoning(block, text)

    def _append_tool(self, call: _ToolCall) -> None:
        fn = call.function
        key = ("tool", call.index)
        block = self._blocks.get(key)
        call_id = None
        if block is None:
            block = self._blocks.open("tool-call", key)
            self._saw_tool_call = True
            # A compatible server that never sends an id still needs a stable one.
            call_id = call.id or f"call_{block.index}"
        self._blocks.tool_call(
            block,
            fn.arguments if fn is not None else None,
            call_id=call_id,
            name=fn.name if fn is not None else None,
        )

    def _complete(self) -> None:
        raw = self._usage
        usage = _usage(raw, self._dialect.usage_reasoning) if raw is not None else None
        self._blocks.finish(self._reason(), usage=usage)

    def _reason(self) -> FinishReason:
        reason = self._finish_reason
        if reason == "length":
            return _MAX_TOKENS
        if reason in ("tool_calls", "function_call") or (reason is None and self._saw_tool_call):
            return _TOOL_CALLS
        if reason == "content_filter":
            # Filtered content is a property of this request: the same request is
            # likely filtered again, so it is not a retryable code.
            return self._blocks.failure(
                ErrorCode.INVALID_REQUEST,
                "the provider's content filter stopped the response (finish_reason content_filter)",
            )
        if reason == "insufficient_system_resource":
            return self._blocks.failure(
                ErrorCode.OVERLOADED,
                "the provider ran out of capacity (finish_reason insufficient_system_resource)",
            )
        # ``stop``, an absent reason, and reasons of non-standard servers; the
        # tracker turns a stop without content into EMPTY_RESPONSE.
        return _STOP


# --- request body -------------------------------------------------------------


def _image_part(image: ImageBlock) -> dict[str, Any]:
    url = image.url if image.url is not None else f"data:{image.media_type};base64,{image.data}"
    return {"type": "image_url", "image_url": {"url": url}}


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    # A lone text part goes as a plain string, the form every compatible server accepts.
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    return parts


def _user_messages(message: Message, image_input: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if type(block) is TextBlock:
            parts.append({"type": "text", "text": block.text})
        elif type(block) is ImageBlock:
            if image_input:
                parts.append(_image_part(block))
            else:
                parts.append({"type": "text", "text": image_placeholder(block)})
        elif type(block) is ToolResultBlock:
            # Tool messages carry text only; their images follow in a user message.
            images: list[ImageBlock] = []
            text = tool_result_text(block, images, image_input)
            out.append({"role": "tool", "tool_call_id": block.tool_call_id, "content": text})
            if images:
                parts.append(
                    {"type": "text", "text": f"[images of tool result {block.tool_call_id}]"}
                )
                parts.extend(_image_part(image) for image in images)
        elif type(block) is ToolCallBlock:
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                f"tool call {block.id!r} is in a user message; tool calls belong to "
                "assistant messages",
            )
        # Reasoning in a user message has no OpenAI form; it is left out.
    if parts:
        out.append({"role": "user", "content": _content(parts)})
    return out


def _assistant_message(message: Message, dialect: Dialect) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for block in message.content:
        if type(block) is TextBlock:
            if block.text:
                parts.append({"type": "text", "text": block.text})
        elif type(block) is ToolCallBlock:
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": block.arguments},
                }
            )
        elif type(block) is ReasoningBlock:
            reasoning.append(block.text)
        elif type(block) is ImageBlock:
            parts.append({"type": "text", "text": image_placeholder(block)})
        elif type(block) is ToolResultBlock:
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                f"tool result for {block.tool_call_id!r} is in an assistant message; "
                "tool results belong to user messages",
            )
    out: dict[str, Any] = {"role": "assistant", "content": _content(parts) if parts else None}
    if calls:
        out["tool_calls"] = calls
        # DeepSeek thinking mode requires the reasoning of a tool-calling turn
        # to be sent back in every later request (400 otherwise); it ignores it
        # on turns without tool calls, so it is sent only where it is needed.
        if dialect.reasoning_back_field is not None and reasoning:
            out[dialect.reasoning_back_field] = "".join(reasoning)
    elif not parts:
        out["content"] = ""
    return out


def _tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    if type(choice) is NamedToolChoice:
        return {"type": "function", "function": {"name": choice.name}}
    return str(choice)


def openai_response_format(fmt: ResponseFormat) -> dict[str, Any]:
    """Chat completions' ``response_format`` for a `ResponseFormat`."""
    if type(fmt) is JsonObjectFormat:
        return {"type": "json_object"}
    assert type(fmt) is JsonSchemaFormat, fmt
    schema: dict[str, Any] = {"name": fmt.name or "response", "schema": fmt.schema}
    if fmt.description is not None:
        schema["description"] = fmt.description
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": schema}


def _function(tool: ToolSchema) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
    }
    if tool.strict is not None:
        function["strict"] = tool.strict
    return function


def build_openai_body(
    options: GenerateOptions,
    *,
    provider_kind: str = "openai",
    dialect: Dialect | None = None,
    image_input: bool,
    include_usage: bool = True,
    max_tokens_field: str = "max_tokens",
) -> dict[str, Any]:
    """The chat-completions request body for ``options`` (a JSON-ready dict).

    ``image_input`` says whether the route accepts images: if not, each image
    becomes a ``[image: <media type>]`` text placeholder. ``max_tokens_field``
    names the output-cap field (OpenAI's reasoning models want
    ``max_completion_tokens``). ``dialect`` (default: the one named
    ``provider_kind``) decides the rest: reasoning blocks are not sent back
    except in its ``reasoning_back_field`` on tool-calling turns (DeepSeek);
    the effort ``none`` becomes its ``effort_none_body`` where it has one
    (DeepSeek: thinking disabled); any other effort is sent as
    ``reasoning_effort``. ``tool_choice``, ``response_format`` and each tool's
    ``strict`` go as OpenAI's API defines them (the runtime has checked them
    against the dialect's ``features``).

    Raises `LlmError` (``INVALID_REQUEST``) for a tool call in a user message
    or a tool result in an assistant message, and for a registered block type
    (`llmrt.vocabulary.register_content_block`) that chat completions has no form for.
    """
    # Extension blocks would otherwise be dropped silently below.
    require_block_types(options.messages, route=options.provider)
    dialect = dialect or dialect_of(provider_kind)
    messages: list[dict[str, Any]] = []
    system = system_prompt(options)
    if system:
        messages.append({"role": "system", "content": system})
    for message in options.messages:
        if message.role == "user":
            messages.extend(_user_messages(message, image_input))
        elif message.role == "assistant":
            messages.append(_assistant_message(message, dialect))
    body: dict[str, Any] = {"model": options.model, "messages": messages, "stream": True}
    if include_usage and dialect.stream_usage:
        body["stream_options"] = {"include_usage": True}
    if options.tools:
        body["tools"] = [
            {"type": "function", "function": _function(tool)} for tool in options.tools
        ]
    if options.tool_choice is not None:
        body["tool_choice"] = _tool_choice(options.tool_choice)
    if options.response_format is not None:
        body["response_format"] = openai_response_format(options.response_format)
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if options.max_tokens is not None:
        body[max_tokens_field] = options.max_tokens
    if options.stop:
        body["stop"] = list(options.stop)
    effort = options.reasoning_effort
    if effort is not None:
        if effort == "none" and dialect.effort_none_body is not None:
            body.update(copy.deepcopy(dict(dialect.effort_none_body)))
        else:
            body["reasoning_effort"] = effort
    return body
