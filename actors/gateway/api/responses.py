"""OpenAI Responses (``POST /v1/responses``) requests as `GenerateOptions`. No I/O.

`decode_responses` reads the client's JSON (strict about types; unknown
fields are refused) and returns a `ResponsesCall`. llmrt keeps no
conversation on the server (``store: false`` semantics whatever ``store``
says), so the whole conversation comes in ``input``: ``previous_response_id``,
``conversation`` and ``item_reference`` items are refused with an error that
says so. `PARAMETERS` is the table docs/http-api.md prints.

``input``: a string (one user message) or items. ``message`` items of role
``system`` / ``developer`` are system-role messages, ``user`` ones carry
``input_text`` and ``input_image`` (a ``data:`` or http(s) URL); the items of
one model turn (``reasoning``, assistant ``message``, ``function_call``, in
any order) form one assistant message, and a reasoning item's
``encrypted_content`` is its replay state (see `_replay`);
``function_call_output`` items are tool results. ``instructions`` is the
system prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

import attrs
import msgspec

from llmrt import (
    BlockAssembler,
    ContentBlock,
    ErrorCode,
    GenerateOptions,
    JsonObjectFormat,
    JsonSchemaFormat,
    Message,
    ModelSource,
    NamedToolChoice,
    PluginSource,
    ReasoningBlock,
    ReplayEnvelope,
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
from ._errors import ApiRequestError, ErrorAnswer, openai_error
from ._replay import entry_of_reasoning
from .responses_events import ResponsesStreamEncoder, response_object

__all__ = ["PARAMETERS", "ResponsesCall", "decode_responses"]

_Tokens = Annotated[int, msgspec.Meta(gt=0)]
_Temperature = Annotated[float, msgspec.Meta(ge=0, le=2)]
_SOURCE = PluginSource(plugin="http-api", form="instructions")
_NO_PARAMETERS: Final[dict[str, Any]] = {"type": "object", "properties": {}}


class _Strict(msgspec.Struct, forbid_unknown_fields=True):
    """Request Structs refuse fields they do not name: a new parameter is never dropped."""


class _Head(msgspec.Struct):
    """The ``type`` of an item, part, tool or format (``message`` when absent)."""

    type: str = "message"
    role: str | None = None


class _InputText(_Strict, tag_field="type", tag="input_text"):
    text: str
    prompt_cache_breakpoint: Any = None


class _InputImage(_Strict, tag_field="type", tag="input_image"):
    detail: str | None = None
    image_url: str | None = None
    file_id: str | None = None
    prompt_cache_breakpoint: Any = None


class _InputFile(_Strict, tag_field="type", tag="input_file"):
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None


class _InputAudio(_Strict, tag_field="type", tag="input_audio"):
    input_audio: Any = None


class _OutputText(_Strict, tag_field="type", tag="output_text"):
    text: str
    annotations: Any = None
    logprobs: Any = None


class _Refusal(_Strict, tag_field="type", tag="refusal"):
    refusal: str


_Part = _InputText | _InputImage | _InputFile | _InputAudio | _OutputText | _Refusal


class _MessageItem(_Strict):
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[_Part]
    type: Literal["message"] = "message"
    id: str | None = None
    status: str | None = None
    phase: str | None = None


class _FunctionCall(_Strict):
    call_id: str
    name: str
    arguments: str
    type: Literal["function_call"] = "function_call"
    id: str | None = None
    status: str | None = None
    namespace: str | None = None
    caller: Any = None


class _FunctionCallOutput(_Strict):
    call_id: str
    output: str | list[_InputText | _InputImage | _InputFile]
    type: Literal["function_call_output"] = "function_call_output"
    id: str | None = None
    status: str | None = None
    name: str | None = None
    namespace: str | None = None
    caller: Any = None


class _SummaryText(_Strict):
    text: str
    type: Literal["summary_text"] = "summary_text"


class _ReasoningText(_Strict):
    text: str
    type: Literal["reasoning_text"] = "reasoning_text"


class _ReasoningItem(_Strict):
    summary: list[_SummaryText]
    type: Literal["reasoning"] = "reasoning"
    id: str | None = None
    content: list[_ReasoningText] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class _FunctionTool(_Strict):
    name: Annotated[str, msgspec.Meta(min_length=1)]
    type: Literal["function"] = "function"
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


class _FunctionChoice(_Strict):
    name: str
    type: Literal["function"] = "function"


class _JsonSchemaFormat(_Strict):
    name: str
    schema: dict[str, Any]
    type: Literal["json_schema"] = "json_schema"
    description: str | None = None
    strict: bool | None = None


class _Reasoning(_Strict):
    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


class _Text(_Strict):
    #: Raw (msgspec takes no ``Raw | None``): empty when absent, ``null`` when null.
    format: msgspec.Raw = msgspec.Raw()
    verbosity: str | None = None


class _StreamOptions(_Strict):
    include_obfuscation: bool | None = None


class ResponsesRequest(_Strict):
    """The body of ``POST /v1/responses``, as far as llmrt reads it."""

    model: str
    input: str | list[msgspec.Raw]
    instructions: str | None = None
    stream: bool | None = None
    stream_options: _StreamOptions | None = None
    max_output_tokens: _Tokens | None = None
    temperature: _Temperature | None = None
    top_p: float | None = None
    tools: list[msgspec.Raw] | None = None
    #: Raw: empty when absent, ``null`` when null.
    tool_choice: msgspec.Raw = msgspec.Raw()
    parallel_tool_calls: bool | None = None
    reasoning: _Reasoning | None = None
    text: _Text | None = None
    include: list[str] | None = None
    truncation: str | None = None
    previous_response_id: str | None = None
    conversation: Any = None
    background: bool | None = None
    max_tool_calls: int | None = None
    prompt: Any = None
    top_logprobs: int | None = None
    context_management: Any = None
    moderation: Any = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: Any = None


#: Every parameter of the API and what llmrt does with it (docs/http-api.md prints it).
PARAMETERS: Final[Mapping[str, Param]] = {
    "model": Param("carried", "`provider/model`, or an alias; echoed back as sent"),
    "input": Param(
        "carried",
        "a string, or message / reasoning / function_call / function_call_output items; "
        "file and audio parts, `item_reference` and built-in tool items are refused",
    ),
    "instructions": Param("carried", "the system prompt"),
    "stream": Param("carried", "true: server-sent events with `sequence_number`"),
    "max_output_tokens": Param("carried", "the output cap"),
    "temperature": Param("carried", "0 to 2"),
    "tools": Param("carried", "function tools, with `strict`; built-in tools are refused"),
    "tool_choice": Param(
        "carried", "`auto`, `none`, `required`, a named function; other forms are refused"
    ),
    "text": Param(
        "carried",
        "`format`: `text`, `json_object`, `json_schema`; `verbosity` other than `medium` "
        "is refused",
    ),
    "reasoning": Param(
        "carried", "`effort` is the route's effort; `summary` other than `auto` is refused"
    ),
    "include": Param(
        "carried",
        "`reasoning.encrypted_content` (always returned anyway); anything else is refused",
    ),
    "stream_options": Param("ignored", "`include_obfuscation`: padding only"),
    "previous_response_id": Param(
        "refused", "llmrt keeps no conversation: send the whole history in `input`"
    ),
    "conversation": Param("refused", "the same"),
    "parallel_tool_calls": Param("refused", "`false` (true is every route's default)"),
    "top_p": Param("refused", "any value but 1"),
    "truncation": Param("refused", "`auto` (`disabled` is what llmrt does)"),
    "background": Param("refused", "`true`"),
    "max_tool_calls": Param("refused", "any value"),
    "prompt": Param("refused", "stored prompt templates live on OpenAI's servers"),
    "top_logprobs": Param("refused", "any value"),
    "context_management": Param("refused", "any value"),
    "moderation": Param("refused", "any value"),
    "store": Param("ignored", "llmrt stores nothing: every response is `store: false`"),
    "metadata": Param("ignored", "tags for stored responses"),
    "user": Param("ignored", "an end-user id for abuse monitoring"),
    "safety_identifier": Param("ignored", "an end-user id for abuse monitoring"),
    "service_tier": Param("ignored", "latency and price class, not the answer"),
    "prompt_cache_key": Param("ignored", "a caching hint"),
    "prompt_cache_retention": Param("ignored", "a caching hint"),
    "prompt_cache_options": Param("ignored", "a caching hint"),
}

_decoder = msgspec.json.Decoder(ResponsesRequest)
_head = msgspec.json.Decoder(_Head)
_str = msgspec.json.Decoder(str)
_message = msgspec.json.Decoder(_MessageItem)
_call = msgspec.json.Decoder(_FunctionCall)
_output = msgspec.json.Decoder(_FunctionCallOutput)
_reasoning = msgspec.json.Decoder(_ReasoningItem)
_function_tool = msgspec.json.Decoder(_FunctionTool)
_function_choice = msgspec.json.Decoder(_FunctionChoice)
_json_schema = msgspec.json.Decoder(_JsonSchemaFormat)


@attrs.frozen
class ResponsesCall:
    """A decoded Responses request: what to run and what its answer needs."""

    options: GenerateOptions
    #: The model as the client named it, echoed in the response.
    model: str
    stream: bool
    #: Request fields the response object repeats (tools, tool_choice, ...).
    echo: Mapping[str, Any]

    def encoder(
        self, *, response_id: str | None = None, created: int | None = None
    ) -> ResponsesStreamEncoder:
        """The stream encoder of this call's answer."""
        return ResponsesStreamEncoder(
            model=self.model, echo=self.echo, response_id=response_id, created=created
        )

    def answer(
        self,
        assembler: BlockAssembler,
        *,
        response_id: str | None = None,
        created: int | None = None,
    ) -> bytes:
        """The non-streaming ``response`` object of a finished call."""
        return response_object(
            assembler, model=self.model, echo=self.echo, response_id=response_id, created=created
        )

    def error(self, failure: Any) -> ErrorAnswer:
        return openai_error(failure)


def _refuse_values(request: ResponsesRequest) -> None:
    if request.previous_response_id is not None or request.conversation is not None:
        param = "previous_response_id" if request.previous_response_id else "conversation"
        raise refuse(
            param,
            "llmrt keeps no conversation on the server (every response is `store: false`); "
            "send the whole conversation in `input`, with the output items of earlier "
            "responses (their reasoning items carry `encrypted_content`)",
        )
    checks: tuple[tuple[str, bool, str], ...] = (
        ("parallel_tool_calls", request.parallel_tool_calls is False, "every route may call "
         "tools in parallel"),
        ("top_p", request.top_p not in (None, 1, 1.0), "llmrt carries temperature only"),
        ("truncation", request.truncation not in (None, "disabled"), "llmrt sends the whole "
         "input"),
        ("background", bool(request.background), "llmrt answers while the client waits"),
        ("max_tool_calls", request.max_tool_calls is not None, "llmrt offers no built-in tools"),
        ("prompt", request.prompt is not None, "stored prompts live on OpenAI's servers"),
        ("top_logprobs", request.top_logprobs is not None, "llmrt's chunks carry no log "
         "probabilities"),
        ("context_management", request.context_management is not None, "llmrt sends the "
         "input as given"),
        ("moderation", request.moderation is not None, "llmrt runs no moderation"),
    )  # fmt: skip
    for param, refused, why in checks:
        if refused:
            raise refuse(param, why)
    for i, name in enumerate(request.include or ()):
        if name != "reasoning.encrypted_content":
            raise refuse(f"include[{i}]", f"`{name}` has no llmrt form")
    if request.reasoning is not None:
        summary = request.reasoning.summary or request.reasoning.generate_summary
        if summary not in (None, "auto"):
            raise refuse("reasoning.summary", "llmrt asks every route for `auto` summaries")
    if request.text is not None and request.text.verbosity not in (None, "medium"):
        raise refuse("text.verbosity", "llmrt carries no verbosity")


def _tools(request: ResponsesRequest) -> tuple[ToolSchema, ...] | None:
    if not request.tools:
        return None
    out: list[ToolSchema] = []
    for i, raw in enumerate(request.tools):
        kind = decode_body(_head, raw, prefix=f"tools[{i}]").type
        if kind != "function":
            raise refuse(f"tools[{i}].type", f"`{kind}` tools are built into OpenAI, not llmrt")
        tool = decode_body(_function_tool, raw, prefix=f"tools[{i}]")
        parameters = tool.parameters if tool.parameters is not None else _NO_PARAMETERS
        out.append(
            ToolSchema(
                name=tool.name,
                description=tool.description or "",
                parameters=parameters,
                strict=tool.strict,
            )
        )
    return tuple(out)


def _absent(raw: msgspec.Raw) -> bool:
    return not raw or bytes(raw).strip() == b"null"


def _tool_choice(request: ResponsesRequest) -> ToolChoice | None:
    raw = request.tool_choice
    if _absent(raw):
        return None
    if bytes(raw).lstrip().startswith(b'"'):
        value = decode_body(_str, raw, prefix="tool_choice")
        if value not in ("auto", "none", "required"):
            raise refuse("tool_choice", f"`{value[:40]}` is not auto, none or required")
        return value  # type: ignore[return-value]
    kind = decode_body(_head, raw, prefix="tool_choice").type
    if kind != "function":
        raise refuse("tool_choice", f"`{kind}` has no llmrt form")
    return NamedToolChoice(name=decode_body(_function_choice, raw, prefix="tool_choice").name)


def _format(request: ResponsesRequest) -> ResponseFormat | None:
    raw = request.text.format if request.text is not None else msgspec.Raw()
    if _absent(raw):
        return None
    kind = decode_body(_head, raw, prefix="text.format").type
    if kind == "text":
        return None
    if kind == "json_object":
        return JsonObjectFormat()
    if kind != "json_schema":
        raise refuse("text.format.type", f"`{kind}` has no llmrt form")
    fmt = decode_body(_json_schema, raw, prefix="text.format")
    return JsonSchemaFormat(
        schema=fmt.schema, name=fmt.name, description=fmt.description, strict=fmt.strict
    )


def _user_parts(
    parts: str | list[_Part] | list[_InputText | _InputImage | _InputFile], where: str
) -> list[ContentBlock]:
    if isinstance(parts, str):
        return [TextBlock(text=parts)]
    out: list[ContentBlock] = []
    for j, part in enumerate(parts):
        at = f"{where}[{j}]"
        if isinstance(part, _InputText | _OutputText):
            out.append(TextBlock(text=part.text))
        elif isinstance(part, _Refusal):
            out.append(TextBlock(text=part.refusal))
        elif isinstance(part, _InputImage):
            if part.detail not in (None, "auto"):
                raise refuse(f"{at}.detail", "llmrt sends every image at `auto`")
            if part.image_url is None:
                raise refuse(f"{at}.file_id", "files live on OpenAI's servers: send `image_url`")
            out.append(image_from_url(part.image_url, f"{at}.image_url"))
        else:
            raise refuse(f"{at}.type", f"`{part.__struct_config__.tag}` parts have no llmrt form")
    return out


class _Turn:
    """The assistant message being gathered from consecutive model-side items."""

    __slots__ = ("blocks", "entries")

    def __init__(self) -> None:
        self.blocks: list[ContentBlock] = []
        self.entries: list[Any] = []

    def add(self, block: ContentBlock, entry: Any = None) -> None:
        self.blocks.append(block)
        self.entries.append(entry)


def _messages(request: ResponsesRequest, provider: str, model: str) -> tuple[Message, ...]:
    if isinstance(request.input, str):
        only = TextBlock(text=request.input)
        return (Message(id="m0", role="user", content=(only,), source=UserSource()),)
    out: list[Message] = []
    names: dict[str, str] = {}
    turn: _Turn | None = None

    def flush() -> None:
        nonlocal turn
        if turn is not None and turn.blocks:
            replay = None
            if any(entry is not None for entry in turn.entries):
                replay = ReplayEnvelope(blocks=tuple(turn.entries))
            source = ModelSource(provider=provider, model=model, replay_state=replay)
            content = tuple(turn.blocks)
            out.append(Message(id=f"m{len(out)}", role="assistant", content=content, source=source))
        turn = None

    for i, raw in enumerate(request.input):
        where = f"input[{i}]"
        kind = decode_body(_head, raw, prefix=where).type
        if kind == "message":
            item = decode_body(_message, raw, prefix=where)
            if item.role == "assistant":
                turn = turn or _Turn()
                blocks = _user_parts(item.content, f"{where}.content")
                if any(type(b) is not TextBlock for b in blocks):
                    raise refuse(f"{where}.content", "assistant messages carry text only")
                turn.add(TextBlock(text="".join(b.text for b in blocks if type(b) is TextBlock)))
                continue
            flush()
            blocks = _user_parts(item.content, f"{where}.content")
            mid = f"m{len(out)}"
            if item.role == "user":
                out.append(Message(id=mid, role="user", content=tuple(blocks), source=UserSource()))
            else:
                if any(type(b) is not TextBlock for b in blocks):
                    raise refuse(f"{where}.content", "system messages carry text only")
                system = TextBlock(text="".join(b.text for b in blocks if type(b) is TextBlock))
                out.append(Message(id=mid, role="system", content=(system,), source=_SOURCE))
        elif kind == "reasoning":
            item_r = decode_body(_reasoning, raw, prefix=where)
            summary = [part.text for part in item_r.summary]
            entry = entry_of_reasoning(
                item_r.id, summary, item_r.encrypted_content, f"{where}.encrypted_content"
            )
            text = "\n\n".join(summary) or "".join(p.text for p in item_r.content or ())
            turn = turn or _Turn()
            turn.add(ReasoningBlock(text=text), entry)
        elif kind == "function_call":
            call = decode_body(_call, raw, prefix=where)
            names[call.call_id] = call.name
            turn = turn or _Turn()
            turn.add(ToolCallBlock(id=call.call_id, name=call.name, arguments=call.arguments))
        elif kind == "function_call_output":
            flush()
            result = decode_body(_output, raw, prefix=where)
            content = tuple(_user_parts(result.output, f"{where}.output"))
            block = ToolResultBlock(tool_call_id=result.call_id, content=content)
            source = ToolSource(tool=names.get(result.call_id, result.name))
            out.append(Message(id=f"m{len(out)}", role="user", content=(block,), source=source))
        elif kind == "item_reference":
            raise refuse(f"{where}.type", "llmrt keeps no items on the server: send the item")
        else:
            raise refuse(f"{where}.type", f"`{kind[:40]}` items have no llmrt form")
    flush()
    if not out:
        raise ApiRequestError(ErrorCode.INVALID_REQUEST, "`input` is empty", param="input")
    return tuple(out)


def _echo(request: ResponsesRequest, tools: tuple[ToolSchema, ...] | None) -> dict[str, Any]:
    choice = request.tool_choice
    echo: dict[str, Any] = {
        "instructions": request.instructions,
        "tools": [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": tool.strict,
            }
            for tool in tools or ()
        ],
        "tool_choice": "auto" if _absent(choice) else msgspec.json.decode(choice),
        "parallel_tool_calls": True,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_output_tokens": request.max_output_tokens,
        "metadata": request.metadata or {},
        "store": False,
    }
    return echo


def decode_responses(body: bytes, *, aliases: Mapping[str, str] | None = None) -> ResponsesCall:
    """The `ResponsesCall` of a request body; `ApiRequestError` naming the parameter at fault."""
    request = decode_body(_decoder, body)
    _refuse_values(request)
    provider, model = resolve_model(request.model, aliases or {})
    tools = _tools(request)
    options = GenerateOptions(
        provider=provider,
        model=model,
        messages=_messages(request, provider, model),
        system=request.instructions or None,
        reasoning_effort=request.reasoning.effort if request.reasoning is not None else None,
        tools=tools,
        temperature=request.temperature,
        max_tokens=request.max_output_tokens,
        tool_choice=_tool_choice(request),
        response_format=_format(request),
    )
    return ResponsesCall(
        options=options,
        model=request.model,
        stream=bool(request.stream),
        echo=_echo(request, tools),
    )
