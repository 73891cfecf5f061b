"""Prompt helpers every wire module shares: the one system prompt, image placeholders.

Pure functions over `llmrt.GenerateOptions`: each provider's body builder
(OpenAI chat, Anthropic, Gemini, Responses) imports them from here rather
than from another provider's module.
"""

from __future__ import annotations

from llmrt import GenerateOptions, ImageBlock, TextBlock

__all__ = ["image_placeholder", "system_prompt"]


def image_placeholder(image: ImageBlock) -> str:
    """The text that stands for an image on a route that cannot see images."""
    return f"[image: {image.media_type}]"


def system_prompt(options: GenerateOptions) -> str:
    """The system prompt: ``options.system``, then the text of every system-role message.

    System-role messages inside ``options.messages`` are folded into the one
    system prompt, in order, separated by blank lines (images in them become
    placeholders), so every provider sees a single system slot first.
    """
    parts = [options.system] if options.system else []
    for message in options.messages:
        if message.role != "system":
            continue
        for block in message.content:
            if type(block) is TextBlock:
                if block.text:
                    parts.append(block.text)
            elif type(block) is ImageBlock:
                parts.append(image_placeholder(block))
    return "\n\n".join(parts)
