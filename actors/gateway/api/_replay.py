"""Replay state through a client's own history: the opaque slots the APIs have for it.

An adapter's per-block replay entry (`llmrt.ReplayEnvelope.blocks`) is
private to the adapter that made it; llmrt hands it back only with a message
whose `ModelSource` names a route that adapter serves. Over HTTP the client
keeps the history, so an entry can come back only if the API has a place
for an opaque string on that block, and the client sends it back as it got it:

* Anthropic Messages: a thinking block's ``signature`` (and ``redacted_thinking.data``);
* OpenAI Responses: a reasoning item's ``encrypted_content``;
* Chat Completions: no place (``reasoning_content`` is plain text).

An entry is written in the provider's own form when that form gives the
entry back exactly (an Anthropic signature as itself, so a history also
works against Anthropic directly); any other entry (another adapter's, or
one whose ids the stream had already fixed) is *packed*: ``llmrt:1:``
followed by the entry's JSON in unpadded base64url. Provider signatures and
encrypted content are base64 and never contain ``:``, so the two forms
cannot be confused. Unpacking bounds the JSON's nesting like any input.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import msgspec

from llmrt import ErrorCode
from llmrt._nesting import MAX_NESTING, json_too_deep

from ._errors import ApiRequestError

__all__ = [
    "PACKED",
    "pack",
    "unpack",
    "signature_of",
    "entry_of_signature",
    "encrypted_of",
    "entry_of_reasoning",
]

#: The prefix of a packed entry.
PACKED: Final = "llmrt:1:"

_encode = msgspec.json.Encoder().encode
_decode_any = msgspec.json.Decoder()


def pack(entry: Any) -> str:
    """``entry`` as an opaque string: `PACKED` and its JSON in unpadded base64url."""
    return PACKED + base64.urlsafe_b64encode(_encode(entry)).rstrip(b"=").decode("ascii")


def unpack(value: str, param: str) -> Any:
    """The entry `pack` made; ``INVALID_REQUEST`` naming ``param`` when it is damaged."""
    text = value[len(PACKED) :]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raw = None
    if raw is not None and json_too_deep(raw):
        raise ApiRequestError(
            ErrorCode.INVALID_REQUEST,
            f"llmrt replay state nests more than {MAX_NESTING} levels",
            param=param,
        )
    try:
        return _decode_any.decode(raw) if raw is not None else _decode_any.decode(b"!")
    except msgspec.DecodeError:
        raise ApiRequestError(
            ErrorCode.INVALID_REQUEST,
            "damaged llmrt replay state: send the value back exactly as llmrt gave it",
            param=param,
        ) from None


def signature_of(entry: Any) -> str:
    """A thinking block's ``signature`` for ``entry`` ("" for none)."""
    if entry is None:
        return ""
    if isinstance(entry, dict) and entry.keys() == {"signature"}:
        signature = entry["signature"]
        if isinstance(signature, str) and signature and not signature.startswith(PACKED):
            return signature
    return pack(entry)


def entry_of_signature(signature: str, param: str) -> Any:
    """The entry a thinking block's ``signature`` stands for (None for "")."""
    if not signature:
        return None
    if signature.startswith(PACKED):
        return unpack(signature, param)
    return {"signature": signature}


def encrypted_of(entry: Any, item_id: str, summary: list[str]) -> str | None:
    """A reasoning item's ``encrypted_content`` for ``entry`` (None for none).

    The provider's own form (the Responses adapter's ``{"id", "encrypted",
    "summary"}``) goes as itself only when the item carries that id and
    summary, so `entry_of_reasoning` rebuilds it exactly; else it is packed.
    """
    if entry is None:
        return None
    if isinstance(entry, dict) and entry == {
        "id": item_id,
        "encrypted": entry.get("encrypted"),
        "summary": summary,
    }:
        encrypted = entry["encrypted"]
        if isinstance(encrypted, str) and encrypted and not encrypted.startswith(PACKED):
            return encrypted
    return pack(entry)


def entry_of_reasoning(
    item_id: str | None, summary: list[str], encrypted: str | None, param: str
) -> Any:
    """The entry a reasoning item's ``encrypted_content`` stands for (None without one)."""
    if not encrypted:
        return None
    if encrypted.startswith(PACKED):
        return unpack(encrypted, param)
    entry: dict[str, Any] = {"id": item_id, "encrypted": encrypted, "summary": summary}
    if item_id is None:
        del entry["id"]
    return entry
