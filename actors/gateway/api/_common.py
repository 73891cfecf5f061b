"""What the three API translations share: model naming, images, body decoding, SSE framing, ids.

No I/O. The request decoders of `chat`, `responses` and `messages` use these
to turn a client's JSON into `GenerateOptions`; the encoders use the framing
and the usage arithmetic.
"""

from __future__ import annotations

import base64
import binascii
import random
import re
from collections.abc import Mapping
from typing import Final, Literal, TypeVar

import msgspec

from llmrt import ErrorCode, ImageBlock, TokenUsage

from ._errors import ApiRequestError

__all__ = [
    "Param",
    "ParamKind",
    "resolve_model",
    "image_from_url",
    "decode_body",
    "refuse",
    "sse",
    "new_id",
    "encode_json",
    "billed_input",
]

T = TypeVar("T")

ParamKind = Literal["carried", "refused", "ignored"]


class Param(msgspec.Struct, frozen=True):
    """One request parameter of an API, as the docs' parameter table prints it.

    ``kind``: ``carried`` (into `GenerateOptions`, or into the answer's
    shape), ``refused`` (the API's 400 naming it, at least for the values
    ``note`` says), ``ignored`` (it does not change the answer).
    """

    kind: ParamKind
    note: str


encode_json = msgspec.json.Encoder().encode


def resolve_model(name: str, aliases: Mapping[str, str]) -> tuple[str, str]:
    """``(provider, model)`` of the name a client sent.

    An alias (``[aliases]`` in ``llmrt.toml``) names ``provider/model``; else
    the name itself must be ``provider/model`` (split at the first ``/``, so
    ``openrouter/anthropic/claude-sonnet-4.5`` is the ``openrouter`` route's
    ``anthropic/claude-sonnet-4.5``). Anything else is ``NO_ADAPTER``
    (answered 404 ``model_not_found``) saying how to name a model.
    """
    target = aliases.get(name, name)
    provider, slash, model = target.partition("/")
    if slash and provider and model:
        return provider, model
    known = f"; aliases: {', '.join(sorted(aliases)[:20])}" if aliases else ""
    raise ApiRequestError(
        ErrorCode.NO_ADAPTER,
        f"the model {name[:200]!r} names no route: write `provider/model` "
        f"(`GET /v1/models` lists them, e.g. `demo/demo-1`) or an alias from "
        f"the `[aliases]` table of llmrt.toml{known}",
        param="model",
    )


#: Media types of the image extensions a URL may end in.
_EXTENSIONS: Final = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "heic": "image/heic",
    "heif": "image/heif",
}
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+)((?:;[^;,]*)*);base64,", re.A)


def image_from_url(url: str, param: str, media_type: str | None = None) -> ImageBlock:
    """The `ImageBlock` of an image URL: ``data:<type>;base64,...`` or ``http(s)://``.

    A URL image's media type is ``media_type`` if given, else guessed from the
    path's extension, else ``image/*`` (the provider fetches the image and
    finds its type; Gemini wants a real one, so name the extension there).
    Anything else is ``INVALID_REQUEST`` naming ``param``.
    """
    if url.startswith("data:"):
        match = _DATA_URL.match(url)
        if match is None:
            raise ApiRequestError(
                ErrorCode.INVALID_REQUEST,
                "an image data URL must be `data:<media type>;base64,<data>`",
                param=param,
            )
        data = url[match.end() :]
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ApiRequestError(
                ErrorCode.INVALID_REQUEST, "the image data URL is not valid base64", param=param
            ) from None
        return ImageBlock(media_type=match.group(1).lower(), data=data)
    lowered = url[:8].lower()
    if lowered.startswith(("http://", "https://")):
        if media_type is None:
            path = url.split("?", 1)[0].split("#", 1)[0]
            extension = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
            media_type = _EXTENSIONS.get(extension, "image/*")
        return ImageBlock(media_type=media_type, url=url)
    raise ApiRequestError(
        ErrorCode.INVALID_REQUEST,
        "an image URL must be a `data:` URL or an http(s) URL",
        param=param,
    )


_PATH = re.compile(r" - at `\$(.*)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `([^`]*)`")
_MISSING = re.compile(r"^Object missing required field `([^`]*)`")


def _param_of(message: str) -> str | None:
    """The request parameter a msgspec message points at (``messages[0].content``), if any."""
    at = _PATH.search(message)
    path = at.group(1).lstrip(".") if at is not None else ""
    named = _UNKNOWN.match(message) or _MISSING.match(message)
    if named is not None:
        path = f"{path}.{named.group(1)}" if path else named.group(1)
    return path or None


def decode_body(decoder: msgspec.json.Decoder[T], body: bytes, *, prefix: str = "") -> T:
    """``body`` decoded, or ``INVALID_REQUEST`` naming the parameter msgspec points at.

    ``prefix`` is prepended to the parameter path (a part decoded on its own).
    An unknown field is refused like a parameter the API does not have.
    """
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        text = str(exc)
        param = _param_of(text)
        if prefix:
            param = prefix + ("" if param is None or param.startswith("[") else ".") + (param or "")
        if _UNKNOWN.match(text):
            text = f"unknown parameter `{param}`: llmrt does not carry it" + (
                " (see docs/http-api.md)" if "." not in (param or "") else ""
            )
        raise ApiRequestError(ErrorCode.INVALID_REQUEST, text, param=param) from None
    except msgspec.DecodeError as exc:
        raise ApiRequestError(
            ErrorCode.INVALID_REQUEST, f"the request body is not JSON: {exc}"
        ) from None


def refuse(param: str, why: str) -> ApiRequestError:
    """The ``INVALID_REQUEST`` error of a parameter llmrt cannot carry."""
    return ApiRequestError(
        ErrorCode.INVALID_REQUEST, f"`{param}` is not supported: {why}", param=param
    )


def sse(data: bytes, event: str | None = None) -> bytes:
    """One server-sent event: an optional ``event:`` line, one ``data:`` line, a blank line.

    ``data`` is compact JSON (never a newline), so one line holds it.
    """
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def new_id(prefix: str) -> str:
    """A fresh id in the providers' style: ``prefix`` and 32 hex digits.

    128 random bits from `random` (which reseeds in a forked child), not
    `uuid.uuid4`: an id names a response, it guards nothing, and uuid4 costs
    a system call on every request.
    """
    return f"{prefix}{random.getrandbits(128):032x}"


def billed_input(usage: TokenUsage) -> int:
    """All input tokens: llmrt's disjoint uncached, cache-read and cache-write counts summed."""
    return usage.input_tokens + (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
