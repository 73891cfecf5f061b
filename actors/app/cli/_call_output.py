"""What ``llmrt call`` writes, and where: a command a pipeline can use.

The answer's text, alone, goes to stdout (ending with a newline), so
``llmrt call hi | wc -l`` counts the answer's lines. Everything about the
answer goes to stderr: reasoning (``thinking: ...``, dimmed), tool calls,
retries, the usage and timing line, the finish, Ctrl-C notices. With
``--json`` stdout is instead every event as one JSON object per line
(NDJSON, the wire form of ``llmrt.encode``), and stderr carries only what no
event says (a Ctrl-C notice, a call stopped before it began).

On a terminal both streams show interleaved; a line open on one stream is
ended before the other is written, so neither stream's text runs into the
other's and each stream on its own still ends its lines.
"""

from __future__ import annotations

from typing import Any, Literal, TextIO

import attrs

import llmrt
from llmrt import (
    AttemptChunk,
    BlockAssembler,
    BlockEnd,
    Finish,
    FinishAborted,
    FinishError,
    ReasoningDelta,
    RetryScheduled,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
)

__all__ = [
    "BOLD",
    "CYAN",
    "DIM",
    "RED",
    "ColorMode",
    "HumanOutput",
    "JsonOutput",
    "Output",
    "Style",
    "report_finish",
    "usage_parts",
]

DIM, BOLD, CYAN, RED = "\x1b[2m", "\x1b[1m", "\x1b[36m", "\x1b[31m"
_RESET = "\x1b[0m"

ColorMode = Literal["auto", "always", "never"]


@attrs.frozen
class Style:
    """ANSI styling, or none. ``auto`` colours a terminal unless ``NO_COLOR`` is set
    (to anything but the empty string, https://no-color.org) or ``TERM`` is ``dumb``;
    a ``--color`` given on the command line wins over the environment."""

    enabled: bool

    @classmethod
    def choose(cls, mode: ColorMode, stream: TextIO, environ: dict[str, str]) -> Style:
        if mode != "auto":
            return cls(mode == "always")
        if environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
            return cls(False)
        isatty = getattr(stream, "isatty", None)
        return cls(bool(isatty is not None and isatty()))

    def __call__(self, code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if self.enabled and text else text


@attrs.define(eq=False)
class HumanOutput:
    """The answer on ``out``, the rest on ``err`` (styled with ``style``).

    ``hold_text``: keep the answer until the call ends, and drop what a failed
    attempt streamed (``--retry`` into a pipe: the pipe gets the answer of the
    attempt that finished, not the void text of the ones before it).
    """

    out: TextIO
    err: TextIO
    style: Style
    hold_text: bool = False
    #: Which stream has a line left open: the answer's, or a reasoning block's.
    _open: Literal["out", "reasoning"] | None = None
    _held: list[str] = attrs.field(factory=list)
    assembler: BlockAssembler = attrs.field(factory=BlockAssembler)

    def event(self, event: Any) -> None:
        """One event of the call (a chunk, or with ``--retry`` an attempt's event)."""
        if isinstance(event, RetryScheduled):
            self._retry(event)
            return
        chunk: StreamChunk = event.chunk if isinstance(event, AttemptChunk) else event
        if isinstance(chunk, Finish):
            return  # the caller reports the finish, beside the usage and timings
        self.assembler.push(chunk)
        if isinstance(chunk, TextDelta):
            self._text(chunk.text)
        elif isinstance(chunk, ReasoningDelta):
            self._reasoning(chunk.text)
        elif isinstance(chunk, BlockEnd) and isinstance(chunk.block, ToolCallBlock):
            block = chunk.block
            self.note(f"-> tool call {block.name}({block.arguments})", CYAN)

    def _text(self, text: str) -> None:
        if self._open == "reasoning":
            self._end_line()
        if self.hold_text:
            self._held.append(text)
            return
        self.out.write(text)
        self.out.flush()
        self._open = "out"

    def _reasoning(self, text: str) -> None:
        if self._open == "out":
            self._end_line()
        if self._open is None:
            self.err.write(self.style(DIM, "thinking: "))
            self._open = "reasoning"
        self.err.write(self.style(DIM, text))
        self.err.flush()

    def _retry(self, event: RetryScheduled) -> None:
        failure = event.failure
        self.note(
            f"[attempt {event.attempt} failed: {failure.code}: {failure.message}; "
            f"retrying in {event.delay_ms / 1000:.1f} s]",
            RED,
        )
        self._held.clear()  # void: the next attempt answers afresh
        self.assembler = BlockAssembler()

    def _end_line(self) -> None:
        if self._open == "out":
            self.out.write("\n")
            self.out.flush()
        elif self._open == "reasoning":
            self.err.write("\n")
            self.err.flush()
        self._open = None

    def note(self, text: str, code: str = DIM) -> None:
        """A line on stderr (after ending whatever line is open)."""
        self._end_line()
        self.err.write(self.style(code, text) + "\n")
        self.err.flush()

    def result(self, text: str, code: str = DIM) -> None:
        """A line that says how the call ended: on stderr, like a note."""
        self.note(text, code)

    def close(self) -> None:
        """The call is over: end the open line, write the held answer."""
        self._end_line()
        if self._held:
            self.out.write("".join(self._held) + "\n")
            self.out.flush()
            self._held.clear()


@attrs.define(eq=False)
class JsonOutput:
    """Every event as one line of JSON on ``out``; notes on ``err``."""

    out: TextIO
    err: TextIO

    def event(self, event: Any) -> None:
        self.out.write(llmrt.encode(event).decode() + "\n")
        self.out.flush()

    def note(self, text: str, code: str = DIM) -> None:
        self.err.write(text + "\n")
        self.err.flush()

    def result(self, text: str, code: str = DIM) -> None:
        """Said by the finish event already."""

    def close(self) -> None:
        """Every line is complete already."""


Output = HumanOutput | JsonOutput


def usage_parts(usage: TokenUsage | None, cost: float | None = None) -> list[str]:
    """The usage part of the summary line: tokens, cached and reasoning ones, and the
    call's price where it has one (``cost``, in USD)."""
    if usage is None:
        return []
    parts = [f"usage: input {usage.input_tokens}, output {usage.output_tokens}"]
    if usage.cache_read_tokens:
        parts.append(f"cache read {usage.cache_read_tokens}")
    if usage.reasoning_tokens:
        parts.append(f"reasoning {usage.reasoning_tokens}")
    if cost is not None:
        parts.append(f"${cost:.6f}")
    return parts


def report_finish(output: Output, finish: Finish, latency: str = "") -> int:
    """Say how the call ended; the exit status it means (0 done, 1 error, 130 aborted)."""
    reason = finish.reason
    if isinstance(reason, FinishAborted):
        output.result(f"aborted: {reason.failure.message}{latency}", RED)
        return 130
    if isinstance(reason, FinishError):
        output.result(f"error {reason.failure.code}: {reason.failure.message}", RED)
        return 1
    output.result(f"finish: {reason.__struct_config__.tag}", DIM)
    return 0
