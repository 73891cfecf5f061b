"""A route's image handling: its request policy, the projection it implies, its pricing.

An image-capable route declares an `ImageRequestPolicy` (what version of each
image it wants, and what it leaves out when a request carries too many) and,
when it charges visual tokens, an `ImageRequestPricing` that reproduces the
same decision from metadata. `project_request_images` is the projection: it
offloads, then asks the host's store for each kept attachment's version.
`project_images` is the call path's one image step: it reads the request's
images once and rewrites the request at most once, whatever the route is
(text-only, image-capable with or without a policy).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from typing import Annotated

import attrs
import msgspec
import trio

from ._attachment import (
    ImageAttachmentRef,
    ImageAttachments,
    ImageRequestTarget,
    ImageVersion,
    fit_image_dimensions,
)
from ._content import ContentBlock, ImageBlock, Message, TextBlock, image_placeholder
from ._errors import ErrorCode, LlmError
from ._image_offload import (
    ImageOffloadPolicy,
    image_byte_size,
    offloaded_image_placeholder,
    offloaded_image_prefix_count,
    replace_request_images,
    request_images,
)
from ._request import GenerateOptions, ModelModality
from ._wire import Wire

__all__ = [
    "ImageRequestPolicy",
    "ImageRequestPricing",
    "ImageRequestPrice",
    "project_request_images",
    "project_images",
    "route_image_policy",
    "DEFAULT_IMAGE_PROJECTION_TIMEOUT",
    "DEFAULT_MAX_PROJECTED_IMAGE_BYTES",
]

_Count = Annotated[int, msgspec.Meta(ge=0)]

#: How long the store may take, all images of one request together (seconds).
DEFAULT_IMAGE_PROJECTION_TIMEOUT = 30.0
#: The most raw image bytes one request may load from the store.
DEFAULT_MAX_PROJECTED_IMAGE_BYTES = 64 * 1024 * 1024


class ImageRequestPolicy(Wire, frozen=True):
    """One route's image handling: the version it wants and what it leaves out.

    ``target``: what each request version must fit (`ImageRequestTarget`).
    ``offload``: the request limits (`ImageOffloadPolicy`); None: no limit.
    """

    target: ImageRequestTarget = ImageRequestTarget()
    offload: ImageOffloadPolicy | None = None


class ImageRequestPrice(Wire, frozen=True):
    """What the images of one request cost on a route, before it is sent."""

    images: _Count
    offloaded: _Count
    tokens: _Count


class ImageRequestPricing(Wire, frozen=True):
    """How a route charges the images of a request, in input tokens.

    A kept image of (fitted) ``w`` x ``h`` pixels costs ``tokens_per_image`` +
    ``tokens_per_tile`` x ceil(w / ``tile_size``) x ceil(h / ``tile_size``);
    one whose size is unknown (a URL, inline data, an attachment without
    dimensions) costs ``tokens_per_image`` + ``unknown_size_tokens``. Offloaded
    images cost nothing. ``policy`` is the route's `ImageRequestPolicy`: the
    runtime fills it in when it resolves the pricing
    (`LlmRuntime.image_request_pricing`), so the price always reproduces what
    the route will send.
    """

    tokens_per_image: _Count = 0
    tile_size: Annotated[int, msgspec.Meta(ge=1)] | None = None
    tokens_per_tile: _Count = 0
    unknown_size_tokens: _Count = 0
    policy: ImageRequestPolicy = ImageRequestPolicy()

    def image_tokens(self, image: ImageBlock) -> int:
        """The tokens one kept image costs (see the class docstring)."""
        ref = image.attachment
        if ref is None or ref.width is None or ref.height is None:
            return self.tokens_per_image + self.unknown_size_tokens
        if self.tile_size is None:
            return self.tokens_per_image
        width, height = fit_image_dimensions(ref.width, ref.height, self.policy.target)
        tiles = math.ceil(width / self.tile_size) * math.ceil(height / self.tile_size)
        return self.tokens_per_image + self.tokens_per_tile * tiles

    def price(self, request: GenerateOptions | Iterable[Message]) -> ImageRequestPrice:
        """The image cost of ``request`` (a request or its messages), without loading an image.

        The offloaded prefix is `offloaded_image_prefix_count` over the same
        sizes the projection reads, so it is the route's own decision.
        """
        messages = request.messages if isinstance(request, GenerateOptions) else request
        images = request_images(messages)
        offload = self.policy.offload
        cut = (
            0
            if offload is None
            else offloaded_image_prefix_count([image_byte_size(image) for image in images], offload)
        )
        tokens = sum(self.image_tokens(image) for image in images[cut:])
        return ImageRequestPrice(images=len(images), offloaded=cut, tokens=tokens)


def _check_version(
    ref: ImageAttachmentRef, target: ImageRequestTarget, version: object
) -> ImageVersion:
    def bad(what: str) -> LlmError:
        return LlmError(
            ErrorCode.INVALID_REQUEST,
            f"the image store's version of attachment {ref.attachment_id} {what}",
        )

    if not isinstance(version, ImageVersion) or not isinstance(version.data, bytes):
        raise bad(f"is a {type(version).__name__}, not an ImageVersion with bytes")
    if not version.variant_id:
        raise bad("has no variant_id")
    if target.max_bytes is not None and len(version.data) > target.max_bytes:
        raise bad(f"has {len(version.data)} bytes; the route takes at most {target.max_bytes}")
    if target.media_types and version.media_type not in target.media_types:
        raise bad(f"is {version.media_type}; the route takes {', '.join(target.media_types)}")
    if (target.max_width is not None and (version.width or 0) > target.max_width) or (
        target.max_height is not None and (version.height or 0) > target.max_height
    ):
        raise bad(f"is {version.width}x{version.height}px, larger than the route takes")
    return version


@attrs.define(eq=False)
class _Loader:
    """Loads each attachment of one request once, within the request's byte bound."""

    store: ImageAttachments
    target: ImageRequestTarget
    budget: int
    _blocks: dict[str, ImageBlock] = attrs.field(factory=dict, init=False)

    async def version_block(self, ref: ImageAttachmentRef) -> ImageBlock:
        known = self._blocks.get(ref.attachment_id)
        if known is not None and known.attachment == ref:
            return known
        try:
            version = await self.store.request_version(ref, self.target)
        except LlmError:
            raise
        except Exception as exc:
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                f"the image store could not provide attachment {ref.attachment_id} "
                f"({type(exc).__name__})",
            ) from exc
        version = _check_version(ref, self.target, version)
        self.budget -= len(version.data)
        if self.budget < 0:
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                "the request's images exceed the projection's byte bound; declare an "
                "offload policy for the route or send fewer images",
            )
        block = ImageBlock(
            media_type=version.media_type,
            data=base64.b64encode(version.data).decode("ascii"),
            attachment=ref,
            variant_id=version.variant_id,
        )
        self._blocks[ref.attachment_id] = block
        return block


async def project_request_images(
    options: GenerateOptions,
    policy: ImageRequestPolicy | None,
    store: ImageAttachments | None,
    *,
    time_bound: float = DEFAULT_IMAGE_PROJECTION_TIMEOUT,
    max_total_bytes: int = DEFAULT_MAX_PROJECTED_IMAGE_BYTES,
) -> GenerateOptions:
    """``options`` as an image-capable route sends it: offloaded, then projected.

    First the policy's offload (oldest images become placeholders, nothing
    read); then each remaining durable image becomes its route version: the
    store's `ImageVersion` for the policy's target, inline as base64 ``data``
    beside the same ``attachment``, named by ``variant_id``. Images already
    inline, by URL or already projected pass through. Returns a new request;
    the caller's messages are never changed (``options`` itself when there is
    nothing to do).

    Raises `LlmError`: ``INVALID_REQUEST`` when a durable image needs a store
    and there is none, the store fails or returns a version the target does
    not allow, or the versions exceed ``max_total_bytes``; ``TIMEOUT`` when the
    store takes longer than ``time_bound`` seconds for the whole request. A
    checkpoint only when it loads something.
    """
    return await _project(
        options, request_images(options.messages), policy, store, time_bound, max_total_bytes
    )


async def _project(
    options: GenerateOptions,
    images: tuple[ImageBlock, ...],
    policy: ImageRequestPolicy | None,
    store: ImageAttachments | None,
    time_bound: float = DEFAULT_IMAGE_PROJECTION_TIMEOUT,
    max_total_bytes: int = DEFAULT_MAX_PROJECTED_IMAGE_BYTES,
) -> GenerateOptions:
    """`project_request_images` over the request's images, already read (`request_images`)."""
    offload = None if policy is None else policy.offload
    cut = (
        0
        if offload is None or not images
        else offloaded_image_prefix_count([image_byte_size(image) for image in images], offload)
    )
    replacements: dict[int, ContentBlock] = {
        n: TextBlock(text=offloaded_image_placeholder(images[n])) for n in range(cut)
    }
    pending = [
        n
        for n in range(cut, len(images))
        if images[n].attachment is not None and images[n].variant_id is None
    ]
    if pending:
        if store is None:
            raise LlmError(
                ErrorCode.INVALID_REQUEST,
                "the request has durable image attachments but the runtime has no image "
                "store (open_runtime(image_attachments=...))",
            )
        target = policy.target if policy is not None else ImageRequestTarget()
        load = _Loader(store, target, max_total_bytes)
        with trio.move_on_after(time_bound) as scope:
            for n in pending:
                ref = images[n].attachment
                assert ref is not None
                replacements[n] = await load.version_block(ref)
        if scope.cancelled_caught:
            raise LlmError(
                ErrorCode.TIMEOUT,
                f"the image store took longer than {time_bound} s for this request",
            )
    if not replacements:
        return options
    return msgspec.structs.replace(
        options, messages=replace_request_images(options.messages, replacements)
    )


def _invalid_policy(provider: str, what: str) -> LlmError:
    return LlmError(ErrorCode.INVALID_MODEL_INFO, f"provider {provider!r}: {what}")


def route_image_policy(adapter: object, provider: str, model: str) -> ImageRequestPolicy | None:
    """The adapter's image policy for one route, checked (bad: ``INVALID_MODEL_INFO``)."""
    # getattr: an adapter need not subclass Adapter to be registered.
    declare = getattr(adapter, "image_request_policy", None)
    policy = None if declare is None else declare(provider, model)
    if policy is not None and not isinstance(policy, ImageRequestPolicy):
        raise _invalid_policy(
            provider, f"image_request_policy() returned {type(policy).__name__}, not a policy"
        )
    return policy


async def project_images(
    options: GenerateOptions,
    modalities: tuple[ModelModality, ...] | None,
    adapter: object,
    store: ImageAttachments | None,
) -> GenerateOptions:
    """``options`` with every image as the route served by ``adapter`` takes it.

    The call path's one image step, run once per call after the adapter is
    chosen: it reads the request's images once (`request_images`) and
    rewrites the request at most once; the caller's messages stay as they
    are, and a request without images is returned as it is without asking
    the adapter anything. A model known to take no images (``modalities``
    without ``"image"``; None: unknown) gets every image, tool results'
    included, as a `TextBlock` with its `image_placeholder`. Otherwise the
    route's `image_request_policy` is applied as `project_request_images`
    does: oldest images past its limits become placeholders and durable
    attachments become the route's versions from ``store``. Raises what
    those raise (`LlmError`; an adapter's own exception from its policy).
    """
    images = request_images(options.messages)
    if not images:
        return options
    if modalities is not None and "image" not in modalities:
        placeholders: dict[int, ContentBlock] = {
            n: TextBlock(text=image_placeholder(image)) for n, image in enumerate(images)
        }
        return msgspec.structs.replace(
            options, messages=replace_request_images(options.messages, placeholders)
        )
    policy = route_image_policy(adapter, options.provider, options.model)
    return await _project(options, images, policy, store)
