"""Shared fixtures of the image tests: a host store and an image-declaring route."""

from __future__ import annotations

import hashlib

import attrs
import trio

from llmrt import ResolvedModelInfo
from llmrt.adapters.scripted import ScriptedAdapter, text_script
from llmrt.images import (
    ImageAttachmentRef,
    ImageAttachments,
    ImageRequestPolicy,
    ImageRequestPricing,
    ImageRequestTarget,
    ImageVersion,
    fit_image_dimensions,
    image_attachment_ref,
)


@attrs.define(eq=False)
class MemoryStore(ImageAttachments):
    """Keeps originals in memory and "renders" versions as tagged copies (no image library).

    A version's bytes say its media type and fitted size, so a test can tell
    which version a route got; its variant id is the sha256 of those bytes.
    """

    originals: dict[str, bytes] = attrs.field(factory=dict)
    host_paths: dict[str, str] = attrs.field(factory=dict)
    reads: list[tuple[str, ImageRequestTarget]] = attrs.field(factory=list)
    delay: float = 0.0

    def put(
        self,
        data: bytes,
        media_type: str = "image/png",
        *,
        width: int | None = None,
        height: int | None = None,
        name: str | None = None,
    ) -> ImageAttachmentRef:
        ref = image_attachment_ref(data, media_type, width=width, height=height, name=name)
        self.originals[ref.attachment_id] = data
        return ref

    async def request_version(
        self, ref: ImageAttachmentRef, target: ImageRequestTarget
    ) -> ImageVersion:
        self.reads.append((ref.attachment_id, target))
        await trio.sleep(self.delay)
        data = self.originals[ref.attachment_id]
        media = ref.media_type
        if target.media_types and media not in target.media_types:
            media = target.media_types[0]
        width, height = ref.width, ref.height
        if width is not None and height is not None:
            width, height = fit_image_dimensions(width, height, target)
        if (width, height, media) == (ref.width, ref.height, ref.media_type):
            body = data
        else:
            body = f"{media} {width}x{height}:".encode() + data
        return ImageVersion(
            variant_id=f"sha256:{hashlib.sha256(body).hexdigest()}",
            media_type=media,
            data=body,
            width=width,
            height=height,
        )

    def host_path(self, ref: ImageAttachmentRef) -> str | None:
        return self.host_paths.get(ref.attachment_id)


@attrs.define(eq=False)
class ImageRoute(ScriptedAdapter):
    """A scripted adapter that declares an image policy and pricing per route."""

    policies: dict[str, ImageRequestPolicy] = attrs.field(factory=dict)
    pricing: dict[str, ImageRequestPricing] = attrs.field(factory=dict)

    def image_request_policy(self, provider: str, model: str) -> ImageRequestPolicy | None:
        return self.policies.get(provider)

    def image_request_pricing(self, provider: str, model: str) -> ImageRequestPricing | None:
        return self.pricing.get(provider)


def image_route(**kw: object) -> ImageRoute:
    """An image-capable route answering "ok"."""
    info = ResolvedModelInfo(provider="p", id="m", name="m", input_modalities=("text", "image"))

    def model_info(provider: str, model: str) -> ResolvedModelInfo:
        return ResolvedModelInfo(
            provider=provider, id=model, name=model, input_modalities=info.input_modalities
        )

    return ImageRoute(text_script(["ok"]), model_info=model_info, **kw)  # type: ignore[arg-type]
