"""Per-chunk cost of the vocabulary: codec round trip and `BlockAssembler.push`.

Run: ``python bench/bench_vocab.py [--iterations N] [--repeats R]``

Measures, with ``time.perf_counter_ns``, the per-chunk cost of

* ``codec``: ``llmrt.encode`` + ``llmrt.decode_chunk`` of one text-delta chunk;
* ``push``: ``BlockAssembler.push`` over a realistic stream (reasoning deltas,
  text deltas, tool-call deltas, block-ends, usage, finish), fresh assembler
  per stream;
* ``plain``: for reference, ``msgspec.json.encode`` + ``decode`` of the
  equivalent plain dict (no typed decoding, no validation).

Each figure is repeated ``R`` times; the table shows min and median in µs per
chunk. JSON goes to ``bench/results/vocab.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

import llmrt
from llmrt import (
    BlockAssembler,
    BlockEnd,
    BlockStart,
    Finish,
    FinishToolCalls,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)

RESULTS = Path(__file__).resolve().parent / "results" / "vocab.json"

#: Targets from the foundation issue, µs per chunk (median).
TARGETS = {"codec": 1.5, "push": 1.0}


def realistic_stream() -> list[StreamChunk]:
    """A stream shaped like a reasoning model that answers and then calls two tools."""
    chunks: list[StreamChunk] = [BlockStart(index=0, block_type="reasoning")]
    chunks += [ReasoningDelta(index=0, text=f" step {i}") for i in range(40)]
    chunks.append(BlockEnd(index=0, block=ReasoningBlock(text="...")))
    chunks.append(BlockStart(index=1, block_type="text"))
    chunks += [TextDelta(index=1, text=f"word{i} ") for i in range(120)]
    for index in (2, 3):
        chunks.append(ToolCallDelta(index=index, id=f"call_{index}", name="search"))
        chunks += [ToolCallDelta(index=index, arguments_delta='{"q": "x') for _ in range(15)]
    chunks.append(UsageChunk(usage=TokenUsage(input_tokens=900, output_tokens=210)))
    chunks.append(Finish(reason=FinishToolCalls()))
    return chunks


def time_per_item(run: Callable[[], int], repeats: int) -> list[float]:
    """Run ``run`` (which returns how many items it processed) ``repeats`` times; ns per item."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        items = run()
        samples.append((time.perf_counter_ns() - start) / items)
    return samples


def bench_codec(iterations: int) -> Callable[[], int]:
    chunk = TextDelta(index=3, text="Hello, world")
    encode, decode = llmrt.encode, llmrt.decode_chunk
    assert decode(encode(chunk)) == chunk

    def run() -> int:
        for _ in range(iterations):
            decode(encode(chunk))
        return iterations

    return run


def bench_plain(iterations: int) -> Callable[[], int]:
    value: dict[str, Any] = {"type": "text-delta", "index": 3, "text": "Hello, world"}
    encoder, decoder = msgspec.json.Encoder(), msgspec.json.Decoder()
    encode, decode = encoder.encode, decoder.decode
    assert decode(encode(value)) == value

    def run() -> int:
        for _ in range(iterations):
            decode(encode(value))
        return iterations

    return run


def bench_push(iterations: int) -> Callable[[], int]:
    stream = realistic_stream()
    streams = max(1, iterations // len(stream))

    def run() -> int:
        for _ in range(streams):
            push = BlockAssembler().push
            for chunk in stream:
                push(chunk)
        return streams * len(stream)

    # Warm-up, and check the stream assembles to what it should.
    check = BlockAssembler()
    for chunk in stream:
        check.push(chunk)
    assert len(check.blocks()) == 4
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    cases = {
        "codec": ("encode + decode_chunk (text-delta)", bench_codec),
        "push": ("BlockAssembler.push (realistic stream)", bench_push),
        "plain": ("msgspec encode + decode (plain dict)", bench_plain),
    }
    results: dict[str, dict[str, Any]] = {}
    print(f"{'case':<8}{'what':<42}{'min µs':>9}{'median µs':>11}{'target':>9}")
    for key, (label, make) in cases.items():
        run = make(args.iterations)
        run()  # warm-up
        samples = time_per_item(run, args.repeats)
        best, median = min(samples) / 1000, statistics.median(samples) / 1000
        target = TARGETS.get(key)
        verdict = "" if target is None else ("ok" if median < target else "MISS")
        results[key] = {
            "label": label,
            "us_per_chunk_min": round(best, 4),
            "us_per_chunk_median": round(median, 4),
            "samples_us": [round(s / 1000, 4) for s in samples],
            "target_us": target,
            "meets_target": None if target is None else median < target,
        }
        target_text = "" if target is None else f"< {target}"
        print(f"{key:<8}{label:<42}{best:>9.3f}{median:>11.3f}{target_text:>9} {verdict}")

    report = {
        "benchmark": "vocab",
        "command": "python bench/bench_vocab.py",
        "iterations": args.iterations,
        "repeats": args.repeats,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "msgspec": msgspec.__version__,
        "llmrt": llmrt.__version__,
        "results": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
