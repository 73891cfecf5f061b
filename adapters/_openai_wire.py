"""OpenAI chat-completions wire translation (OpenAI and DeepSeek), without I/O.

Two directions:

* `OpenAIStreamDecoder` turns the ``data:`` payloads of a streamed chat
  completion into llmrt `StreamChunk`s;
* `build_openai_body` turns a `GenerateOptions` into the request body.

Decoding rules (see ``tests/wire/README.md``): empty and null deltas never
open a block; llmrt block indices follow first-seen order across reasoning,
text and tool calls; tool-call arguments are concatenated raw, never parsed;
usage and the finish are emitted only at ``[DONE]``, usage first, because
OpenAI sends usage after the finish chunk and DeepSeek on the same chunk.
Every failure ends the stream with an ``error`` finish; nothing raises.
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
    ReasoningBlock,
    ReasoningDelta,
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

__all__ = ["OpenAIStreamDecoder", "build_openai_body", "image_placeholder", "system_prompt"]


# --- provider structs: only the fields we read; unknown fields are ignored ---


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
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
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None
    prompt_cache_hit_tokens: int | None = None
    prompt_cache_miss_tokens: int | None = None


class _ApiError(msgspec.Struct):
    message: str | None = None
    type: str | None = None
    code: str | int | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: _ApiError | str | None = None


_decoder = msgspec.json.Decoder(_Chunk)
_BAD_JSON = (msgspec.DecodeError, msgspec.ValidationError)

_STOP = FinishStop()
_TOOL_CALLS = FinishToolCalls()
_MAX_TOKENS = FinishMaxTokens()


def _usage(raw: _Usage) -> TokenUsage:
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
    return TokenUsage(
        input_tokens=input_tokens,
        output_tokens=raw.completion_tokens,
        cache_read_tokens=cache_read,
        reasoning_tokens=completion.reasoning_tokens if completion is not None else None,
    )


def _classify_inband(provider_kind: str, error: _ApiError | str) -> LlmFailure:
    """Classify an in-band ``{"error": ...}`` object of a 200 stream."""
    if isinstance(error, str):
        return classify_stream_error(provider_kind, {"error": {"message": error}})
    return classify_stream_error(provider_kind, {"error": msgspec.structs.asdict(error)})


class _Open:
    """An open llmrt block: its index, kind and accumulated fragments."""

    __slots__ = ("call_id", "index", "kind", "name", "parts")

    def __init__(self, index: int, kind: str) -> None:
        self.index = index
        self.kind = kind
        self.parts: list[str] = []
        self.call_id: str | None = None
        self.name: str | None = None

    def block(self) -> ContentBlock:
        text = "".join(self.parts)
        if self.kind == "text":
            return TextBlock(text=text)
        if self.kind == "reasoning":
            return ReasoningBlock(text=text)
        return ToolCallBlock(id=self.call_id or "", name=self.name or "", arguments=text)


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
        "_done",
        "_finish_reason",
        "_provider_kind",
        "_reasoning",
        "_request_id",
        "_saw_tool_call",
        "_text",
        "_tools",
        "_usage",
    )

    def __init__(self, *, provider_kind: str = "openai", request_id: str | None = None) -> None:
        self._provider_kind = provider_kind
        self._request_id = request_id
        self._blocks: list[_Open] = []
        self._text: _Open | None = None
        self._reasoning: _Open | None = None
        self._tools: dict[int, _Open] = {}
        self._saw_tool_call = False
        self._finish_reason: str | None = None
        self._usage: _Usage | None = None
        self._done = False

    @property
    def finished(self) -> bool:
        """True once a ``finish`` chunk has been returned."""
        return self._done

    def push(self, data: bytes) -> list[StreamChunk]:
        """Decode one ``data:`` payload; return the chunks it produces."""
        if self._done:
            return []
        if data.startswith(b"[DONE]"):
            return self._complete()
        try:
            chunk = _decoder.decode(data)
        except _BAD_JSON as exc:
            return self._fail(
                ErrorCode.PROTOCOL,
                f"malformed chunk from the provider: {describe_json_error(exc, data)}",
            )
        if chunk.error is not None:
            self._done = True
            failure = _classify_inband(self._provider_kind, chunk.error)
            if self._request_id is not None:
                failure = msgspec.structs.replace(failure, request_id=self._request_id)
            return [Finish(reason=FinishError(failure=failure))]
        if chunk.usage is not None:
            self._usage = chunk.usage
        out: list[StreamChunk] = []
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None:
                # Reasoning precedes the answer, so it is read first.
                if delta.reasoning_content:
                    self._append_reasoning(delta.reasoning_content, out)
                if delta.content:
                    self._append_text(delta.content, out)
                if delta.refusal:
                    self._append_text(delta.refusal, out)
                if delta.tool_calls:
                    for call in delta.tool_calls:
                        self._append_tool(call, out)
            if choice.finish_reason is not None:
                self._finish_reason = choice.finish_reason
        return out

    def end(self) -> list[StreamChunk]:
        """The body ended: a ``NETWORK`` error finish unless a finish was already returned."""
        if self._done:
            return []
        return self._fail(ErrorCode.NETWORK, "response ended before [DONE]")

    # --- internals ---

    def _open(self, kind: str, out: list[StreamChunk]) -> _Open:
        state = _Open(len(self._blocks), kind)
        self._blocks.append(state)
        out.append(BlockStart(index=state.index, block_type=kind))
        return state

    def _append_text(self, text: str, out: list[StreamChunk]) -> None:
        state = self._text
        if state is None:
            state = self._text = self._open("text", out)
        state.parts.append(text)
        out.append(TextDelta(index=state.index, text=text))

    def _append_reasoning(self, text: str, out: list[StreamChunk]) -> None:
        state = self._reasoning
        if state is None:
            state = self._reasoning = self._open("reasoning", out)
        state.parts.append(text)
        out.append(ReasoningDelta(index=state.index, text=text))

    def _append_tool(self, call: _ToolCall, out: list[StreamChunk]) -> None:
        fn = call.function
        name = fn.name if fn is not None else None
        arguments = (fn.arguments if fn is not None else None) or ""
        state = self._tools.get(call.index)
        new_id = new_name = None
        if state is None:
            state = self._tools[call.index] = self._open("tool-call", out)
            self._saw_tool_call = True
            # A compatible server that never sends an id still needs a stable one.
            state.call_id = new_id = call.id or f"call_{state.index}"
        if state.name is None and name:
            state.name = new_name = name
        if new_id is None and new_name is None and not arguments:
            return
        state.parts.append(arguments)
        out.append(
            ToolCallDelta(index=state.index, id=new_id, name=new_name, arguments_delta=arguments)
        )

    def _fail(self, code: ErrorCode, message: str) -> list[StreamChunk]:
        self._done = True
        failure = LlmFailure(message=message, code=code, request_id=self._request_id)
        return [Finish(reason=FinishError(failure=failure))]

    def _complete(self) -> list[StreamChunk]:
        self._done = True
        out: list[StreamChunk] = [BlockEnd(index=s.index, block=s.block()) for s in self._blocks]
        if self._usage is not None:
            out.append(UsageChunk(usage=_usage(self._usage)))
        out.append(Finish(reason=self._reason()))
        return out

    def _reason(self) -> FinishReason:
        reason = self._finish_reason
        if reason == "length":
            return _MAX_TOKENS
        if reason in ("tool_calls", "function_call") or (reason is None and self._saw_tool_call):
            return _TOOL_CALLS
        if reason == "content_filter":
            # Filtered content is a property of this request: the same request is
            # likely filtered again, so it is not a retryable code.
            return self._error(
                ErrorCode.INVALID_REQUEST,
                "the provider's content filter stopped the response (finish_reason content_filter)",
            )
        if reason == "insufficient_system_resource":
            return self._error(
                ErrorCode.OVERLOADED,
                "the provider ran out of capacity (finish_reason insufficient_system_resource)",
            )
        # ``stop``, an absent reason, and reasons of non-standard servers.
        if not self._blocks:
            return self._error(ErrorCode.EMPTY_RESPONSE, "the model returned no content")
        return _STOP

    def _error(self, code: ErrorCode, message: str) -> FinishError:
        return FinishError(
            failure=LlmFailure(message=message, code=code, request_id=self._request_id)
        )


# --- request body -------------------------------------------------------------


def image_placeholder(image: ImageBlock) -> str:
    """The text that stands for an image on a route that cannot see images."""
    return f"[image: {image.media_type}]"


def system_prompt(options: GenerateOptions) -> str:
    """The system prompt: ``options.system``, then the text of every system-role message.

    System-role messages inside ``options.messages`` are folded into the one
    system prompt, in order, separated by blank lines (images in them become
    placeholders), so every provider sees a single system slot first.
    """
    parts = [options.system] if options.system else []
    for message in options.messages:
        if message.role != "system":
            continue
        for block in message.content:
            if type(block) is TextBlock:
                if block.text:
                    parts.append(block.text)
            elif type(block) is ImageBlock:
                parts.append(image_placeholder(block))
    return "\n\n".join(parts)


def _image_part(image: ImageBlock) -> dict[str, Any]:
    url = image.url if image.url is not None else f"data:{image.media_type};base64,{image.data}"
    return {"type": "image_url", "image_url": {"url": url}}


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    # A lone text part goes as a plain string, the form every compatible server accepts.
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    return parts


def _tool_text(result: ToolResultBlock, images: list[ImageBlock], image_input: bool) -> str:
    texts: list[str] = ["[tool error]"] if result.is_error else []
    for block in result.content:
        if type(block) is TextBlock:
            texts.append(block.text)
        elif type(block) is ImageBlock:
            texts.append(image_placeholder(block))
            if image_input:
                images.append(block)
    return "\n\n".join(texts)


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
            text = _tool_text(block, images, image_input)
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


def _assistant_message(message: Message, provider_kind: str) -> dict[str, Any]:
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
        if provider_kind == "deepseek" and reasoning:
            out["reasoning_content"] = "".join(reasoning)
    elif not parts:
        out["content"] = ""
    return out


def build_openai_body(
    options: GenerateOptions,
    *,
    provider_kind: str = "openai",
    image_input: bool,
    include_usage: bool = True,
    max_tokens_field: str = "max_tokens",
) -> dict[str, Any]:
    """The chat-completions request body for ``options`` (a JSON-ready dict).

    ``image_input`` says whether the route accepts images: if not, each image
    becomes a ``[image: <media type>]`` text placeholder. ``max_tokens_field``
    names the output-cap field (OpenAI's reasoning models want
    ``max_completion_tokens``). Reasoning blocks are not sent back, except
    DeepSeek's ``reasoning_content`` on tool-calling turns. For DeepSeek, the
    effort ``none`` turns thinking off; any other effort is sent as
    ``reasoning_effort``, as it is for OpenAI.

    Raises `LlmError` (``INVALID_REQUEST``) for a tool call in a user message
    or a tool result in an assistant message.
    """
    messages: list[dict[str, Any]] = []
    system = system_prompt(options)
    if system:
        messages.append({"role": "system", "content": system})
    for message in options.messages:
        if message.role == "user":
            messages.extend(_user_messages(message, image_input))
        elif message.role == "assistant":
            messages.append(_assistant_message(message, provider_kind))
    body: dict[str, Any] = {"model": options.model, "messages": messages, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    if options.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in options.tools
        ]
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if options.max_tokens is not None:
        body[max_tokens_field] = options.max_tokens
    if options.stop:
        body["stop"] = list(options.stop)
    effort = options.reasoning_effort
    if effort is not None:
        if provider_kind == "deepseek" and effort == "none":
            body["thinking"] = {"type": "disabled"}
        else:
            body["reasoning_effort"] = effort
    return body
