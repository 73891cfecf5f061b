"""Model tables and model-list fetching, shared by the HTTP adapters.

* `ModelSpec` (defined in `llmrt.adapters.plugin`, the I/O-free module both
  sides import): what an adapter knows about one model (a preset's table row).
* `ModelEntry`: one model as a provider's list endpoint names it.
* `fetch_models`: ``GET`` a provider's model list and turn it into
  `ModelInfo`s, enriched from the adapter's table, falling back to the
  table when the endpoint has no model list. Each adapter supplies only the
  decoding of its list's JSON (`decode_data_list` reads the
  ``{"data": [{"id": ...}]}`` form of OpenAI, compatible servers and
  Anthropic; `decode_ollama_tags` reads Ollama's native ``/api/tags``).
* `fetch_entries`: the same bounded ``GET`` returning the raw entries, for
  model discovery (no table, no fallback: what the endpoint says or an error).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import aclosing

import httpx
import msgspec

from llmrt import ErrorCode, LlmError, ModelInfo
from llmrt.adapter import ModelModality

from ._classify import classify_http_error
from ._exchange import Upstream
from ._http import body_reads, translate_http_error
from .plugin import ModelSpec

__all__ = [
    "ModelEntry",
    "ModelSpec",
    "decode_data_list",
    "decode_ollama_tags",
    "fetch_entries",
    "fetch_models",
    "model_infos",
]


class ModelEntry(msgspec.Struct, frozen=True):
    """One model of a provider's list: its id and, if the list gives one, its display name.

    ``display_name`` is Anthropic's field, ``name`` OpenRouter's; either names the model.
    """

    id: str
    display_name: str | None = None
    name: str | None = None


class _DataList(msgspec.Struct):
    data: list[ModelEntry]


_data_list = msgspec.json.Decoder(_DataList)


def decode_data_list(body: bytes) -> Sequence[ModelEntry]:
    """Read ``{"data": [{"id": ..., "display_name"?: ..., "name"?: ...}, ...]}``.

    Raises `msgspec.DecodeError` for anything else.
    """
    return _data_list.decode(body).data


class _OllamaTag(msgspec.Struct):
    # ``model`` is the id the chat endpoints take; older servers send only ``name``.
    name: str | None = None
    model: str | None = None


class _OllamaTags(msgspec.Struct):
    models: list[_OllamaTag]


_ollama_tags = msgspec.json.Decoder(_OllamaTags)


def decode_ollama_tags(body: bytes) -> Sequence[ModelEntry]:
    """Read Ollama's ``GET /api/tags``: ``{"models": [{"name": ..., "model": ...}, ...]}``.

    The id is ``model`` (else ``name``), the name ``name``. Raises
    `msgspec.DecodeError` for anything else, or for an entry with neither.
    """
    entries = []
    for tag in _ollama_tags.decode(body).models:
        id = tag.model or tag.name
        if not id:
            raise msgspec.DecodeError("an /api/tags entry has neither `model` nor `name`")
        entries.append(ModelEntry(id=id, name=tag.name))
    return entries


#: The largest model list read, in bytes (the longest known lists are a few hundred KiB).
MAX_MODEL_LIST = 8 * 1024 * 1024
#: Statuses that say "this endpoint has no model list" rather than "this request failed".
_NO_LIST = frozenset({404, 405, 501})


def model_infos(
    provider: str,
    entries: Sequence[ModelEntry],
    table: Mapping[str, ModelSpec],
    *,
    default_modalities: tuple[ModelModality, ...] | None = None,
) -> tuple[ModelInfo, ...]:
    """`ModelInfo`s for ``entries``, in order.

    The name is the list's display name, else the table's, else the id; the
    modalities are the table's, or ``default_modalities`` (None: unknown) for
    a model the table does not know.
    """
    out: list[ModelInfo] = []
    for entry in entries:
        spec = table.get(entry.id)
        if spec is not None:
            name = entry.display_name or entry.name or spec.name or entry.id
            modalities: tuple[ModelModality, ...] | None = (
                ("text", "image") if spec.image_input else ("text",)
            )
        else:
            name, modalities = entry.display_name or entry.name or entry.id, default_modalities
        out.append(
            ModelInfo(
                provider=provider,
                id=entry.id,
                name=name,
                input_modalities=modalities,
            )
        )
    return tuple(out)


async def _get_list(
    client: Upstream,
    path: str,
    headers: Mapping[str, str],
    params: Mapping[str, str] | None,
) -> tuple[int, httpx.Headers, bytes]:
    """``GET path``: its status, headers and body (cut after `MAX_MODEL_LIST` + 1 bytes)."""
    if params:
        path = f"{path}?{httpx.QueryParams(params)}"
    try:
        request = client.request(b"GET", path, dict(headers), 0)
        async with client.transport.exchange(request, b"") as response:
            status, response_headers = response.status, httpx.Headers(list(response.headers))
            body = bytearray()
            # Inflated a bounded step at a time (`body_reads`), so a compressed bomb stops here.
            async with aclosing(body_reads(response)) as reads:
                async for piece in reads:
                    body += piece
                    if len(body) > MAX_MODEL_LIST:
                        break
    except httpx.HTTPError as exc:
        raise translate_http_error(exc) from None
    return status, response_headers, bytes(body)


def _entries(
    status: int,
    response_headers: httpx.Headers,
    body: bytes,
    *,
    provider_kind: str,
    decode: Callable[[bytes], Sequence[ModelEntry]],
) -> Sequence[ModelEntry]:
    if status >= 300:
        raise LlmError.from_failure(
            classify_http_error(provider_kind, status, response_headers, body[:65536])
        )
    if len(body) > MAX_MODEL_LIST:
        raise LlmError(ErrorCode.PROTOCOL, f"the model list is larger than {MAX_MODEL_LIST} bytes")
    try:
        return decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise LlmError(ErrorCode.PROTOCOL, f"unreadable model list: {exc}") from None


async def fetch_entries(
    client: Upstream,
    path: str,
    *,
    provider_kind: str,
    headers: Mapping[str, str],
    decode: Callable[[bytes], Sequence[ModelEntry]] = decode_data_list,
) -> Sequence[ModelEntry]:
    """``GET path`` and return the entries ``decode`` reads from it.

    Raises `LlmError` as `fetch_models` does, but every error status is an
    error here (discovery reports what the endpoint serves, never a table).
    A checkpoint.
    """
    status, response_headers, body = await _get_list(client, path, headers, None)
    return _entries(status, response_headers, body, provider_kind=provider_kind, decode=decode)


async def fetch_models(
    client: Upstream,
    path: str,
    *,
    provider: str,
    provider_kind: str,
    headers: Mapping[str, str],
    table: Mapping[str, ModelSpec],
    decode: Callable[[bytes], Sequence[ModelEntry]] = decode_data_list,
    params: Mapping[str, str] | None = None,
    default_modalities: tuple[ModelModality, ...] | None = None,
) -> tuple[ModelInfo, ...]:
    """``GET path`` and return the listed models (see `model_infos`).

    When the endpoint has no model list (404, 405 or 501) and ``table`` is
    not empty, the table's models are returned instead. Raises `LlmError`:
    the classified failure of any other error status, ``PROTOCOL`` for a
    list ``decode`` cannot read or one above `MAX_MODEL_LIST` bytes, or a
    translated transport error. A checkpoint.
    """
    status, response_headers, body = await _get_list(client, path, headers, params)
    entries: Sequence[ModelEntry]
    if status in _NO_LIST and table:
        entries = [ModelEntry(id=model) for model in table]
    else:
        entries = _entries(
            status, response_headers, body, provider_kind=provider_kind, decode=decode
        )
    return model_infos(provider, entries, table, default_modalities=default_modalities)
