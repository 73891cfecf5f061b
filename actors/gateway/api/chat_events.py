"""llmrt chunks as OpenAI Chat Completions answers: ``chat.completion.chunk`` events, or one object.

`ChatStreamEncoder` writes the server-sent events of ``stream: true``, as
OpenAI sends them (``data:`` lines, no ``event:`` names):

* one chunk per delta, choice 0: the first carries ``role: "assistant"``;
  text is ``content``, reasoning ``reasoning_content`` (DeepSeek's field, which
  the SDKs keep), a tool call ``tool_calls[{index, id, type, function{name,
  arguments}}]`` first and ``{index, function{arguments}}`` after (``index``
  counts tool calls, from 0);
* at the finish: a chunk with ``delta: {}`` and ``finish_reason`` (``stop``,
  ``tool_calls``, ``length``); with ``stream_options.include_usage`` every
  chunk carries ``usage: null`` and one more chunk ``choices: []`` carries the
  usage; then ``data: [DONE]``;
* a failure after the stream started is ``data: {"error": {...}}`` (what the
  SDKs raise from), and the stream ends without ``[DONE]``.

`chat_completion` is the ``stream: false`` answer, assembled by `BlockAssembler`.
Usage: ``prompt_tokens`` counts all input (llmrt's uncached, cache-read and
cache-write tokens), ``prompt_tokens_details`` has ``cached_tokens`` (the
cache reads) and ``cache_write_tokens``;
``completion_tokens`` is llmrt's output (reasoning included, as OpenAI counts
it), ``completion_tokens_details.reasoning_tokens`` the reasoning.
"""

from __future__ import annotations

import time
from typing import Any, Final

from llmrt import (
    BlockAssembler,
    Finish,
    FinishAborted,
    FinishError,
    FinishMaxTokens,
    FinishReason,
    FinishToolCalls,
    ReasoningBlock,
    TextBlock,
    TokenUsage,
    ToolCallBlock,
)

from ._common import billed_input, encode_json, new_id
from ._errors import openai_error_object
from ._ledger import REASONING, TEXT, TOOL, Ledger, Slot

__all__ = ["ChatStreamEncoder", "chat_completion", "chat_usage", "finish_reason_of"]

_DONE: Final = b"data: [DONE]\n\n"
_PING: Final = b": ping\n\n"


def finish_reason_of(reason: FinishReason) -> str:
    """Chat's ``finish_reason`` of a successful llmrt finish."""
    if type(reason) is FinishToolCalls:
        return "tool_calls"
    if type(reason) is FinishMaxTokens:
        return "length"
    return "stop"


def chat_usage(usage: TokenUsage | None) -> dict[str, Any]:
    """OpenAI's usage object of llmrt's disjoint counts."""
    if usage is None:
        usage = TokenUsage(input_tokens=0, output_tokens=0)
    prompt = billed_input(usage)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": {
            "cached_tokens": usage.cache_read_tokens or 0,
            "cache_write_tokens": usage.cache_write_tokens or 0,
        },
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
    }


class ChatStreamEncoder(Ledger):
    """Chunks in (`push`), ``chat.completion.chunk`` events out, as bytes ready to write.

    ``completion_id`` (default ``chatcmpl-<hex>``) and ``created`` (default:
    now, in Unix seconds) are the same on every chunk. Pure computation.
    """

    __slots__ = ("_head", "_out", "_role_sent", "_tail", "_tools", "_usage_tail")

    content_type: Final = "text/event-stream; charset=utf-8"

    def __init__(
        self,
        *,
        model: str,
        include_usage: bool = False,
        completion_id: str | None = None,
        created: int | None = None,
    ) -> None:
        super().__init__()
        head = {
            "id": completion_id or new_id("chatcmpl-"),
            "object": "chat.completion.chunk",
            "created": int(time.time()) if created is None else created,
            "model": model,
            "system_fingerprint": None,
        }
        # Every chunk is this head, its choices, and this tail: encoded once.
        self._head = b"data: " + encode_json(head)[:-1] + b',"choices":'
        self._tail = b',"usage":null}\n\n' if include_usage else b"}\n\n"
        self._usage_tail = include_usage
        self._out: list[bytes] = []
        self._role_sent = False
        self._tools = 0

    def push(self, chunk: Any) -> bytes:
        """The bytes of one chunk (often none: a block start, usage before the finish)."""
        self.feed(chunk)
        if not self._out:
            return b""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def ping(self) -> bytes:
        """An SSE comment: keeps the connection alive, and every client skips it."""
        return _PING

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> None:
        if not self._role_sent:
            self._role_sent = True
            delta = {"role": "assistant", **delta}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        self._out.append(self._head + b"[" + encode_json(choice) + b"]" + self._tail)

    def _open(self, slot: Slot) -> None:
        if slot.kind == TOOL:
            slot.position = self._tools
            self._tools += 1
            call = {
                "index": slot.position,
                "id": slot.call_id,
                "type": "function",
                "function": {"name": slot.name, "arguments": ""},
            }
            self._chunk({"tool_calls": [call]})

    def _delta(self, slot: Slot, text: str) -> None:
        if slot.kind == TEXT:
            self._chunk({"content": text})
        elif slot.kind == REASONING:
            self._chunk({"reasoning_content": text})
        else:
            self._chunk({"tool_calls": [{"index": slot.position, "function": {"arguments": text}}]})

    def _close(self, slot: Slot) -> None:
        pass  # Chat has no block ends

    def _finish(self, finish: Finish, usage: TokenUsage | None) -> None:
        reason = finish.reason
        if type(reason) is FinishError or type(reason) is FinishAborted:
            error = {"error": openai_error_object(reason.failure)}
            self._out.append(b"data: " + encode_json(error) + b"\n\n")
            return
        self._chunk({}, finish_reason_of(reason))
        if self._usage_tail:
            self._out.append(
                self._head + b'[],"usage":' + encode_json(chat_usage(usage)) + b"}\n\n"
            )
        self._out.append(_DONE)


def chat_completion(
    assembler: BlockAssembler,
    *,
    model: str,
    completion_id: str | None = None,
    created: int | None = None,
) -> bytes:
    """The ``chat.completion`` object (JSON bytes) of a call that finished successfully.

    Text blocks join into ``content`` (None without text), reasoning blocks
    into ``reasoning_content``; tool calls are ``tool_calls``. Other blocks
    have no place in the answer.
    """
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in assembler.blocks():
        if type(block) is TextBlock:
            texts.append(block.text)
        elif type(block) is ReasoningBlock:
            reasoning.append(block.text)
        elif type(block) is ToolCallBlock:
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": block.arguments},
                }
            )
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts else None,
        "refusal": None,
    }
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    completion = {
        "id": completion_id or new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason_of(assembler.finish),
            }
        ],
        "usage": chat_usage(assembler.usage),
    }
    return encode_json(completion)
