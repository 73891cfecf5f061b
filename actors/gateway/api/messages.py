"""Anthropic Messages (``POST /v1/messages``) requests as `GenerateOptions`. No I/O.

`decode_messages` reads the client's JSON (strict about types; unknown fields
are refused) and returns a `MessagesCall`. `PARAMETERS` is the table
docs/http-api.md prints.

``system`` (a string or text blocks) is the system prompt. User turns carry
``text``, ``image`` (base64 or URL sources) and ``tool_result`` blocks;
assistant turns ``text``, ``thinking``, ``redacted_thinking`` and
``tool_use``, and a thinking block's ``signature`` (or the redacted block's
``data``) is its replay state (see `_replay`). ``thinking`` with a
``budget_tokens`` is carried as the reasoning effort whose budget is nearest
(`THINKING_BUDGETS`, the Anthropic adapter's); ``output_config.effort``
is carried as the route's effort of that name. ``cache_control`` marks are
ignored: they make a prompt cheaper, not different.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

import attrs
import msgspec

from llmrt import (
    BlockAssembler,
    ContentBlock,
    ErrorCode,
    GenerateOptions,
    JsonSchemaFormat,
    Message,
    MessageSource,
    ModelSource,
    NamedToolChoice,
    ReasoningBlock,
    ReplayEnvelope,
    TextBlock,
    ToolCallBlock,
    ToolChoice,
    ToolResultBlock,
    ToolSchema,
    ToolSource,
    UserSource,
)

from ._common import Param, decode_body, image_from_url, refuse, resolve_model
from ._errors import ApiRequestError, ErrorAnswer, anthropic_error
from ._replay import entry_of_signature
from .messages_events import MessagesStreamEncoder, message_object

__all__ = ["PARAMETERS", "THINKING_BUDGETS", "MessagesCall", "decode_messages", "effort_of_budget"]

#: The thinking budgets of the efforts ``low``, ``medium``, ``high``: the Anthropic
#: adapter's (``llmrt.adapters.anthropic.THINKING_BUDGETS``; actors name no concrete
#: adapter, a test keeps the two equal), so a budget maps back to the effort that sends it.
THINKING_BUDGETS: Final[Mapping[str, int]] = {"low": 2_048, "medium": 8_192, "high": 24_576}

_Tokens = Annotated[int, msgspec.Meta(gt=0)]
_Temperature = Annotated[float, msgspec.Meta(ge=0, le=1)]


class _Strict(msgspec.Struct, forbid_unknown_fields=True):
    """Request Structs refuse fields they do not name: a new parameter is never dropped."""


class _Head(msgspec.Struct):
    type: str = ""


class _Text(_Strict):
    text: str
    type: Literal["text"] = "text"
    cache_control: Any = None
    citations: Any = None


class _Source(_Strict):
    type: Literal["base64", "url", "file"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    file_id: str | None = None


class _Image(_Strict):
    source: _Source
    type: Literal["image"] = "image"
    cache_control: Any = None


class _ToolUse(_Strict):
    id: str
    name: str
    input: msgspec.Raw
    type: Literal["tool_use"] = "tool_use"
    cache_control: Any = None
    caller: Any = None


class _ToolResult(_Strict):
    tool_use_id: str
    type: Literal["tool_result"] = "tool_result"
    content: str | list[msgspec.Raw] | None = None
    is_error: bool | None = None
    cache_control: Any = None


class _Thinking(_Strict):
    thinking: str
    signature: str
    type: Literal["thinking"] = "thinking"


class _Redacted(_Strict):
    data: str
    type: Literal["redacted_thinking"] = "redacted_thinking"


class _Turn(_Strict):
    role: Literal["user", "assistant"]
    content: str | list[msgspec.Raw]


class _Tool(_Strict):
    name: Annotated[str, msgspec.Meta(min_length=1)]
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    description: str | None = None
    strict: bool | None = None
    cache_control: Any = None
    eager_input_streaming: bool | None = None


class _ChoiceAuto(_Strict, tag_field="type", tag="auto"):
    disable_parallel_tool_use: bool | None = None


class _ChoiceAny(_Strict, tag_field="type", tag="any"):
    disable_parallel_tool_use: bool | None = None


class _ChoiceTool(_Strict, tag_field="type", tag="tool"):
    name: str
    disable_parallel_tool_use: bool | None = None


class _ChoiceNone(_Strict, tag_field="type", tag="none"):
    pass


class _ThinkingEnabled(_Strict, tag_field="type", tag="enabled"):
    budget_tokens: _Tokens
    display: str | None = None


class _ThinkingDisabled(_Strict, tag_field="type", tag="disabled"):
    pass


class _ThinkingAdaptive(_Strict, tag_field="type", tag="adaptive"):
    display: str | None = None


class _ThinkingBetweenTools(_Strict, tag_field="type", tag="between_tools"):
    pass


class _Format(_Strict):
    type: Literal["json_schema"]
    schema: dict[str, Any]


class _OutputConfig(_Strict):
    effort: str | None = None
    format: _Format | None = None


class MessagesRequest(_Strict):
    """The body of ``POST /v1/messages``, as far as llmrt reads it."""

    model: str
    max_tokens: _Tokens
    messages: Annotated[list[_Turn], msgspec.Meta(min_length=1)]
    system: str | list[_Text] | None = None
    stop_sequences: list[str] | None = None
    temperature: _Temperature | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool | None = None
    tools: list[msgspec.Raw] | None = None
    tool_choice: _ChoiceAuto | _ChoiceAny | _ChoiceTool | _ChoiceNone | None = None
    thinking: (
        _ThinkingEnabled | _ThinkingDisabled | _ThinkingAdaptive | _ThinkingBetweenTools | None
    ) = None
    output_config: _OutputConfig | None = None
    container: Any = None
    mcp_servers: Any = None
    context_management: Any = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    cache_control: Any = None
    inference_geo: str | None = None
    speed: str | None = None
    diagnostics: Any = None
    user_profile_id: str | None = None
    workspace_id: str | None = None


#: Every parameter of the API and what llmrt does with it (docs/http-api.md prints it).
PARAMETERS: Final[Mapping[str, Param]] = {
    "model": Param("carried", "`provider/model`, or an alias; echoed back as sent"),
    "max_tokens": Param("carried", "the output cap (at least 1)"),
    "messages": Param(
        "carried",
        "user (text, image, tool_result) and assistant (text, thinking, redacted_thinking, "
        "tool_use) turns; documents, files and server-tool blocks are refused",
    ),
    "system": Param("carried", "a string, or text blocks joined by blank lines"),
    "stop_sequences": Param("carried", "`stop`"),
    "temperature": Param("carried", "0 to 1"),
    "stream": Param("carried", "true: server-sent events"),
    "tools": Param("carried", "custom tools, with `strict`; server tools are refused"),
    "tool_choice": Param(
        "carried",
        "`auto`, `any` (required), `tool`, `none`; `disable_parallel_tool_use: true` is refused",
    ),
    "thinking": Param(
        "carried",
        "`enabled`: the effort whose budget is nearest `budget_tokens`; `disabled`: no "
        "effort; `adaptive`, `between_tools` and `display: omitted` are refused",
    ),
    "output_config": Param(
        "carried", "`format` (a JSON schema); `effort` as the route's effort of that name"
    ),
    "top_p": Param("refused", "any value"),
    "top_k": Param("refused", "any value"),
    "container": Param("refused", "any value"),
    "mcp_servers": Param("refused", "any value"),
    "context_management": Param("refused", "any value"),
    "metadata": Param("ignored", "`user_id`, for abuse monitoring"),
    "service_tier": Param("ignored", "capacity class, not the answer"),
    "cache_control": Param("ignored", "a caching mark (so are the blocks' `cache_control`)"),
    "inference_geo": Param("ignored", "where the provider runs the model"),
    "speed": Param("ignored", "the provider's serving speed"),
    "diagnostics": Param("ignored", "cache diagnostics"),
    "user_profile_id": Param("ignored", "billing attribution"),
    "workspace_id": Param("ignored", "billing attribution"),
}

_decoder = msgspec.json.Decoder(MessagesRequest)
_head = msgspec.json.Decoder(_Head)
_BLOCKS: Final[Mapping[str, msgspec.json.Decoder[Any]]] = {
    "text": msgspec.json.Decoder(_Text),
    "image": msgspec.json.Decoder(_Image),
    "tool_use": msgspec.json.Decoder(_ToolUse),
    "tool_result": msgspec.json.Decoder(_ToolResult),
    "thinking": msgspec.json.Decoder(_Thinking),
    "redacted_thinking": msgspec.json.Decoder(_Redacted),
}
_tool = msgspec.json.Decoder(_Tool)
_USER_BLOCKS: Final = frozenset({"text", "image", "tool_result"})
_ASSISTANT_BLOCKS: Final = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})


@attrs.frozen
class MessagesCall:
    """A decoded Messages request: what to run and what its answer needs."""

    options: GenerateOptions
    #: The model as the client named it, echoed in the message.
    model: str
    stream: bool

    def encoder(self, *, message_id: str | None = None) -> MessagesStreamEncoder:
        """The stream encoder of this call's answer."""
        return MessagesStreamEncoder(model=self.model, message_id=message_id)

    def answer(self, assembler: BlockAssembler, *, message_id: str | None = None) -> bytes:
        """The non-streaming ``message`` object of a finished call."""
        return message_object(assembler, model=self.model, message_id=message_id)

    def error(self, failure: Any) -> ErrorAnswer:
        return anthropic_error(failure)


def effort_of_budget(budget: int) -> str:
    """The reasoning effort whose thinking budget is nearest ``budget`` (by ratio)."""
    return min(THINKING_BUDGETS, key=lambda e: abs(math.log(budget / THINKING_BUDGETS[e])))


def _refuse_values(request: MessagesRequest) -> None:
    checks: tuple[tuple[str, bool, str], ...] = (
        ("top_p", request.top_p is not None, "llmrt carries temperature only"),
        ("top_k", request.top_k is not None, "llmrt carries temperature only"),
        ("container", request.container is not None, "llmrt offers no code execution"),
        ("mcp_servers", request.mcp_servers is not None, "llmrt connects to no MCP server"),
        ("context_management", request.context_management is not None, "llmrt sends the "
         "messages as given"),
    )  # fmt: skip
    for param, refused, why in checks:
        if refused:
            raise refuse(param, why)
    choice = request.tool_choice
    if choice is not None and getattr(choice, "disable_parallel_tool_use", None):
        raise refuse(
            "tool_choice.disable_parallel_tool_use", "every route may call tools in parallel"
        )


def _effort(request: MessagesRequest) -> str | None:
    thinking = request.thinking
    effort = request.output_config.effort if request.output_config is not None else None
    if thinking is None or isinstance(thinking, _ThinkingDisabled):
        return effort
    if isinstance(thinking, _ThinkingEnabled):
        if thinking.display not in (None, "summarized"):
            raise refuse("thinking.display", "llmrt streams the thinking it gets")
        if effort is not None:
            raise refuse("output_config.effort", "give a thinking budget or an effort, not both")
        return effort_of_budget(thinking.budget_tokens)
    tag = thinking.__struct_config__.tag
    raise refuse(
        "thinking.type", f"`{tag}` thinking has no llmrt form: use `enabled` with a budget"
    )


def _tools(request: MessagesRequest) -> tuple[ToolSchema, ...] | None:
    if not request.tools:
        return None
    out: list[ToolSchema] = []
    for i, raw in enumerate(request.tools):
        kind = decode_body(_head, raw, prefix=f"tools[{i}]").type
        if kind not in ("", "custom"):
            raise refuse(f"tools[{i}].type", f"`{kind[:60]}` is a server tool, run by Anthropic")
        tool = decode_body(_tool, raw, prefix=f"tools[{i}]")
        out.append(
            ToolSchema(
                name=tool.name,
                description=tool.description or "",
                parameters=tool.input_schema,
                strict=tool.strict,
            )
        )
    return tuple(out)


def _tool_choice(request: MessagesRequest) -> ToolChoice | None:
    choice = request.tool_choice
    if choice is None:
        return None
    if isinstance(choice, _ChoiceTool):
        return NamedToolChoice(name=choice.name)
    if isinstance(choice, _ChoiceAny):
        return "required"
    return "none" if isinstance(choice, _ChoiceNone) else "auto"


def _image(block: _Image, where: str) -> ContentBlock:
    source = block.source
    if source.type == "base64" and source.data is not None and source.media_type:
        return image_from_url(f"data:{source.media_type};base64,{source.data}", f"{where}.source")
    if source.type == "url" and source.url is not None:
        return image_from_url(source.url, f"{where}.source.url")
    if source.type == "file":
        raise refuse(f"{where}.source.type", "files live on Anthropic's servers")
    raise ApiRequestError(
        ErrorCode.INVALID_REQUEST,
        "an image source needs `media_type` and `data` (base64) or `url` (url)",
        param=f"{where}.source",
    )


def _result(block: _ToolResult, where: str) -> ToolResultBlock:
    content: list[ContentBlock] = []
    if isinstance(block.content, str):
        content.append(TextBlock(text=block.content))
    for j, raw in enumerate(block.content if isinstance(block.content, list) else ()):
        at = f"{where}.content[{j}]"
        kind = decode_body(_head, raw, prefix=at).type
        if kind == "text":
            content.append(TextBlock(text=decode_body(_BLOCKS["text"], raw, prefix=at).text))
        elif kind == "image":
            content.append(_image(decode_body(_BLOCKS["image"], raw, prefix=at), at))
        else:
            raise refuse(f"{at}.type", f"`{kind[:60]}` blocks have no llmrt form")
    return ToolResultBlock(
        tool_call_id=block.tool_use_id, content=tuple(content), is_error=bool(block.is_error)
    )


def _turn(turn: _Turn, i: int, provider: str, model: str, names: dict[str, str]) -> Message | None:
    where = f"messages[{i}].content"
    if isinstance(turn.content, str):
        blocks: list[ContentBlock] = [TextBlock(text=turn.content)]
        entries: list[Any] = [None]
    else:
        blocks, entries = [], []
        allowed = _USER_BLOCKS if turn.role == "user" else _ASSISTANT_BLOCKS
        for j, raw in enumerate(turn.content):
            at = f"{where}[{j}]"
            kind = decode_body(_head, raw, prefix=at).type
            if kind not in allowed:
                raise refuse(f"{at}.type", f"`{kind[:60]}` blocks have no llmrt form in a "
                             f"{turn.role} turn")  # fmt: skip
            block = decode_body(_BLOCKS[kind], raw, prefix=at)
            entry = None
            if isinstance(block, _Text):
                blocks.append(TextBlock(text=block.text))
            elif isinstance(block, _Image):
                blocks.append(_image(block, at))
            elif isinstance(block, _ToolResult):
                blocks.append(_result(block, at))
            elif isinstance(block, _Thinking):
                blocks.append(ReasoningBlock(text=block.thinking))
                entry = entry_of_signature(block.signature, f"{at}.signature")
            elif isinstance(block, _Redacted):
                blocks.append(ReasoningBlock(text=""))
                entry = {"redacted": block.data}
            else:
                assert isinstance(block, _ToolUse)
                arguments = bytes(block.input).decode()
                if not arguments.lstrip().startswith("{"):
                    raise refuse(f"{at}.input", "a tool call's input is a JSON object")
                names[block.id] = block.name
                blocks.append(ToolCallBlock(id=block.id, name=block.name, arguments=arguments))
            entries.append(entry)
    if not blocks:
        return None
    source: MessageSource
    if turn.role == "assistant":
        replay = None
        if any(entry is not None for entry in entries):
            replay = ReplayEnvelope(blocks=tuple(entries))
        source = ModelSource(provider=provider, model=model, replay_state=replay)
    elif all(type(b) is ToolResultBlock for b in blocks):
        calls = {names.get(b.tool_call_id) for b in blocks if type(b) is ToolResultBlock}
        source = ToolSource(tool=calls.pop() if len(calls) == 1 else None)
    else:
        source = UserSource()
    return Message(id=f"m{i}", role=turn.role, content=tuple(blocks), source=source)


def _system(request: MessagesRequest) -> str | None:
    system = request.system
    if system is None or isinstance(system, str):
        return system or None
    return "\n\n".join(block.text for block in system if block.text) or None


def decode_messages(body: bytes, *, aliases: Mapping[str, str] | None = None) -> MessagesCall:
    """The `MessagesCall` of a request body; `ApiRequestError` naming the parameter at fault."""
    request = decode_body(_decoder, body)
    _refuse_values(request)
    provider, model = resolve_model(request.model, aliases or {})
    names: dict[str, str] = {}
    messages = tuple(
        message
        for i, turn in enumerate(request.messages)
        if (message := _turn(turn, i, provider, model, names)) is not None
    )
    fmt = request.output_config.format if request.output_config is not None else None
    options = GenerateOptions(
        provider=provider,
        model=model,
        messages=messages,
        system=_system(request),
        reasoning_effort=_effort(request),
        tools=_tools(request),
        temperature=request.temperature,
        max_tokens=request.max_tokens,
        stop=tuple(request.stop_sequences) if request.stop_sequences else None,
        tool_choice=_tool_choice(request),
        response_format=JsonSchemaFormat(schema=fmt.schema) if fmt is not None else None,
    )
    return MessagesCall(options=options, model=request.model, stream=bool(request.stream))
