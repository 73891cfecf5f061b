"""llmrt chunks as Anthropic Messages answers: the stream's events, or one message object.

`MessagesStreamEncoder` writes ``stream: true`` as Anthropic does (named
events, each ``data.type`` equal to its name):

* ``message_start`` (a message with empty ``content``; usage is known only at
  the end, so it says 0 here and ``message_delta`` says the counts);
* per block ``content_block_start`` / ``content_block_delta``... /
  ``content_block_stop``, ``index`` counting the blocks of the answer: text is
  ``text_delta``, reasoning a ``thinking`` block with ``thinking_delta``, a
  tool call a ``tool_use`` block with ``input_json_delta``;
* ``message_delta`` with ``stop_reason`` (``end_turn``, ``tool_use``,
  ``max_tokens``) and the usage, then ``message_stop``;
* a failure after the stream started: ``event: error`` with the error object,
  and no ``message_stop`` (Anthropic's own behaviour);
* `ping` gives a ``ping`` event for the handler to send while it waits.

A thinking block's signature is llmrt replay state, which arrives with the
finish: so each thinking block stays open until then, and its
``signature_delta`` and ``content_block_stop`` come just before
``message_delta`` (the blocks after it stream meanwhile under their own
indices; the SDKs accumulate by index). A redacted thinking block has no
streamed form: its data travels packed in the signature (`_replay`).

`message_object` is the ``stream: false`` answer, from a `BlockAssembler`.
Usage: ``input_tokens`` is llmrt's uncached input, ``cache_read_input_tokens``
and ``cache_creation_input_tokens`` its cache reads and writes (Anthropic's
own arithmetic: the three add up to the billed input), ``output_tokens``
includes thinking, ``output_tokens_details.thinking_tokens`` counts it.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

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

from ._common import encode_json, new_id
from ._errors import anthropic_error_object
from ._ledger import REASONING, TEXT, Ledger, Slot
from ._replay import signature_of

__all__ = ["MessagesStreamEncoder", "message_object", "messages_usage", "stop_reason_of"]

_PING: Final = b'event: ping\ndata: {"type":"ping"}\n\n'


def stop_reason_of(reason: FinishReason) -> str:
    """Anthropic's ``stop_reason`` of a successful llmrt finish."""
    if type(reason) is FinishToolCalls:
        return "tool_use"
    if type(reason) is FinishMaxTokens:
        return "max_tokens"
    return "end_turn"


def messages_usage(usage: TokenUsage | None) -> dict[str, Any]:
    """Anthropic's usage object of llmrt's disjoint counts (the same arithmetic)."""
    if usage is None:
        usage = TokenUsage(input_tokens=0, output_tokens=0)
    out: dict[str, Any] = {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens or 0,
        "cache_read_input_tokens": usage.cache_read_tokens or 0,
        "output_tokens": usage.output_tokens,
    }
    if usage.reasoning_tokens is not None:
        out["output_tokens_details"] = {"thinking_tokens": usage.reasoning_tokens}
    return out


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + encode_json(payload) + b"\n\n"


class MessagesStreamEncoder(Ledger):
    """Chunks in (`push`), Messages stream events out, as bytes ready to write.

    ``message_id`` defaults to ``msg_<hex>``. Pure computation.
    """

    __slots__ = ("_blocks", "_id", "_model", "_out", "_started")

    content_type: Final = "text/event-stream; charset=utf-8"

    def __init__(self, *, model: str, message_id: str | None = None) -> None:
        super().__init__()
        self._id = message_id or new_id("msg_")
        self._model = model
        self._out: list[bytes] = []
        self._started = False
        self._blocks = 0

    def push(self, chunk: Any) -> bytes:
        """The bytes of one chunk (the first one also starts the message)."""
        if not self._started:
            self._started = True
            message: dict[str, Any] = {
                "id": self._id,
                "type": "message",
                "role": "assistant",
                "model": self._model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": messages_usage(None),
            }
            self._out.append(_event("message_start", {"type": "message_start", "message": message}))
        self.feed(chunk)
        if not self._out:
            return b""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def ping(self) -> bytes:
        """A ``ping`` event, for the handler to send while the call is quiet."""
        return _PING

    def _open(self, slot: Slot) -> None:
        slot.position = self._blocks
        self._blocks += 1
        block: dict[str, Any]
        if slot.kind == TEXT:
            block = {"type": "text", "text": ""}
        elif slot.kind == REASONING:
            block = {"type": "thinking", "thinking": "", "signature": ""}
        else:
            block = {"type": "tool_use", "id": slot.call_id, "name": slot.name}
            block["input"] = {}
        payload = {"type": "content_block_start", "index": slot.position, "content_block": block}
        self._out.append(_event("content_block_start", payload))

    def _delta(self, slot: Slot, text: str) -> None:
        delta: dict[str, Any]
        if slot.kind == TEXT:
            delta = {"type": "text_delta", "text": text}
        elif slot.kind == REASONING:
            delta = {"type": "thinking_delta", "thinking": text}
        else:
            delta = {"type": "input_json_delta", "partial_json": text}
        payload = {"type": "content_block_delta", "index": slot.position, "delta": delta}
        self._out.append(_event("content_block_delta", payload))

    def _stop(self, slot: Slot) -> None:
        payload = {"type": "content_block_stop", "index": slot.position}
        self._out.append(_event("content_block_stop", payload))

    def _close(self, slot: Slot) -> None:
        if slot.kind != REASONING:
            self._stop(slot)
        # A thinking block waits for its signature, which comes with the finish.

    def _finish(self, finish: Finish, usage: TokenUsage | None) -> None:
        reason = finish.reason
        if type(reason) is FinishError or type(reason) is FinishAborted:
            self._out.append(_event("error", anthropic_error_object(reason.failure)))
            return
        envelope = finish.replay_state
        entries = envelope.blocks if envelope is not None else None
        if entries is not None and len(entries) != len(self.blocks):
            entries = None  # it does not describe these blocks (as the assembler rules)
        for slot in self.blocks:
            if slot.kind != REASONING or slot.position < 0:
                continue
            signature = signature_of(entries[slot.order] if entries is not None else None)
            if signature:
                sign = {"type": "signature_delta", "signature": signature}
                payload = {"type": "content_block_delta", "index": slot.position, "delta": sign}
                self._out.append(_event("content_block_delta", payload))
            self._stop(slot)
        stop = {"stop_reason": stop_reason_of(reason), "stop_sequence": None}
        ending = {"type": "message_delta", "delta": stop, "usage": messages_usage(usage)}
        self._out.append(_event("message_delta", ending))
        self._out.append(_event("message_stop", {"type": "message_stop"}))


_decode_any = msgspec.json.Decoder()


def _redacted(entry: Any) -> str | None:
    """The data of a redacted thinking block's entry (``{"redacted": data}``), else None."""
    if isinstance(entry, dict) and entry.keys() == {"redacted"}:
        data = entry["redacted"]
        return data if isinstance(data, str) and data else None
    return None


def _input(call: ToolCallBlock) -> Any:
    """A tool call's arguments as ``tool_use.input``: the model's own JSON text when it is an
    object, ``{}`` when empty or (a broken answer) not an object."""
    if call.arguments.strip():
        try:
            value = _decode_any.decode(call.arguments)
        except msgspec.DecodeError:
            value = None
        if isinstance(value, dict):
            return msgspec.Raw(call.arguments.encode())
    return {}


def message_object(
    assembler: BlockAssembler, *, model: str, message_id: str | None = None
) -> bytes:
    """The ``message`` object (JSON bytes) of a call that finished successfully."""
    envelope = assembler.replay_state
    entries = envelope.blocks if envelope is not None and envelope.blocks is not None else None
    content: list[dict[str, Any]] = []
    for position, block in enumerate(assembler.blocks()):
        if type(block) is TextBlock:
            content.append({"type": "text", "text": block.text})
        elif type(block) is ReasoningBlock:
            entry = entries[position] if entries is not None else None
            if _redacted(entry) is not None and not block.text:
                content.append({"type": "redacted_thinking", "data": _redacted(entry)})
            else:
                signature = signature_of(entry)
                content.append({"type": "thinking", "thinking": block.text, "signature": signature})
        elif type(block) is ToolCallBlock:
            content.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": _input(block)}
            )
    message = {
        "id": message_id or new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason_of(assembler.finish),
        "stop_sequence": None,
        "usage": messages_usage(assembler.usage),
    }
    return encode_json(message)
