"""llmrt chunks as OpenAI Responses answers: the semantic stream events, or one response object.

`ResponsesStreamEncoder` writes ``stream: true`` as OpenAI does: named events
(``event: <type>``), each with its ``sequence_number`` (0, 1, ...):

* ``response.created`` and ``response.in_progress`` (status ``in_progress``);
* per text block, a ``message`` item: ``response.output_item.added``,
  ``response.content_part.added``, ``response.output_text.delta``...,
  ``response.output_text.done``, ``response.content_part.done``,
  ``response.output_item.done``;
* per reasoning block, a ``reasoning`` item whose one summary part carries the
  text: ``response.reasoning_summary_part.added``,
  ``response.reasoning_summary_text.delta``..., ``.done``, ``part.done``;
* per tool call, a ``function_call`` item (``call_id``, ``name``):
  ``response.function_call_arguments.delta``..., ``.done``;
* at the finish ``response.completed`` (``stop``, ``tool-calls``),
  ``response.incomplete`` (``max-tokens``: ``incomplete_details.reason``
  ``max_output_tokens``) or, for a failure, an ``error`` event and
  ``response.failed``; each with the whole response, usage included.

Replay state arrives with llmrt's finish, after the items are done: the
reasoning items of ``response.completed`` carry ``encrypted_content``
(packed, see `_replay`; their ``output_item.done`` does not). Clients that
build the next ``input`` from the response's ``output`` (the SDKs'
``get_final_response()``) keep it.

`response_object` is the ``stream: false`` answer, from a `BlockAssembler`;
a reasoning item there carries the provider's own id and encrypted content
when that reproduces the replay entry exactly. Usage: ``input_tokens`` is all
input, ``input_tokens_details`` has ``cached_tokens`` (cache reads) and
``cache_write_tokens``; ``output_tokens`` includes reasoning,
``output_tokens_details.reasoning_tokens``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from llmrt import (
    BlockAssembler,
    ErrorCode,
    Finish,
    FinishAborted,
    FinishError,
    FinishMaxTokens,
    LlmFailure,
    ReasoningBlock,
    TextBlock,
    TokenUsage,
    ToolCallBlock,
)

from ._common import billed_input, encode_json, new_id
from ._errors import error_class
from ._ledger import REASONING, TEXT, TOOL, Ledger, Slot
from ._replay import encrypted_of

__all__ = ["ResponsesStreamEncoder", "response_object", "responses_usage"]

_PING: Final = b": ping\n\n"
#: ``response.error.code`` takes a fixed set of values (the SDK's `ResponseError`).
_FAILED_CODES: Final[dict[str, str]] = {
    ErrorCode.RATE_LIMIT: "rate_limit_exceeded",
    ErrorCode.INVALID_REQUEST: "invalid_prompt",
    ErrorCode.CONTEXT_WINDOW_EXCEEDED: "invalid_prompt",
}


def responses_usage(usage: TokenUsage | None) -> dict[str, Any]:
    """The Responses usage object of llmrt's disjoint counts."""
    if usage is None:
        usage = TokenUsage(input_tokens=0, output_tokens=0)
    total_input = billed_input(usage)
    return {
        "input_tokens": total_input,
        "input_tokens_details": {
            "cached_tokens": usage.cache_read_tokens or 0,
            "cache_write_tokens": usage.cache_write_tokens or 0,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
        "total_tokens": total_input + usage.output_tokens,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [_text_part(text)],
    }


def _reasoning_item(item_id: str, summary: list[str], entry: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text} for text in summary],
    }
    encrypted = encrypted_of(entry, item_id, summary)
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def _call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def _response(
    response_id: str,
    created: int,
    model: str,
    echo: Mapping[str, Any],
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage,
        "error": None,
        "incomplete_details": None,
        **echo,
    }


def _failed(response: dict[str, Any], failure: LlmFailure) -> None:
    response["status"] = "failed"
    code = _FAILED_CODES.get(failure.code, "server_error")
    response["error"] = {"code": code, "message": failure.message}


def _incomplete(response: dict[str, Any]) -> None:
    response["status"] = "incomplete"
    response["incomplete_details"] = {"reason": "max_output_tokens"}


class ResponsesStreamEncoder(Ledger):
    """Chunks in (`push`), Responses stream events out, as bytes ready to write.

    ``response_id`` defaults to ``resp_<hex>``; item ids derive from it, so a
    fixed id gives a fixed stream. ``created`` is Unix seconds (default: now).
    Pure computation.
    """

    __slots__ = (
        "_created",
        "_echo",
        "_id",
        "_items",
        "_model",
        "_out",
        "_seq",
        "_started",
        "_summaries",
    )

    content_type: Final = "text/event-stream; charset=utf-8"

    def __init__(
        self,
        *,
        model: str,
        echo: Mapping[str, Any],
        response_id: str | None = None,
        created: int | None = None,
    ) -> None:
        super().__init__()
        self._id = response_id or new_id("resp_")
        self._created = int(time.time()) if created is None else created
        self._model = model
        self._echo = echo
        self._out: list[bytes] = []
        self._seq = 0
        self._started = False
        #: The done items, by output index.
        self._items: list[dict[str, Any]] = []
        #: The output indices of reasoning items whose summary part is open.
        self._summaries: set[int] = set()

    def push(self, chunk: Any) -> bytes:
        """The bytes of one chunk (the first one also opens the response)."""
        if not self._started:
            self._started = True
            response = self._snapshot("in_progress", None)
            self._event("response.created", response=response)
            self._event("response.in_progress", response=response)
        self.feed(chunk)
        if not self._out:
            return b""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def ping(self) -> bytes:
        """An SSE comment: keeps the connection alive, and every client skips it."""
        return _PING

    def _snapshot(self, status: str, usage: dict[str, Any] | None) -> dict[str, Any]:
        output = [item for item in self._items if item]
        return _response(self._id, self._created, self._model, self._echo, status, output, usage)

    def _event(self, kind: str, **fields: Any) -> None:
        payload = {"type": kind, **fields, "sequence_number": self._seq}
        self._seq += 1
        self._out.append(b"event: " + kind.encode() + b"\ndata: " + encode_json(payload) + b"\n\n")

    def _item_id(self, prefix: str, slot: Slot) -> str:
        return f"{prefix}_{self._id.removeprefix('resp_')}_{slot.position}"

    def _open(self, slot: Slot) -> None:
        slot.position = len(self._items)
        self._items.append({})  # its place, filled when it is done
        index = slot.position
        if slot.kind == TEXT:
            item_id = self._item_id("msg", slot)
            item = _message_item(item_id, "", "in_progress")
            item["content"] = []
            self._event("response.output_item.added", output_index=index, item=item)
            self._event(
                "response.content_part.added",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part=_text_part(""),
            )
        elif slot.kind == REASONING:
            item = {"id": self._item_id("rs", slot), "type": "reasoning", "summary": []}
            self._event("response.output_item.added", output_index=index, item=item)
        else:
            item_id = self._item_id("fc", slot)
            item = _call_item(item_id, slot.call_id or "", slot.name or "", "", "in_progress")
            self._event("response.output_item.added", output_index=index, item=item)

    def _delta(self, slot: Slot, text: str) -> None:
        index = slot.position
        if slot.kind == TEXT:
            self._event(
                "response.output_text.delta",
                item_id=self._item_id("msg", slot),
                output_index=index,
                content_index=0,
                delta=text,
                logprobs=[],
            )
        elif slot.kind == REASONING:
            item_id = self._item_id("rs", slot)
            if index not in self._summaries:  # the first summary text opens the summary part
                self._summaries.add(index)
                self._event(
                    "response.reasoning_summary_part.added",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    part={"type": "summary_text", "text": ""},
                )
            self._event(
                "response.reasoning_summary_text.delta",
                item_id=item_id,
                output_index=index,
                summary_index=0,
                delta=text,
            )
        else:
            self._event(
                "response.function_call_arguments.delta",
                item_id=self._item_id("fc", slot),
                output_index=index,
                delta=text,
            )

    def _close(self, slot: Slot) -> None:
        index = slot.position
        text = slot.text()
        status = "incomplete" if self.finished else "completed"
        if slot.kind == TEXT:
            item_id = self._item_id("msg", slot)
            self._event(
                "response.output_text.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                text=text,
                logprobs=[],
            )
            self._event(
                "response.content_part.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part=_text_part(text),
            )
            item = _message_item(item_id, text, status)
        elif slot.kind == REASONING:
            item_id = self._item_id("rs", slot)
            if index in self._summaries:
                part = {"type": "summary_text", "text": text}
                self._event(
                    "response.reasoning_summary_text.done",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    text=text,
                )
                self._event(
                    "response.reasoning_summary_part.done",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    part=part,
                )
            item = _reasoning_item(item_id, [text] if text else [], None)
        else:
            assert slot.kind == TOOL
            item_id = self._item_id("fc", slot)
            self._event(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=index,
                name=slot.name,
                arguments=text,
            )
            item = _call_item(item_id, slot.call_id or "", slot.name or "", text, status)
        self._items[index] = item
        self._event("response.output_item.done", output_index=index, item=item)

    def _finish(self, finish: Finish, usage: TokenUsage | None) -> None:
        envelope = finish.replay_state
        entries = envelope.blocks if envelope is not None else None
        if entries is not None and len(entries) == len(self.blocks):
            for slot, entry in zip(self.blocks, entries, strict=True):
                if slot.kind == REASONING and entry is not None and slot.position >= 0:
                    item = self._items[slot.position]
                    summary = [part["text"] for part in item["summary"]]
                    self._items[slot.position] = _reasoning_item(item["id"], summary, entry)
        response = self._snapshot("completed", responses_usage(usage))
        reason = finish.reason
        if type(reason) is FinishError or type(reason) is FinishAborted:
            failure = reason.failure
            kind = error_class(failure.code)
            self._event(
                "error",
                code=kind.openai_code or kind.openai_type,
                message=failure.message,
                param=None,
            )
            _failed(response, failure)
            self._event("response.failed", response=response)
        elif type(reason) is FinishMaxTokens:
            _incomplete(response)
            self._event("response.incomplete", response=response)
        else:
            self._event("response.completed", response=response)


def response_object(
    assembler: BlockAssembler,
    *,
    model: str,
    echo: Mapping[str, Any],
    response_id: str | None = None,
    created: int | None = None,
) -> bytes:
    """The ``response`` object (JSON bytes) of a call that finished successfully."""
    response_id = response_id or new_id("resp_")
    stem = response_id.removeprefix("resp_")
    blocks = assembler.blocks()
    envelope = assembler.replay_state
    entries = envelope.blocks if envelope is not None and envelope.blocks is not None else None
    output: list[dict[str, Any]] = []
    for position, block in enumerate(blocks):
        n = len(output)
        if type(block) is TextBlock:
            output.append(_message_item(f"msg_{stem}_{n}", block.text, "completed"))
        elif type(block) is ReasoningBlock:
            entry = entries[position] if entries is not None else None
            item_id, summary = f"rs_{stem}_{n}", [block.text] if block.text else []
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                item_id = entry["id"]  # the provider's own item, given back as itself
                native = entry.get("summary")
                if isinstance(native, list) and "\n\n".join(map(str, native)) == block.text:
                    summary = [str(text) for text in native]
            output.append(_reasoning_item(item_id, summary, entry))
        elif type(block) is ToolCallBlock:
            output.append(
                _call_item(f"fc_{stem}_{n}", block.id, block.name, block.arguments, "completed")
            )
    created = int(time.time()) if created is None else created
    response = _response(
        response_id, created, model, echo, "completed", output, responses_usage(assembler.usage)
    )
    if type(assembler.finish) is FinishMaxTokens:
        _incomplete(response)
    return encode_json(response)
