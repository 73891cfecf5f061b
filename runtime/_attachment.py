"""Durable image attachments: the reference a message keeps, the host's store, route targets.

A message never carries a stored image's bytes: it carries an
`ImageAttachmentRef` (a content address plus the metadata every pure decision
needs: media type, byte size, dimensions). The host owns the bytes behind an
`ImageAttachments` store. A route states what it accepts as an
`ImageRequestTarget`; just before dispatch the runtime asks the store for the
version of each referenced image that fits that target (an `ImageVersion`,
named by its ``variant_id``) and sends that, so the caller's history keeps
the durable reference and never changes.
"""

from __future__ import annotations

import abc
import hashlib
import math
import re
from collections.abc import Callable
from typing import Annotated, Protocol

import msgspec

from ._wire import Wire

__all__ = [
    "ImageAttachmentRef",
    "ImageRequestTarget",
    "ImageVersion",
    "ImageAttachments",
    "ImageAttachmentAccess",
    "image_attachment_ref",
    "fit_image_dimensions",
    "resolve_image_attachment_access",
]

_Size = Annotated[int, msgspec.Meta(ge=0)]
_Pixels = Annotated[int, msgspec.Meta(ge=1)]
#: Printable and path-free, so an id can appear in placeholders and logs as it is.
_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"
AttachmentId = Annotated[str, msgspec.Meta(pattern=_ID_PATTERN)]
_ID = re.compile(_ID_PATTERN)


class ImageAttachmentRef(Wire, frozen=True):
    """A durable reference to one stored image (wire: ``attachmentId``, ``byteSize``, ...).

    ``attachment_id`` is the host's stable id (`image_attachment_ref` makes a
    content address, ``sha256:<hex>``); ``byte_size`` is the stored original's
    size in bytes; ``width``/``height`` are its pixels when known; ``name`` is a
    display name (a file name), never used to find the bytes.
    """

    attachment_id: AttachmentId
    media_type: str
    byte_size: _Size
    width: _Pixels | None = None
    height: _Pixels | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        # The constructor skips Meta constraints (decode checks them); a
        # reference that lies about its size would break every offload decision.
        if not isinstance(self.byte_size, int) or self.byte_size < 0:
            raise ValueError("an image attachment's byte_size must be an integer >= 0")
        for side in (self.width, self.height):
            if side is not None and (not isinstance(side, int) or side < 1):
                raise ValueError("an image attachment's width and height must be integers >= 1")
        if not self.attachment_id or not self.media_type:
            raise ValueError("an image attachment needs an attachment_id and a media_type")
        if not isinstance(self.attachment_id, str) or not _ID.match(self.attachment_id):
            # The decoder checks the pattern; a constructed reference must keep it too,
            # so a request refused through the gateway is refused in-process alike.
            raise ValueError(
                "an image attachment_id is 1-200 letters, digits and '._:-', "
                "starting with a letter or digit"
            )


def image_attachment_ref(
    data: bytes,
    media_type: str,
    *,
    width: int | None = None,
    height: int | None = None,
    name: str | None = None,
) -> ImageAttachmentRef:
    """The reference a host stores ``data`` under: id ``sha256:<hex of data>``, its size.

    Content addressing makes the id stable across processes and hosts, so the
    same image always projects to the same request. The caller says the media
    type and, when it knows them, the pixel dimensions (llmrt decodes no image).
    """
    digest = hashlib.sha256(data).hexdigest()
    return ImageAttachmentRef(
        attachment_id=f"sha256:{digest}",
        media_type=media_type,
        byte_size=len(data),
        width=width,
        height=height,
        name=name,
    )


class ImageRequestTarget(Wire, frozen=True):
    """What one route accepts for each request image.

    ``max_width``/``max_height``: the largest version, in pixels (the store
    scales down by `fit_image_dimensions`, never up); ``max_bytes``: the largest
    version in raw bytes; ``media_types``: the encodings the route takes (empty:
    any). The empty target asks for the stored original.
    """

    max_width: _Pixels | None = None
    max_height: _Pixels | None = None
    max_bytes: Annotated[int, msgspec.Meta(ge=1)] | None = None
    media_types: tuple[str, ...] = ()


def fit_image_dimensions(width: int, height: int, target: ImageRequestTarget) -> tuple[int, int]:
    """``width`` x ``height`` scaled down, aspect kept, to fit ``target``'s maxima.

    One scale factor for both sides (the smaller of the two limits' ratios, never
    above 1); each side is rounded down and kept at least 1 pixel. Stores size
    their versions with this function and pricing predicts with it, so the two
    agree without reading a byte.
    """
    scale = 1.0
    if target.max_width is not None:
        scale = min(scale, target.max_width / width)
    if target.max_height is not None:
        scale = min(scale, target.max_height / height)
    if scale >= 1.0:
        return width, height
    return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))


class ImageVersion(Wire, frozen=True):
    """One route-specific version of a stored image, as a store returns it.

    ``variant_id`` names this exact version (a content address of ``data`` is
    the natural choice): equal ids must mean equal bytes, so a request built
    from it is reproducible and cacheable.
    """

    variant_id: str
    media_type: str
    data: bytes
    width: int | None = None
    height: int | None = None


class ImageAttachmentAccess(Wire, frozen=True):
    """Where a tool can read an attachment in the current tool-execution world."""

    readonly_path: str


class ImageAttachments(abc.ABC):
    """The host's image store: what turns a durable reference into request bytes.

    The runtime calls `request_version` from the call that needs the image,
    inside that call's cancel scope and under the projection time bound, so an
    implementation may do I/O (trio-compatible) and must be cancellable.
    """

    @abc.abstractmethod
    async def request_version(
        self, ref: ImageAttachmentRef, target: ImageRequestTarget
    ) -> ImageVersion:
        """The version of ``ref`` that fits ``target`` (make or fetch it).

        Raise `LlmError` for a reference the store does not hold (any other
        exception is reported as ``INVALID_REQUEST`` by the runtime).
        """

    def host_path(self, ref: ImageAttachmentRef) -> str | None:
        """A host filesystem path holding ``ref``'s bytes, when the store keeps one.

        Optional (default: None). Cheap and without I/O: it is called while a
        request or a tool result is being built.
        """
        return None


class _Attached(Protocol):
    """What `resolve_image_attachment_access` reads of an `ImageBlock`.

    A protocol rather than the class: ``_content`` (which defines `ImageBlock`)
    imports this module, so naming the class here would close an import cycle.
    """

    @property
    def attachment(self) -> ImageAttachmentRef | None: ...


def resolve_image_attachment_access(
    attachments: ImageAttachments,
    image: ImageAttachmentRef | _Attached,
    to_world: Callable[[str], str | None],
) -> ImageAttachmentAccess | None:
    """Where the current tool-execution world can read ``image``'s attachment, if anywhere.

    ``image`` is an `ImageAttachmentRef` or an `ImageBlock` (durable or already
    projected: the answer depends on the attachment only, never on the
    request version). ``to_world`` maps a host path into the world the tools
    run in (a sandbox mount, a container path) and returns None where the
    world cannot see it. Returns None when the image has no attachment, the
    store keeps no host path, or the world cannot reach it. Reads nothing and
    changes nothing: the request image and its ``variant_id`` stay as they are.
    """
    ref = image if isinstance(image, ImageAttachmentRef) else image.attachment
    if ref is None:
        return None
    host = attachments.host_path(ref)
    if host is None:
        return None
    path = to_world(host)
    return None if path is None else ImageAttachmentAccess(readonly_path=path)
