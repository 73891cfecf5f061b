"""Extension kinds the vocabulary tests register, once per test process.

Registration is process-wide, so every test module that needs these kinds
imports them from here (a second class with the same tag would be refused).
"""

from __future__ import annotations

import llmrt
from llmrt import ContentBlock
from llmrt.vocabulary import Wire


@llmrt.vocabulary.register_content_block
class AudioBlock(Wire, frozen=True, tag_field="type", tag="audio"):
    """A plugin's audio clip: base64 data and its media type."""

    media_type: str
    data: str
    transcript: str | None = None


@llmrt.vocabulary.register_content_block
class QuoteBlock(Wire, frozen=True, tag_field="type", tag="quote"):
    """An extension block that itself nests content (exercises the recursive unions)."""

    author: str
    content: tuple[ContentBlock, ...]


@llmrt.vocabulary.register_message_source
class AgentSource(Wire, frozen=True, tag_field="kind", tag="agent"):
    """A message produced by another agent."""

    agent: str


@llmrt.vocabulary.register_finish_reason
class FinishContentFilter(Wire, frozen=True, tag_field="kind", tag="content-filter"):
    """A provider-specific reason: the provider's filter stopped the answer."""

    category: str | None = None


AUDIO = AudioBlock(media_type="audio/wav", data="UklGRiQAAABXQVZF", transcript="hi")
