"""Content blocks, message sources and messages."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from ._attachment import ImageAttachmentRef
from ._freeze import deep_freeze
from ._wire import Wire

__all__ = [
    "TextBlock",
    "ReasoningBlock",
    "ImageBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "ContentBlock",
    "ContentBlockType",
    "CONTENT_BLOCK_TYPES",
    "ContextSnapshotSection",
    "UserSource",
    "PluginSource",
    "ModelSource",
    "ToolSource",
    "MessageSource",
    "ReplayEnvelope",
    "Message",
    "Role",
    "image_identity",
    "image_placeholder",
    "new_message_id",
    "user_message",
    "system_message",
    "tool_result_message",
]


class TextBlock(Wire, frozen=True, tag_field="type", tag="text"):
    """Visible model or user text."""

    text: str


class ReasoningBlock(Wire, frozen=True, tag_field="type", tag="reasoning"):
    """Model thinking, kept apart from visible text."""

    text: str


class ImageBlock(Wire, frozen=True, tag_field="type", tag="image"):
    """An image: inline (base64 ``data``), by ``url``, or a durable ``attachment``.

    Exactly one of ``data``, ``url`` and ``attachment`` says where the image
    is, with one exception: a *request version* projected from an attachment
    keeps its ``attachment`` beside the ``data`` (or ``url``) the route gets,
    and names that version with ``variant_id`` (wire ``variantId``). A durable
    block may omit ``media_type``: it is the attachment's. See docs/images.md.
    """

    media_type: str = ""
    data: str | None = None
    url: str | None = None
    attachment: ImageAttachmentRef | None = None
    variant_id: str | None = None

    def __post_init__(self) -> None:
        payloads = (self.data is not None) + (self.url is not None)
        if self.attachment is None:
            if payloads != 1:
                raise ValueError(
                    "an image block needs exactly one of `data`, `url` and `attachment`"
                )
            if self.variant_id is not None:
                raise ValueError("`variantId` names a version of an attachment; there is none")
        elif payloads == 0:
            if self.variant_id is not None:
                raise ValueError("a durable image has no version yet: drop `variantId`")
            if not self.media_type:
                msgspec.structs.force_setattr(self, "media_type", self.attachment.media_type)
            elif self.media_type != self.attachment.media_type:
                raise ValueError("a durable image's media type is its attachment's")
        elif payloads == 2 or self.variant_id is None:
            raise ValueError(
                "an image block needs exactly one of `data`, `url` and `attachment` "
                "(a request version carries one payload, its attachment and `variantId`)"
            )
        if not self.media_type:
            raise ValueError("an image block needs a media type")


def image_identity(image: ImageBlock) -> str:
    """What tells one image from another in model-facing text, deterministically.

    An attachment: its media type, id and name (the same stored image has one
    identity whatever version a route would get). Otherwise: the media type and
    a digest of the data or URL.
    """
    ref = image.attachment
    if ref is not None:
        named = f", {ref.name!r}" if ref.name is not None else ""
        return f"{ref.media_type}, {ref.attachment_id}{named}"
    source = image.data if image.data is not None else image.url or ""
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{image.media_type}, sha256 {digest}"


def image_placeholder(image: ImageBlock) -> str:
    """The text that stands for `image` where the image itself cannot go: on a route
    that takes no images, or in a tool result whose images travel apart.

    Deterministic and distinct per image (`image_identity`), so the same
    history always projects to the same request and a model can still tell
    two images apart.
    """
    return f"[image: {image_identity(image)}]"


class ToolCallBlock(Wire, frozen=True, tag_field="type", tag="tool-call"):
    """A tool call; ``arguments`` is the raw JSON text the model produced, never parsed."""

    id: str
    name: str
    arguments: str


class ToolResultBlock(Wire, frozen=True, tag_field="type", tag="tool-result"):
    """The result of one tool call, with nested content."""

    tool_call_id: str
    content: tuple[ContentBlock, ...]
    is_error: bool = False


ContentBlock = TextBlock | ReasoningBlock | ImageBlock | ToolCallBlock | ToolResultBlock
ContentBlockType = Literal["text", "reasoning", "image", "tool-call", "tool-result"]
CONTENT_BLOCK_TYPES: frozenset[str] = frozenset(
    {"text", "reasoning", "image", "tool-call", "tool-result"}
)


class ReplayEnvelope(Wire, frozen=True):
    """Adapter-private replay state of a successful response.

    ``response`` is response-level metadata; ``blocks``, when present, has one
    entry per emitted block in first-seen order. Both halves are opaque to
    everything but the adapter that produced them.
    """

    response: Any = None
    blocks: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        # Deep-frozen (dicts and lists become read-only), so no reader can
        # change what another will replay.
        if self.response is not None:
            msgspec.structs.force_setattr(self, "response", deep_freeze(self.response))
        if self.blocks is not None:
            msgspec.structs.force_setattr(self, "blocks", deep_freeze(tuple(self.blocks)))


class ContextSnapshotSection(Wire, frozen=True):
    """One named contribution to a ``snapshot``-form context."""

    name: str
    text: str


class UserSource(Wire, frozen=True, tag_field="kind", tag="user"):
    """Typed by a person."""


class PluginSource(Wire, frozen=True, tag_field="kind", tag="plugin"):
    """Produced by a plugin. ``form`` says what kind of information it is.

    Known forms: ``instructions``, ``catalog``, ``snapshot`` (needs
    ``sections``), ``notice`` (needs ``summary``), ``relay``, ``recall``. An
    absent or unknown form is opaque content.
    """

    plugin: str
    form: str | None = None
    sections: tuple[ContextSnapshotSection, ...] | None = None
    summary: str | None = None

    def __post_init__(self) -> None:
        if self.form == "snapshot":
            if self.sections is None:
                raise ValueError("a `snapshot` form needs `sections`")
        elif self.sections is not None:
            raise ValueError("`sections` belongs only to the `snapshot` form")
        if self.form == "notice":
            if self.summary is None:
                raise ValueError("a `notice` form needs `summary`")
        elif self.summary is not None:
            raise ValueError("`summary` belongs only to the `notice` form")


class ModelSource(Wire, frozen=True, tag_field="kind", tag="model"):
    """Produced by a model: which provider route and model, and its replay state."""

    provider: str
    model: str
    replay_state: ReplayEnvelope | None = None


class ToolSource(Wire, frozen=True, tag_field="kind", tag="tool"):
    """Produced by running a tool."""

    tool: str | None = None


MessageSource = UserSource | PluginSource | ModelSource | ToolSource
Role = Literal["system", "user", "assistant"]


class Message(Wire, frozen=True):
    """One immutable message: identity, role, content and where it came from."""

    id: str
    role: Role
    content: tuple[ContentBlock, ...]
    source: MessageSource


def new_message_id() -> str:
    """A fresh, unique message id (``msg_`` and 32 hex digits)."""
    return f"msg_{uuid.uuid4().hex}"


def _blocks(content: str | ContentBlock | Iterable[ContentBlock]) -> tuple[ContentBlock, ...]:
    if isinstance(content, str):
        return (TextBlock(text=content),)
    if isinstance(content, msgspec.Struct):
        return (content,)
    return tuple(content)


def user_message(
    content: str | ContentBlock | Iterable[ContentBlock],
    *,
    id: str | None = None,
    source: MessageSource | None = None,
) -> Message:
    """A user message from text or blocks."""
    return Message(
        id=id or new_message_id(),
        role="user",
        content=_blocks(content),
        source=source or UserSource(),
    )


def system_message(
    content: str | ContentBlock | Iterable[ContentBlock],
    *,
    plugin: str = "llmrt",
    id: str | None = None,
) -> Message:
    """A system-role message attributed to a plugin."""
    return Message(
        id=id or new_message_id(),
        role="system",
        content=_blocks(content),
        source=PluginSource(plugin=plugin),
    )


def tool_result_message(
    tool_call_id: str,
    content: str | ContentBlock | Iterable[ContentBlock],
    *,
    is_error: bool = False,
    tool: str | None = None,
    id: str | None = None,
) -> Message:
    """A user-role message carrying one tool result."""
    block = ToolResultBlock(tool_call_id=tool_call_id, content=_blocks(content), is_error=is_error)
    return Message(
        id=id or new_message_id(), role="user", content=(block,), source=ToolSource(tool=tool)
    )
