"""JSON encoding and typed decoding of llmrt's wire values.

Encoders and decoders are built once. Every decoder raises `DecodeError`
(a `ValueError`) with a message naming the JSON path of the problem.

The decoders are closed over the built-in vocabulary (fast). When one fails
validation and a block, source or finish kind has been registered
(`llmrt.vocabulary.register_content_block` and its siblings), the value is decoded
again with the registered kinds (`_vocab.decode_open`); the hot path pays
nothing for that.
"""

from __future__ import annotations

from typing import Any, TypeVar, overload

import msgspec

from ._chunks import StreamChunk
from ._content import Message
from ._errors import DecodeError
from ._request import GenerateOptions
from ._vocab import decode_open, extended

__all__ = ["encode", "encode_into", "decode", "decode_chunk", "decode_message", "decode_request"]

T = TypeVar("T")

_encoder = msgspec.json.Encoder()
_chunk_decoder = msgspec.json.Decoder(StreamChunk)
_message_decoder = msgspec.json.Decoder(Message)
_request_decoder = msgspec.json.Decoder(GenerateOptions)
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}

#: ``encode(value) -> bytes``: compact JSON of any llmrt value.
encode = _encoder.encode
#: ``encode_into(value, buffer, offset)``: encode into a reused ``bytearray``.
encode_into = _encoder.encode_into


#: What a decoder may raise on bad input. A ``str`` holding a lone surrogate
#: fails UTF-8 encoding before msgspec sees it (`UnicodeEncodeError`).
_BAD_INPUT = (msgspec.DecodeError, msgspec.ValidationError, UnicodeEncodeError)


def _fail(exc: Exception) -> DecodeError:
    text = str(exc)
    if isinstance(exc, msgspec.ValidationError):
        # msgspec names no path for a problem with the top-level value itself
        # (a missing field, a failed ``__post_init__``); say so, so every
        # message points somewhere.
        if " - at `$" not in text:
            text += " - at `$`"
        return DecodeError(f"invalid value: {text}")
    if isinstance(exc, UnicodeEncodeError):
        return DecodeError(f"malformed JSON: text is not valid Unicode ({exc.reason})")
    return DecodeError(f"malformed JSON: {text}")


def decode_chunk(data: bytes | str) -> StreamChunk:
    """Decode one stream chunk. Raises `DecodeError`."""
    try:
        return _chunk_decoder.decode(data)
    except _BAD_INPUT as exc:
        if extended() and isinstance(exc, msgspec.ValidationError):
            value: StreamChunk = _decode_open(StreamChunk, data, exc)
            return value
        raise _fail(exc) from None


def decode_message(data: bytes | str) -> Message:
    """Decode one message. Raises `DecodeError`."""
    try:
        return _message_decoder.decode(data)
    except _BAD_INPUT as exc:
        if extended() and isinstance(exc, msgspec.ValidationError):
            value: Message = _decode_open(Message, data, exc)
            return value
        raise _fail(exc) from None


def decode_request(data: bytes | str) -> GenerateOptions:
    """Decode one `GenerateOptions`. Raises `DecodeError`."""
    try:
        return _request_decoder.decode(data)
    except _BAD_INPUT as exc:
        if extended() and isinstance(exc, msgspec.ValidationError):
            value: GenerateOptions = _decode_open(GenerateOptions, data, exc)
            return value
        raise _fail(exc) from None


@overload
def decode(data: bytes | str, type: type[T]) -> T: ...
@overload
def decode(data: bytes | str, type: Any) -> Any: ...  # a union alias such as `StreamChunk`


def decode(data: bytes | str, type: Any) -> Any:
    """Decode any llmrt wire type or union of them (a decoder per type is built once).

    Raises `DecodeError`.
    """
    dec = _decoders.get(type)
    if dec is None:
        dec = _decoders[type] = msgspec.json.Decoder(type)
    try:
        return dec.decode(data)
    except _BAD_INPUT as exc:
        if extended() and isinstance(exc, msgspec.ValidationError):
            return _decode_open(type, data, exc)
        raise _fail(exc) from None


def _decode_open(type: Any, data: bytes | str, failure: msgspec.ValidationError) -> Any:
    """The slow path: decode again with the registered kinds (see the module docstring)."""
    try:
        return decode_open(msgspec.json.Decoder, type, data, failure)
    except _BAD_INPUT as exc:
        raise _fail(exc) from None
