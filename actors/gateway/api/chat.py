"""OpenAI Chat Completions (``POST /v1/chat/completions``) requests as `GenerateOptions`. No I/O.

`decode_chat` reads the client's JSON with the Structs below (strict about
types; any field they do not name is refused as unknown) and returns a
`ChatCall`: the `GenerateOptions` to run and what its answer needs (the model
name to echo, ``stream``, ``stream_options.include_usage``). `PARAMETERS` is
the table docs/http-api.md prints: every parameter the API defines, carried,
refused (the 400 names it) or ignored (it cannot change the answer).

Messages: ``system`` and ``developer`` messages are system-role messages in
place (every adapter folds them into its one system prompt); ``user`` text
and images (``data:`` URLs and http(s) URLs); ``assistant`` text, refusal
text, ``reasoning_content`` (as a reasoning block: Chat has no slot for
replay state) and ``tool_calls``; ``tool`` messages are tool results.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

import attrs
import msgspec

from llmrt import (
    BlockAssembler,
    ContentBlock,
    GenerateOptions,
    JsonObjectFormat,
    JsonSchemaFormat,
    Message,
    ModelSource,
    NamedToolChoice,
    PluginSource,
    ReasoningBlock,
    ResponseFormat,
    TextBlock,
    ToolCallBlock,
    ToolChoice,
    ToolResultBlock,
    ToolSchema,
    ToolSource,
    UserSource,
)

from ._common import Param, decode_body, image_from_url, refuse, resolve_model
from ._errors import ErrorAnswer, openai_error
from .chat_events import ChatStreamEncoder, chat_completion

__all__ = ["PARAMETERS", "ChatCall", "decode_chat", "chat_error"]

_Tokens = Annotated[int, msgspec.Meta(gt=0)]
_Temperature = Annotated[float, msgspec.Meta(ge=0, le=2)]
_SOURCE = PluginSource(plugin="http-api", form="instructions")
#: A function without ``parameters`` takes none (OpenAI's rule).
_NO_PARAMETERS: Final[dict[str, Any]] = {"type": "object", "properties": {}}


class _Strict(msgspec.Struct, forbid_unknown_fields=True):
    """Request Structs refuse fields they do not name: a new parameter is never dropped."""


class _ImageUrl(_Strict):
    url: str
    detail: str | None = None


class _TextPart(_Strict, tag_field="type", tag="text"):
    text: str


class _ImagePart(_Strict, tag_field="type", tag="image_url"):
    image_url: _ImageUrl


class _AudioPart(_Strict, tag_field="type", tag="input_audio"):
    input_audio: Any


class _FilePart(_Strict, tag_field="type", tag="file"):
    file: Any


class _RefusalPart(_Strict, tag_field="type", tag="refusal"):
    refusal: str


_UserPart = _TextPart | _ImagePart | _AudioPart | _FilePart


class _Function(_Strict):
    name: str
    arguments: str


class _ToolCall(_Strict):
    id: str
    function: _Function
    type: Literal["function"] = "function"
    #: The stream's position of the call: the openai SDK's stream accumulator keeps
    #: it on the message, which clients send back as it is. The list order rules.
    index: int | None = None


class _System(_Strict, tag_field="role", tag="system"):
    content: str | list[_TextPart]
    name: str | None = None


class _Developer(_Strict, tag_field="role", tag="developer"):
    content: str | list[_TextPart]
    name: str | None = None


class _User(_Strict, tag_field="role", tag="user"):
    content: str | list[_UserPart]
    name: str | None = None


class _Assistant(_Strict, tag_field="role", tag="assistant"):
    content: str | list[_TextPart | _RefusalPart] | None = None
    refusal: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[_ToolCall] | None = None
    name: str | None = None
    audio: Any = None
    function_call: Any = None


class _Tool(_Strict, tag_field="role", tag="tool"):
    content: str | list[_TextPart]
    tool_call_id: str


class _FunctionMessage(_Strict, tag_field="role", tag="function"):
    content: str | None
    name: str


_Message = _System | _Developer | _User | _Assistant | _Tool | _FunctionMessage


class _FunctionDef(_Strict):
    name: Annotated[str, msgspec.Meta(min_length=1)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class _FunctionTool(_Strict, tag_field="type", tag="function"):
    function: _FunctionDef


class _CustomTool(_Strict, tag_field="type", tag="custom"):
    custom: Any


class _NamedFunction(_Strict):
    name: str


class _NamedChoice(_Strict, tag_field="type", tag="function"):
    function: _NamedFunction


class _CustomChoice(_Strict, tag_field="type", tag="custom"):
    custom: Any


class _AllowedChoice(_Strict, tag_field="type", tag="allowed_tools"):
    allowed_tools: Any


class _JsonSchema(_Strict):
    name: str
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class _FormatText(_Strict, tag_field="type", tag="text"):
    pass


class _FormatJsonObject(_Strict, tag_field="type", tag="json_object"):
    pass


class _FormatJsonSchema(_Strict, tag_field="type", tag="json_schema"):
    json_schema: _JsonSchema


class _StreamOptions(_Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class ChatRequest(_Strict):
    """The body of ``POST /v1/chat/completions``, as far as llmrt reads it."""

    model: str
    messages: Annotated[list[_Message], msgspec.Meta(min_length=1)]
    stream: bool | None = None
    stream_options: _StreamOptions | None = None
    max_tokens: _Tokens | None = None
    max_completion_tokens: _Tokens | None = None
    temperature: _Temperature | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    tools: list[_FunctionTool | _CustomTool] | None = None
    tool_choice: (
        Literal["auto", "none", "required"] | _NamedChoice | _CustomChoice | _AllowedChoice | None
    ) = None
    parallel_tool_calls: bool | None = None
    response_format: _FormatText | _FormatJsonObject | _FormatJsonSchema | None = None
    reasoning_effort: str | None = None
    n: int | None = None
    seed: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    logit_bias: dict[str, int] | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    modalities: list[str] | None = None
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    functions: Any = None
    function_call: Any = None
    verbosity: str | None = None
    moderation: Any = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: Any = None


#: Every parameter of the API and what llmrt does with it (docs/http-api.md prints it).
PARAMETERS: Final[Mapping[str, Param]] = {
    "model": Param("carried", "`provider/model`, or an alias; echoed back as sent"),
    "messages": Param(
        "carried",
        "system, developer, user (text, images), assistant (text, refusal, "
        "`reasoning_content`, `tool_calls`), tool; audio and file parts are refused",
    ),
    "stream": Param("carried", "true: server-sent `chat.completion.chunk` events"),
    "stream_options": Param(
        "carried", "`include_usage` adds the usage chunk; `include_obfuscation` is ignored"
    ),
    "max_tokens": Param("carried", "the output cap (`maxTokens`)"),
    "max_completion_tokens": Param("carried", "the same; refused when both differ"),
    "temperature": Param("carried", "0 to 2"),
    "stop": Param("carried", "a string or a list of strings"),
    "tools": Param("carried", "function tools, with `strict`; `custom` tools are refused"),
    "tool_choice": Param(
        "carried", "`auto`, `none`, `required`, a named function; `allowed_tools` is refused"
    ),
    "response_format": Param("carried", "`text`, `json_object`, `json_schema`"),
    "reasoning_effort": Param("carried", "the route's effort of that name"),
    "parallel_tool_calls": Param("refused", "`false` (true is every route's default)"),
    "top_p": Param("refused", "any value but 1"),
    "n": Param("refused", "any value but 1: one choice is streamed"),
    "seed": Param("refused", "any value"),
    "logprobs": Param("refused", "`true`"),
    "top_logprobs": Param("refused", "any value"),
    "logit_bias": Param("refused", "a non-empty map"),
    "frequency_penalty": Param("refused", "any value but 0"),
    "presence_penalty": Param("refused", "any value but 0"),
    "modalities": Param("refused", 'anything but `["text"]`'),
    "audio": Param("refused", "any value"),
    "prediction": Param("refused", "any value"),
    "web_search_options": Param("refused", "any value"),
    "functions": Param("refused", "any value (use `tools`)"),
    "function_call": Param("refused", "any value (use `tool_choice`)"),
    "verbosity": Param("refused", "any value"),
    "moderation": Param("refused", "any value"),
    "user": Param("ignored", "an end-user id for the provider's abuse monitoring"),
    "metadata": Param("ignored", "tags for stored completions"),
    "store": Param("ignored", "llmrt stores nothing"),
    "service_tier": Param("ignored", "latency and price class, not the answer"),
    "safety_identifier": Param("ignored", "an end-user id for abuse monitoring"),
    "prompt_cache_key": Param("ignored", "a caching hint"),
    "prompt_cache_retention": Param("ignored", "a caching hint"),
    "prompt_cache_options": Param("ignored", "a caching hint"),
}

_decoder = msgspec.json.Decoder(ChatRequest)


@attrs.frozen
class ChatCall:
    """A decoded Chat Completions request: what to run and what its answer needs."""

    options: GenerateOptions
    #: The model as the client named it: every chunk and answer echoes it.
    model: str
    stream: bool
    include_usage: bool

    def encoder(
        self, *, completion_id: str | None = None, created: int | None = None
    ) -> ChatStreamEncoder:
        """The stream encoder of this call's answer."""
        return ChatStreamEncoder(
            model=self.model,
            include_usage=self.include_usage,
            completion_id=completion_id,
            created=created,
        )

    def answer(
        self,
        assembler: BlockAssembler,
        *,
        completion_id: str | None = None,
        created: int | None = None,
    ) -> bytes:
        """The non-streaming ``chat.completion`` object of a finished call."""
        return chat_completion(
            assembler, model=self.model, completion_id=completion_id, created=created
        )

    def error(self, failure: Any) -> ErrorAnswer:
        return openai_error(failure)


def chat_error(failure: Any) -> ErrorAnswer:
    """A failure (or `ApiRequestError`) as Chat Completions answers it."""
    return openai_error(failure)


def _text(content: str | list[_TextPart] | list[_TextPart | _RefusalPart] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.text if isinstance(p, _TextPart) else p.refusal for p in content)


def _refuse_values(request: ChatRequest) -> None:
    checks: tuple[tuple[str, bool, str], ...] = (
        ("parallel_tool_calls", request.parallel_tool_calls is False, "every route may call "
         "tools in parallel"),
        ("top_p", request.top_p not in (None, 1, 1.0), "llmrt carries temperature only"),
        ("n", request.n not in (None, 1), "llmrt streams one choice"),
        ("seed", request.seed is not None, "no route is asked for reproducible sampling"),
        ("logprobs", bool(request.logprobs), "llmrt's chunks carry no log probabilities"),
        ("top_logprobs", request.top_logprobs is not None, "llmrt's chunks carry no log "
         "probabilities"),
        ("logit_bias", bool(request.logit_bias), "llmrt carries no token biases"),
        ("frequency_penalty", request.frequency_penalty not in (None, 0, 0.0), "llmrt carries "
         "no penalties"),
        ("presence_penalty", request.presence_penalty not in (None, 0, 0.0), "llmrt carries "
         "no penalties"),
        ("modalities", request.modalities not in (None, ["text"]), "llmrt answers with text"),
        ("audio", request.audio is not None, "llmrt answers with text"),
        ("prediction", request.prediction is not None, "llmrt carries no predicted output"),
        ("web_search_options", request.web_search_options is not None, "llmrt offers no "
         "built-in tools"),
        ("functions", request.functions is not None, "use `tools`"),
        ("function_call", request.function_call is not None, "use `tool_choice`"),
        ("verbosity", request.verbosity is not None, "llmrt carries no verbosity"),
        ("moderation", request.moderation is not None, "llmrt runs no moderation"),
    )  # fmt: skip
    for param, refused, why in checks:
        if refused:
            raise refuse(param, why)


def _tools(request: ChatRequest) -> tuple[ToolSchema, ...] | None:
    if not request.tools:
        return None
    out: list[ToolSchema] = []
    for i, tool in enumerate(request.tools):
        if isinstance(tool, _CustomTool):
            raise refuse(f"tools[{i}].type", "custom (free-text) tools have no llmrt form")
        fn = tool.function
        parameters = (
            fn.parameters if fn.parameters is not None else {"type": "object", "properties": {}}
        )
        out.append(
            ToolSchema(
                name=fn.name,
                description=fn.description or "",
                parameters=parameters,
                strict=fn.strict,
            )
        )
    return tuple(out)


def _tool_choice(request: ChatRequest) -> ToolChoice | None:
    choice = request.tool_choice
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, _NamedChoice):
        return NamedToolChoice(name=choice.function.name)
    raise refuse("tool_choice", f"`{choice.__struct_config__.tag}` has no llmrt form")


def _response_format(request: ChatRequest) -> ResponseFormat | None:
    fmt = request.response_format
    if fmt is None or isinstance(fmt, _FormatText):
        return None
    if isinstance(fmt, _FormatJsonObject):
        return JsonObjectFormat()
    spec = fmt.json_schema
    return JsonSchemaFormat(
        schema=spec.schema if spec.schema is not None else {},
        name=spec.name,
        description=spec.description,
        strict=spec.strict,
    )


def _max_tokens(request: ChatRequest) -> int | None:
    a, b = request.max_tokens, request.max_completion_tokens
    if a is not None and b is not None and a != b:
        raise refuse("max_tokens", "it differs from `max_completion_tokens`; send one of them")
    return b if b is not None else a


def _user_blocks(message: _User, i: int) -> tuple[ContentBlock, ...]:
    if isinstance(message.content, str):
        return (TextBlock(text=message.content),)
    blocks: list[ContentBlock] = []
    for j, part in enumerate(message.content):
        where = f"messages[{i}].content[{j}]"
        if isinstance(part, _TextPart):
            blocks.append(TextBlock(text=part.text))
        elif isinstance(part, _ImagePart):
            if part.image_url.detail not in (None, "auto"):
                raise refuse(f"{where}.image_url.detail", "llmrt sends every image at `auto`")
            blocks.append(image_from_url(part.image_url.url, f"{where}.image_url.url"))
        else:
            raise refuse(
                f"{where}.type", f"`{part.__struct_config__.tag}` parts have no llmrt form"
            )
    return tuple(blocks)


def _messages(request: ChatRequest, provider: str, model: str) -> tuple[Message, ...]:
    out: list[Message] = []
    names: dict[str, str] = {}
    for i, message in enumerate(request.messages):
        if getattr(message, "name", None) is not None and not isinstance(message, _FunctionMessage):
            raise refuse(f"messages[{i}].name", "llmrt carries no participant names")
        mid = f"m{i}"
        if isinstance(message, _System | _Developer):
            text = _text(message.content)
            out.append(
                Message(id=mid, role="system", content=(TextBlock(text=text),), source=_SOURCE)
            )
        elif isinstance(message, _User):
            blocks = _user_blocks(message, i)
            out.append(Message(id=mid, role="user", content=blocks, source=UserSource()))
        elif isinstance(message, _Assistant):
            out.append(_assistant(message, i, provider, model, names))
        elif isinstance(message, _Tool):
            result = ToolResultBlock(
                tool_call_id=message.tool_call_id, content=(TextBlock(text=_text(message.content)),)
            )
            source = ToolSource(tool=names.get(message.tool_call_id))
            out.append(Message(id=mid, role="user", content=(result,), source=source))
        else:
            raise refuse(f"messages[{i}].role", "`function` messages are deprecated: use `tool`")
    return tuple(out)


def _assistant(
    message: _Assistant, i: int, provider: str, model: str, names: dict[str, str]
) -> Message:
    if message.audio is not None:
        raise refuse(f"messages[{i}].audio", "llmrt carries no audio")
    if message.function_call is not None:
        raise refuse(f"messages[{i}].function_call", "use `tool_calls`")
    blocks: list[ContentBlock] = []
    if message.reasoning_content:
        blocks.append(ReasoningBlock(text=message.reasoning_content))
    text = _text(message.content) + (message.refusal or "")
    if text:
        blocks.append(TextBlock(text=text))
    for call in message.tool_calls or ():
        names[call.id] = call.function.name
        blocks.append(
            ToolCallBlock(id=call.id, name=call.function.name, arguments=call.function.arguments)
        )
    if not blocks:
        blocks.append(TextBlock(text=""))
    return Message(
        id=f"m{i}",
        role="assistant",
        content=tuple(blocks),
        source=ModelSource(provider=provider, model=model),
    )


def decode_chat(body: bytes, *, aliases: Mapping[str, str] | None = None) -> ChatCall:
    """The `ChatCall` of a request body; `ApiRequestError` naming the parameter at fault.

    ``aliases`` maps bare model names to ``provider/model`` (the
    ``[aliases]`` table); a name neither an alias nor ``provider/model`` is
    ``NO_ADAPTER``.
    """
    request = decode_body(_decoder, body)
    _refuse_values(request)
    provider, model = resolve_model(request.model, aliases or {})
    stop = request.stop
    options = GenerateOptions(
        provider=provider,
        model=model,
        messages=_messages(request, provider, model),
        reasoning_effort=request.reasoning_effort,
        tools=_tools(request),
        temperature=request.temperature,
        max_tokens=_max_tokens(request),
        stop=(stop,) if isinstance(stop, str) else tuple(stop) if stop else None,
        tool_choice=_tool_choice(request),
        response_format=_response_format(request),
    )
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    return ChatCall(
        options=options,
        model=request.model,
        stream=bool(request.stream),
        include_usage=include_usage,
    )
