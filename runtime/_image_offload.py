"""Request-image offloading: which oldest images a route leaves out, decided without I/O.

The decision reads only sizes known before any image is loaded (an
attachment's ``byte_size``, the length of inline base64), so a route can
leave images out without reading them, and a token meter can reproduce the
decision from the same sizes (`offloaded_image_prefix_count`) without
building the request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Literal, overload

import msgspec

from ._attachment import ImageAttachmentAccess
from ._content import (
    ContentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    image_identity,
)
from ._request import GenerateOptions
from ._wire import Wire

__all__ = [
    "ImageOffloadPolicy",
    "base64_length",
    "image_byte_size",
    "request_images",
    "request_image_sizes",
    "offloaded_image_prefix_count",
    "offloaded_image_placeholder",
    "offload_request_images_with_policy",
    "replace_request_images",
]

_Limit = Annotated[int, msgspec.Meta(ge=0)]
_Quantum = Annotated[int, msgspec.Meta(ge=1)]


class ImageOffloadPolicy(Wire, frozen=True):
    """How many image bytes and images one request may carry, and in what steps to cut.

    ``representation``: what a byte limit counts, the ``raw`` image bytes or
    their ``base64`` encoding (4 characters per 3 bytes, padded), as the route's
    wire carries them. ``max_images`` / ``max_bytes``: the limits (None: no
    limit). ``count_quantum`` / ``byte_quantum``: an excess is cut in whole
    steps of this many images / bytes, rounded up, so the cut point moves
    rarely as a conversation grows and the kept request prefix stays stable.
    """

    representation: Literal["raw", "base64"] = "raw"
    max_images: _Limit | None = None
    max_bytes: _Limit | None = None
    count_quantum: _Quantum = 1
    byte_quantum: _Quantum = 1

    def __post_init__(self) -> None:
        # Constructors skip Meta constraints; a zero quantum would never end a cut.
        for name in ("max_images", "max_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be an integer >= 0 or None")
        for name in ("count_quantum", "byte_quantum"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1")


def base64_length(size: int) -> int:
    """The length of ``size`` raw bytes in padded base64."""
    return -(-size // 3) * 4


def image_byte_size(image: ImageBlock) -> int:
    """The raw bytes ``image`` stands for, known without loading it.

    An attachment: its ``byte_size`` (the stored original; a version is never
    larger when the route only scales down). Inline data: the decoded size,
    from the base64 length and padding. A URL: 0 (the provider fetches it;
    it still counts as an image).
    """
    if image.attachment is not None:
        return image.attachment.byte_size
    data = image.data
    if data is None:
        return 0
    padding = 2 if data.endswith("==") else 1 if data.endswith("=") else 0
    return max(0, len(data) * 3 // 4 - padding)


def _walk(blocks: tuple[ContentBlock, ...], out: list[ImageBlock]) -> None:
    for block in blocks:
        if type(block) is ImageBlock:
            out.append(block)
        elif type(block) is ToolResultBlock:
            _walk(block.content, out)


def request_images(messages: Iterable[Message]) -> tuple[ImageBlock, ...]:
    """Every image occurrence, oldest first: message order, block order, tool results inline."""
    out: list[ImageBlock] = []
    for message in messages:
        _walk(message.content, out)
    return tuple(out)


def request_image_sizes(messages: Iterable[Message]) -> tuple[int, ...]:
    """`image_byte_size` of every image occurrence, oldest first (what the decision reads)."""
    return tuple(image_byte_size(image) for image in request_images(messages))


def offloaded_image_prefix_count(sizes: Sequence[int], policy: ImageOffloadPolicy) -> int:
    """How many of the oldest images ``policy`` leaves out of a request with these sizes.

    ``sizes`` are raw byte sizes, oldest first (`request_image_sizes`); the
    policy's representation decides what is counted. Pure and cheap: this is
    the whole decision `offload_request_images_with_policy` applies, so pricing
    can reproduce it from metadata alone.

    Rule: when the images exceed ``max_images`` by E images, or ``max_bytes``
    by B bytes, the cut must remove at least E rounded up to a multiple of
    ``count_quantum`` images and at least B rounded up to a multiple of
    ``byte_quantum`` bytes; the answer is the shortest prefix that does both
    (all of them at most).
    """
    lengths = (
        list(sizes) if policy.representation == "raw" else [base64_length(size) for size in sizes]
    )
    excess_count = 0 if policy.max_images is None else max(0, len(lengths) - policy.max_images)
    excess_bytes = 0 if policy.max_bytes is None else max(0, sum(lengths) - policy.max_bytes)
    if excess_count == 0 and excess_bytes == 0:
        return 0
    need_count = -(-excess_count // policy.count_quantum) * policy.count_quantum
    need_bytes = -(-excess_bytes // policy.byte_quantum) * policy.byte_quantum
    count = 0
    removed = 0
    for length in lengths:
        if count >= need_count and removed >= need_bytes:
            break
        count += 1
        removed += length
    return count


def offloaded_image_placeholder(
    image: ImageBlock, access: ImageAttachmentAccess | None = None
) -> str:
    """The text an offloaded image becomes: what it was and, if given, where a tool can read it.

    Deterministic per image (an attachment by its id and name, inline data by a
    digest, a URL by itself), so the same history always yields the same request.
    """
    identity = image_identity(image)
    where = f"; a read-only copy is at {access.readonly_path!r}" if access is not None else ""
    return f"[image left out to fit the request's image limits: {identity}{where}]"


def _replace(
    blocks: tuple[ContentBlock, ...], replacements: Mapping[int, ContentBlock], seen: list[int]
) -> tuple[ContentBlock, ...] | None:
    out: list[ContentBlock] | None = None
    for i, block in enumerate(blocks):
        new: ContentBlock | None = None
        if type(block) is ImageBlock:
            new = replacements.get(seen[0])
            seen[0] += 1
        elif type(block) is ToolResultBlock:
            nested = _replace(block.content, replacements, seen)
            if nested is not None:
                new = msgspec.structs.replace(block, content=nested)
        if new is not None:
            if out is None:
                out = list(blocks)
            out[i] = new
    return None if out is None else tuple(out)


def replace_request_images(
    messages: tuple[Message, ...], replacements: Mapping[int, ContentBlock]
) -> tuple[Message, ...]:
    """``messages`` with image occurrence ``n`` (as `request_images` numbers them) replaced
    by ``replacements[n]``, for each ``n`` given.

    One walk, which ends after the last message holding a replaced image.
    Nothing is mutated: untouched messages and blocks are the caller's own
    objects, and with no replacements ``messages`` itself is returned.
    """
    if not replacements:
        return messages
    last = max(replacements)
    seen = [0]
    projected = list(messages)
    for i, message in enumerate(messages):
        if seen[0] > last:
            break
        content = _replace(message.content, replacements, seen)
        if content is not None:
            projected[i] = msgspec.structs.replace(message, content=content)
    return tuple(projected)


@overload
def offload_request_images_with_policy(
    request: GenerateOptions,
    policy: ImageOffloadPolicy,
    *,
    placeholder: Callable[[ImageBlock], str] = ...,
) -> GenerateOptions: ...
@overload
def offload_request_images_with_policy(
    request: tuple[Message, ...],
    policy: ImageOffloadPolicy,
    *,
    placeholder: Callable[[ImageBlock], str] = ...,
) -> tuple[Message, ...]: ...
def offload_request_images_with_policy(
    request: GenerateOptions | tuple[Message, ...],
    policy: ImageOffloadPolicy,
    *,
    placeholder: Callable[[ImageBlock], str] = offloaded_image_placeholder,
) -> GenerateOptions | tuple[Message, ...]:
    """``request`` with its oldest images replaced by text, as ``policy`` decides.

    ``request`` is a `GenerateOptions` or a tuple of messages (oldest first);
    the same kind comes back. The first `offloaded_image_prefix_count` image
    occurrences (tool results' nested images included, in order) become a
    `TextBlock` with ``placeholder(image)``. Nothing is read and nothing is
    mutated: untouched messages and blocks are the caller's own objects, and
    when nothing is left out ``request`` itself is returned.
    """
    messages = request.messages if isinstance(request, GenerateOptions) else request
    images = request_images(messages)
    count = offloaded_image_prefix_count([image_byte_size(image) for image in images], policy)
    if count == 0:
        return request
    projected = replace_request_images(
        messages, {n: TextBlock(text=placeholder(images[n])) for n in range(count)}
    )
    if isinstance(request, GenerateOptions):
        return msgspec.structs.replace(request, messages=projected)
    return projected
