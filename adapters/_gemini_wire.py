"""Google Gemini API wire translation (``streamGenerateContent?alt=sse``), without I/O.

Three parts:

* `GeminiStreamDecoder` turns the ``data:`` payloads of a streamed
  ``GenerateContentResponse`` into llmrt `StreamChunk`s;
* `build_gemini_body` turns a `GenerateOptions` into the request body.

Google's error objects (``{"error": {"code", "message", "status",
"details"}}``) are read by `llmrt.adapters._classify` (provider kind ``"gemini"``).

Part mapping (candidate 0 only; llmrt never asks for more): a text part with
``thought: true`` is reasoning, any other text part is text, and consecutive
parts of one kind form one block; a ``functionCall`` part carries its whole
call and becomes one tool-call block, closed at once (its ``args`` object is
passed on as the raw JSON text the provider sent). Parts with no llmrt form
(code execution, generated files) are skipped. A ``thoughtSignature`` is
replay state of the block its part belongs to; a part that carries only a
signature (Gemini sends one after the last text) gives it to the block
before it. Replay envelope of a successful finish: ``response`` holds the
response id, model version and native finish reason; ``blocks`` one entry per
block, ``{"signature": ...}`` or None.

The stream has no end marker: the response ends when the body does. A body
that ends after a ``finishReason`` (or a prompt block) finishes the stream;
one that ends before is a ``NETWORK`` error. ``usageMetadata`` is cumulative
and the last one wins.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any, Final

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
    Message,
    NamedToolChoice,
    ReasoningBlock,
    ReplayEnvelope,
    StreamChunk,
    TextBlock,
    TokenUsage,
    ToolCallBlock,
    ToolResultBlock,
    ToolSource,
)

from ._blocks import Block, BlockKind, BlockTracker
from ._classify import classify_stream_error
from ._prompt import image_placeholder, replay_entries, system_prompt, tool_arguments

__all__ = [
    "GENERATED_CALL_ID_PREFIX",
    "SKIP_SIGNATURE",
    "GeminiStreamDecoder",
    "build_gemini_body",
]

#: Prefix of the tool-call ids llmrt makes up for calls that came without one.
#: Such ids are never sent back to Gemini (they are not Gemini's).
GENERATED_CALL_ID_PREFIX: Final = "gcall_"
#: Google's documented stand-in for a thought signature that was lost (Gemini 3
#: refuses a replayed function call without one).
SKIP_SIGNATURE: Final = "skip_thought_signature_validator"


# --- provider structs: only the fields we read; unknown fields are ignored ---


class _FunctionCall(msgspec.Struct, rename="camel"):
    name: str = ""
    id: str | None = None
    #: Kept as the raw JSON text the provider sent: arguments are never re-encoded.
    #: (An absent ``args`` is an empty Raw: msgspec reads ``Raw | None`` as null only.)
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _Part(msgspec.Struct, rename="camel"):
    text: str | None = None
    thought: bool = False
    thought_signature: str | None = None
    function_call: _FunctionCall | None = None


class _Content(msgspec.Struct):
    parts: list[_Part] | None = None


class _Candidate(msgspec.Struct, rename="camel"):
    index: int = 0
    content: _Content | None = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct, rename="camel"):
    prompt_token_count: int = 0
    cached_content_token_count: int | None = None
    candidates_token_count: int = 0
    thoughts_token_count: int | None = None
    tool_use_prompt_token_count: int | None = None


class _PromptFeedback(msgspec.Struct, rename="camel"):
    block_reason: str | None = None


class _Chunk(msgspec.Struct, rename="camel"):
    candidates: list[_Candidate] | None = None
    #: Restated on every chunk and only the last one counts: kept raw, decoded once at the end.
    usage_metadata: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    prompt_feedback: _PromptFeedback | None = None
    response_id: str | None = None
    model_version: str | None = None
    error: dict[str, Any] | None = None


log = logging.getLogger("llmrt.adapters.gemini")

_decoder = msgspec.json.Decoder(_Chunk)
_usage_decoder = msgspec.json.Decoder(_Usage)
_BAD_JSON = (msgspec.DecodeError, msgspec.ValidationError)

#: Finish reasons that say the provider's filters stopped the answer: the same
#: request is likely stopped again, so the failure is not retryable.
_FILTERED: Final = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "LANGUAGE",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
#: Finish reasons that say the model produced a tool call the API could not
#: accept. The request was valid; sampling again usually gives a well-formed
#: call, so these are the retryable ``SERVER_ERROR`` (not ``PROTOCOL``: the
#: wire itself is fine, and not ``INVALID_REQUEST``: nothing in the request is wrong).
_BAD_CALL: Final = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"})
#: The other documented reasons that end a response without a usable answer:
#: ``SERVER_ERROR`` (retryable). A reason not listed anywhere here is newer
#: than this decoder: see `GeminiStreamDecoder`.
_KNOWN_FAILED: Final = frozenset(
    {
        "OTHER",
        "FINISH_REASON_UNSPECIFIED",
        "IMAGE_OTHER",
        "NO_IMAGE",
        "TOO_MANY_TOOL_CALLS",
        "MISSING_THOUGHT_SIGNATURE",
    }
)


def _usage(raw: _Usage) -> TokenUsage:
    cached = raw.cached_content_token_count
    thoughts = raw.thoughts_token_count
    # promptTokenCount includes the cached part; the tool-use prompt (e.g.
    # search results) is billed as input but counted apart.
    input_tokens = max(0, raw.prompt_token_count - (cached or 0))
    input_tokens += raw.tool_use_prompt_token_count or 0
    return TokenUsage(
        input_tokens=input_tokens,
        # candidatesTokenCount leaves the thoughts out; llmrt's output includes them.
        output_tokens=raw.candidates_token_count + (thoughts or 0),
        cache_read_tokens=cached,
        reasoning_tokens=thoughts,
    )


class GeminiStreamDecoder:
    """Incremental decoder of one ``streamGenerateContent?alt=sse`` response.

    Feed each SSE ``data:`` payload to `push` and call `end` when the body
    ends; both return the chunks to emit. The last chunk ever returned is a
    ``finish``; after it both return ``[]``. Never raises on provider input:
    malformed JSON is a ``PROTOCOL`` error finish, an in-band ``error``
    object a classified error finish.

    Finish reasons: ``STOP`` -> stop (tool-calls when the answer has a tool
    call); ``MAX_TOKENS`` -> max-tokens; the filter reasons (``SAFETY``,
    ``RECITATION``, ``BLOCKLIST``, ``PROHIBITED_CONTENT``, ``SPII``,
    ``LANGUAGE``, ``IMAGE_*``) and a blocked prompt -> error
    ``INVALID_REQUEST``; ``MALFORMED_FUNCTION_CALL`` and
    ``UNEXPECTED_TOOL_CALL`` -> error ``SERVER_ERROR`` (retryable, see
    ``_BAD_CALL``); ``OTHER`` and the other documented reasons of
    ``_KNOWN_FAILED`` -> error ``SERVER_ERROR`` naming the reason. A reason
    this decoder does not know is newer than it: the answer streamed so far
    is kept, as ``STOP`` (tool-calls when it has a tool call; the
    empty-response rule when it has no block), with a logged warning and
    the native reason in the replay envelope. A payload that is valid JSON
    but not a ``GenerateContentResponse`` (none of its fields) is a
    ``PROTOCOL`` error finish. Pure computation: no I/O (one log line for
    an unknown reason).
    """

    __slots__ = (
        "_calls",
        "_current",
        "_finish_reason",
        "_model_version",
        "_pending_signature",
        "_prompt_block",
        "_response_id",
        "_t",
        "_usage",
    )

    def __init__(self, *, request_id: str | None = None) -> None:
        self._t = BlockTracker(request_id=request_id, empty_arguments="{}")
        self._current: Block | None = None
        self._pending_signature: str | None = None
        self._finish_reason: str | None = None
        self._prompt_block: str | None = None
        self._usage = msgspec.Raw()
        self._response_id: str | None = None
        self._model_version: str | None = None
        self._calls = 0

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
            chunk = _decoder.decode(data)
        except _BAD_JSON as exc:
            t.fail(ErrorCode.PROTOCOL, f"malformed chunk from the provider: {exc}")
            return t.take()
        if chunk.error is not None:
            t.fail_with(classify_stream_error("gemini", {"error": chunk.error}))
            return t.take()
        if (
            chunk.candidates is None
            and not chunk.usage_metadata
            and chunk.prompt_feedback is None
            and chunk.response_id is None
            and chunk.model_version is None
        ):
            # Valid JSON, but none of a GenerateContentResponse's fields (a
            # chat-completions chunk from a misrouted proxy, say): the same
            # endpoint would send it again, so it is not a broken connection.
            t.fail(
                ErrorCode.PROTOCOL,
                "the provider sent JSON that is not a GenerateContentResponse "
                "(no candidates, usageMetadata, promptFeedback or error)",
            )
            return t.take()
        if chunk.usage_metadata:
            self._usage = chunk.usage_metadata
        if chunk.response_id:
            self._response_id = chunk.response_id
        if chunk.model_version:
            self._model_version = chunk.model_version
        feedback = chunk.prompt_feedback
        if feedback is not None and feedback.block_reason:
            self._prompt_block = feedback.block_reason
        for candidate in chunk.candidates or ():
            if candidate.index != 0:
                continue
            content = candidate.content
            if content is not None:
                for part in content.parts or ():
                    self._part(part)
            if candidate.finish_reason:
                self._finish_reason = candidate.finish_reason
        return t.take()

    def end(self) -> list[StreamChunk]:
        """The body ended: finish the stream (or a ``NETWORK`` error if it never finished)."""
        t = self._t
        if t.done:
            return []
        if self._finish_reason is None and self._prompt_block is None:
            t.end("a finishReason")
            return t.take()
        usage = None
        if self._usage:
            try:
                usage = _usage(_usage_decoder.decode(self._usage))
            except _BAD_JSON as exc:
                t.fail(ErrorCode.PROTOCOL, f"malformed usageMetadata from the provider: {exc}")
                return t.take()
        response = {
            key: value
            for key, value in (
                ("responseId", self._response_id),
                ("modelVersion", self._model_version),
                ("finishReason", self._finish_reason),
            )
            if value is not None
        }
        # The tracker keeps the envelope off error finishes.
        envelope = ReplayEnvelope(response=response, blocks=t.replay_blocks())
        t.finish(self._reason(), usage=usage, replay_state=envelope)
        return t.take()

    # --- internals ---

    def _part(self, part: _Part) -> None:
        t = self._t
        text = part.text
        current = self._current
        if (
            text
            and current is not None
            and part.thought_signature is None
            and part.function_call is None
            and current.kind == ("reasoning" if part.thought else "text")
            and not current.closed
        ):
            # The common case: more of the block being streamed.
            if part.thought:
                t.reasoning(current, text)
            else:
                t.text(current, text)
            return
        block: Block | None = None
        call = part.function_call
        if call is not None:
            self._close_current()
            block = t.open("tool-call")
            self._calls += 1
            raw = bytes(call.args)
            arguments = raw.decode() if raw and raw != b"null" else "{}"
            t.tool_call(block, arguments, call_id=call.id or self._call_id(), name=call.name)
        elif part.text:
            kind: BlockKind = "reasoning" if part.thought else "text"
            current = self._current
            if current is None or current.kind != kind or current.closed:
                self._close_current()
                current = t.open(kind)
            block = current
            if kind == "text":
                t.text(block, part.text)
            else:
                t.reasoning(block, part.text)
        signature = part.thought_signature
        if block is not None:
            if self._pending_signature is not None and block.replay is None:
                block.replay = {"signature": self._pending_signature}
            self._pending_signature = None
            if signature:
                block.replay = {"signature": signature}
            if call is not None:
                t.close(block)  # a function call arrives whole
            self._current = block
        elif signature:
            # A part with nothing but a signature belongs to the block before it.
            last = self._current
            if last is not None:
                last.replay = {"signature": signature}
            else:
                self._pending_signature = signature

    def _close_current(self) -> None:
        if self._current is not None:
            self._t.close(self._current)

    def _call_id(self) -> str:
        # Gemini's API names calls only sometimes; results are matched by this id.
        base = self._response_id or uuid.uuid4().hex[:16]
        return f"{GENERATED_CALL_ID_PREFIX}{base}_{self._calls}"

    def _reason(self) -> FinishReason:
        t = self._t
        reason = self._finish_reason
        if reason is None:
            return t.failure(
                ErrorCode.INVALID_REQUEST,
                "the provider blocked the prompt "
                f"(promptFeedback.blockReason {self._prompt_block})",
            )
        if reason == "STOP":
            if any(block.kind == "tool-call" for block in t.blocks):
                return FinishToolCalls()
            return FinishStop()
        if reason == "MAX_TOKENS":
            return FinishMaxTokens()
        if reason in _FILTERED:
            return t.failure(
                ErrorCode.INVALID_REQUEST,
                f"the provider's filters stopped the response (finishReason {reason})",
            )
        if reason in _BAD_CALL:
            return t.failure(
                ErrorCode.SERVER_ERROR,
                f"the model produced a tool call the provider rejected (finishReason {reason})",
            )
        if reason in _KNOWN_FAILED:
            return t.failure(
                ErrorCode.SERVER_ERROR,
                f"the provider stopped the response (finishReason {reason})",
            )
        # A reason newer than this decoder, after the answer was streamed: the
        # answer is kept (a retry would throw it away), as Anthropic's unknown
        # stop reasons are, and the native reason stays in the replay envelope.
        # Without any block the empty-response rule still makes it an error.
        log.warning(
            "Gemini ended a response with finishReason %.60r, which llmrt does not know; "
            "treating it as STOP",
            reason,
        )
        if any(block.kind == "tool-call" for block in t.blocks):
            return FinishToolCalls()
        return FinishStop()


# --- request body -------------------------------------------------------------


def _image_part(image: ImageBlock, image_input: bool) -> dict[str, Any]:
    if not image_input:
        return {"text": image_placeholder(image)}
    if image.url is not None:
        return {"fileData": {"mimeType": image.media_type, "fileUri": image.url}}
    return {"inlineData": {"mimeType": image.media_type, "data": image.data}}


def _signature(entries: tuple[Any, ...] | None, position: int) -> str | None:
    entry = entries[position] if entries is not None else None
    if isinstance(entry, dict):
        signature = entry.get("signature")
        if isinstance(signature, str) and signature:
            return signature
    return None


def _model_parts(message: Message, *, skip_signature: bool) -> list[dict[str, Any]]:
    entries = replay_entries(message)
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for position, block in enumerate(message.content):
        signature = _signature(entries, position)
        part: dict[str, Any]
        if type(block) is TextBlock:
            if not block.text and signature is None:
                continue
            part = {"text": block.text}
        elif type(block) is ReasoningBlock:
            if signature is None:
                continue  # unsigned thoughts cannot be replayed
            part = {"text": block.text, "thought": True}
        elif type(block) is ToolCallBlock:
            function: dict[str, Any] = {"name": block.name, "args": tool_arguments(block)}
            if not block.id.startswith(GENERATED_CALL_ID_PREFIX):
                function["id"] = block.id
            part = {"functionCall": function}
            calls.append(part)
        elif type(block) is ImageBlock:
            part = {"text": image_placeholder(block)}
        elif type(block) is ToolResultBlock:
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                f"tool result for {block.tool_call_id!r} is in an assistant message; "
                "tool results belong to user messages",
            )
        else:
            continue
        if signature is not None:
            part["thoughtSignature"] = signature
        parts.append(part)
    if skip_signature and calls and not any("thoughtSignature" in c for c in calls):
        # Parallel calls carry one signature, on the first call.
        calls[0]["thoughtSignature"] = SKIP_SIGNATURE
    return parts


def _result_part(result: ToolResultBlock, name: str, images: list[ImageBlock]) -> Any:
    texts: list[str] = []
    for block in result.content:
        if type(block) is TextBlock:
            texts.append(block.text)
        elif type(block) is ImageBlock:
            images.append(block)  # sent as parts after the response
            texts.append(image_placeholder(block))
    key = "error" if result.is_error else "output"
    function: dict[str, Any] = {"name": name, "response": {key: "\n\n".join(texts)}}
    if not result.tool_call_id.startswith(GENERATED_CALL_ID_PREFIX):
        function["id"] = result.tool_call_id
    return {"functionResponse": function}


def _user_parts(
    message: Message, image_input: bool, names: Mapping[str, str]
) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    for block in message.content:
        if type(block) is TextBlock:
            if block.text:
                parts.append({"text": block.text})
        elif type(block) is ImageBlock:
            parts.append(_image_part(block, image_input))
        elif type(block) is ToolResultBlock:
            name = names.get(block.tool_call_id)
            if name is None and type(message.source) is ToolSource:
                name = message.source.tool
            if not name:
                raise LlmError(
                    ErrorCode.INVALID_REQUEST,
                    f"tool result for {block.tool_call_id!r} has no matching tool call "
                    "(Gemini needs the function's name)",
                )
            images: list[ImageBlock] = []
            parts.append(_result_part(block, name, images))
            after.extend(_image_part(image, image_input) for image in images)
        elif type(block) is ToolCallBlock:
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                f"tool call {block.id!r} is in a user message; tool calls belong to "
                "assistant messages",
            )
    return parts + after


#: ``functionCallingConfig.mode`` of each tool choice (a named tool is ``ANY``
#: restricted to that one function).
_MODES: Final = {"auto": "AUTO", "none": "NONE", "required": "ANY"}


def build_gemini_body(
    options: GenerateOptions,
    *,
    image_input: bool,
    thinking: bool = False,
    thinking_budget: int | None = None,
    skip_signature: bool = False,
) -> dict[str, Any]:
    """The ``GenerateContentRequest`` body for ``options`` (a JSON-ready dict).

    System text (`system_prompt`) goes to ``systemInstruction``; user and
    assistant messages become ``user`` / ``model`` turns, consecutive turns
    of one role merged. Images are ``inlineData`` (base64) or ``fileData``
    (a URL) when ``image_input``, else text placeholders. Tool results are
    ``functionResponse`` parts named after their call (found in the
    conversation, else the message's `ToolSource` tool); their images follow
    as parts of the same turn. Tools are ``functionDeclarations`` with their
    JSON Schema as ``parametersJsonSchema``. Thought signatures from the
    message's replay envelope go back on their parts; reasoning without a
    signature is left out. ``skip_signature`` (Gemini 3) puts Google's
    stand-in signature on the first function call of a turn that lost its
    own. ``thinking`` asks for thought summaries (``includeThoughts``);
    ``thinking_budget`` sets ``thinkingBudget`` (0 turns thinking off). A tool
    choice is ``toolConfig.functionCallingConfig`` (``AUTO`` / ``NONE`` /
    ``ANY``, a named tool as ``allowedFunctionNames``); structured output is
    ``responseMimeType: application/json`` with the schema as
    ``responseJsonSchema``.

    Raises `LlmError` (``INVALID_REQUEST``) for tool-call arguments that are
    not a JSON object, a tool block in the wrong role, or a tool result whose
    function name cannot be found.
    """
    names = {
        block.id: block.name
        for message in options.messages
        if message.role == "assistant"
        for block in message.content
        if type(block) is ToolCallBlock
    }
    contents: list[dict[str, Any]] = []
    for message in options.messages:
        if message.role == "system":
            continue
        if message.role == "assistant":
            role, parts = "model", _model_parts(message, skip_signature=skip_signature)
        else:
            role, parts = "user", _user_parts(message, image_input, names)
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    body: dict[str, Any] = {"contents": contents}
    system = system_prompt(options)
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if options.tools:
        declarations = [
            {
                "name": tool.name,
                "description": tool.description,
                "parametersJsonSchema": tool.parameters,
            }
            for tool in options.tools
        ]
        body["tools"] = [{"functionDeclarations": declarations}]
    choice = options.tool_choice
    if choice is not None:
        calling: dict[str, Any] = {"mode": _MODES.get(str(choice), "ANY")}
        if type(choice) is NamedToolChoice:
            calling["allowedFunctionNames"] = [choice.name]
        body["toolConfig"] = {"functionCallingConfig": calling}
    config: dict[str, Any] = {}
    fmt = options.response_format
    if fmt is not None:
        config["responseMimeType"] = "application/json"
        if type(fmt) is JsonSchemaFormat:
            config["responseJsonSchema"] = fmt.schema
    if options.temperature is not None:
        config["temperature"] = options.temperature
    if options.max_tokens is not None:
        config["maxOutputTokens"] = options.max_tokens
    if options.stop:
        config["stopSequences"] = list(options.stop)
    if thinking or thinking_budget is not None:
        thinking_config: dict[str, Any] = {"includeThoughts": thinking_budget != 0}
        if thinking_budget is not None:
            thinking_config["thinkingBudget"] = thinking_budget
        config["thinkingConfig"] = thinking_config
    if config:
        body["generationConfig"] = config
    return body
