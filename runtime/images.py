"""Images, behind one entry point: attachments, offloading, projection, pricing, policies.

A message carries an image as an `ImageBlock`: inline base64 ``data``, a
``url``, or a durable `ImageAttachmentRef` whose bytes the host keeps in an
`ImageAttachments` store (`image_attachment_ref` names bytes by content).
Each route says what it takes as an `ImageRequestPolicy`: the version of each
image it wants (`ImageRequestTarget`, served by the store as an
`ImageVersion`) and how many images and bytes one request may carry
(`ImageOffloadPolicy`: the oldest past the limits become placeholders,
decided from sizes alone: `offloaded_image_prefix_count`). Before a call is
sent the runtime projects its images for the serving route
(`project_request_images`; a text-only model gets `image_placeholder`
text instead); `ImageRequestPricing` reproduces the same decision from
metadata to price a request before it is sent. See ``docs/images.md``.
"""

from ._attachment import ImageAttachmentAccess as ImageAttachmentAccess
from ._attachment import ImageAttachmentRef as ImageAttachmentRef
from ._attachment import ImageAttachments as ImageAttachments
from ._attachment import ImageRequestTarget as ImageRequestTarget
from ._attachment import ImageVersion as ImageVersion
from ._attachment import fit_image_dimensions as fit_image_dimensions
from ._attachment import image_attachment_ref as image_attachment_ref
from ._attachment import resolve_image_attachment_access as resolve_image_attachment_access
from ._content import ImageBlock as ImageBlock
from ._content import image_placeholder as image_placeholder
from ._image_offload import ImageOffloadPolicy as ImageOffloadPolicy
from ._image_offload import base64_length as base64_length
from ._image_offload import image_byte_size as image_byte_size
from ._image_offload import offload_request_images_with_policy as offload_request_images_with_policy
from ._image_offload import offloaded_image_placeholder as offloaded_image_placeholder
from ._image_offload import offloaded_image_prefix_count as offloaded_image_prefix_count
from ._image_offload import request_image_sizes as request_image_sizes
from ._image_offload import request_images as request_images
from ._image_route import DEFAULT_IMAGE_PROJECTION_TIMEOUT as DEFAULT_IMAGE_PROJECTION_TIMEOUT
from ._image_route import DEFAULT_MAX_PROJECTED_IMAGE_BYTES as DEFAULT_MAX_PROJECTED_IMAGE_BYTES
from ._image_route import ImageRequestPolicy as ImageRequestPolicy
from ._image_route import ImageRequestPrice as ImageRequestPrice
from ._image_route import ImageRequestPricing as ImageRequestPricing
from ._image_route import project_request_images as project_request_images

__all__ = [
    "DEFAULT_IMAGE_PROJECTION_TIMEOUT",
    "DEFAULT_MAX_PROJECTED_IMAGE_BYTES",
    "ImageAttachmentAccess",
    "ImageAttachmentRef",
    "ImageAttachments",
    "ImageBlock",
    "ImageOffloadPolicy",
    "ImageRequestPolicy",
    "ImageRequestPrice",
    "ImageRequestPricing",
    "ImageRequestTarget",
    "ImageVersion",
    "base64_length",
    "fit_image_dimensions",
    "image_attachment_ref",
    "image_byte_size",
    "image_placeholder",
    "offload_request_images_with_policy",
    "offloaded_image_placeholder",
    "offloaded_image_prefix_count",
    "project_request_images",
    "request_image_sizes",
    "request_images",
    "resolve_image_attachment_access",
]
