"""Prompt helpers every wire module shares: the one system prompt, image placeholders,
tool results as text, tool-call arguments as an object, usable replay entries.

Pure functions over the vocabulary: each provider's body builder (OpenAI chat,
Anthropic, Gemini, Responses) imports them from here rather than from another
provider's module.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from llmrt import (
    ErrorCode,
    GenerateOptions,
    ImageBlock,
    LlmError,
    Message,
    ModelSource,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from llmrt.images import image_placeholder

__all__ = [
    "image_placeholder",
    "replay_entries",
    "replay_log",
    "system_prompt",
    "tool_arguments",
    "tool_result_text",
]

#: Replay state that cannot be used is reported here (WARNING), never raised:
#: the message is sent as provider-neutral content instead.
replay_log = logging.getLogger("llmrt.replay")


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


def tool_result_text(result: ToolResultBlock, images: list[ImageBlock], image_input: bool) -> str:
    """A tool result as one text: its texts and a placeholder per image, blank-line separated.

    Images go to ``images`` as well when the route takes them, for a provider
    that can only send them in a message of their own.
    """
    texts: list[str] = ["[tool error]"] if result.is_error else []
    for block in result.content:
        if type(block) is TextBlock:
            texts.append(block.text)
        elif type(block) is ImageBlock:
            texts.append(image_placeholder(block))
            if image_input:
                images.append(block)
    return "\n\n".join(texts)


def tool_arguments(call: ToolCallBlock) -> Any:
    """A tool call's arguments as the JSON object providers want back (``{}`` when empty).

    Raises `LlmError` ``INVALID_REQUEST`` when they are not a JSON object.
    """
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


def replay_entries(message: Message) -> tuple[Any, ...] | None:
    """The per-block replay entries of an assistant message, when they fit its blocks.

    Entries describe the stored blocks position by position; a mismatch means
    the state does not describe this content, so none of it is used, and a
    WARNING on ``llmrt.replay`` says so (never the state itself).
    """
    source = message.source
    if type(source) is not ModelSource or source.replay_state is None:
        return None
    entries = source.replay_state.blocks
    if entries is None or len(entries) != len(message.content):
        replay_log.warning(
            "replay state of message %s (%s/%s) does not describe its %d blocks "
            "(%s entries); sending the message without it",
            message.id,
            source.provider,
            source.model,
            len(message.content),
            "no" if entries is None else len(entries),
        )
        return None
    return entries
