"""Gemini and Responses transcripts through their SSE feeds, whole and in 1-7 byte reads."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from _stream_checks import check_invariants, feed_split, feed_whole

import llmrt
from llmrt import BlockAssembler, Finish, FinishError, StreamChunk
from llmrt.adapters._http import EventFeed
from llmrt.adapters.gemini import _GeminiEvents
from llmrt.adapters.openai_responses import _ResponsesEvents

WIRE = pathlib.Path(__file__).parent / "wire" / "written"
EXPECTED: dict[str, Any] = json.loads((WIRE / "expected.json").read_text())
FEEDS: dict[str, Callable[[], EventFeed]] = {"gemini": _GeminiEvents, "responses": _ResponsesEvents}


def check_case(name: str, chunks: list[StreamChunk]) -> None:
    case = EXPECTED[name]
    check_invariants(chunks)
    assembler = BlockAssembler()
    for chunk in chunks:
        assembler.push(chunk)
    blocks = llmrt.decode(json.dumps(case["blocks"]), tuple[llmrt.ContentBlock, ...])
    assert assembler.blocks() == blocks
    finish = assembler.finish
    assert json.loads(llmrt.encode(finish))["kind"] == case["finish"]["kind"]
    if "code" in case["finish"]:
        assert type(finish) is FinishError
        assert finish.failure.code == case["finish"]["code"]
    if case["usage"] is None:
        assert assembler.usage is None
    else:
        assert assembler.usage == llmrt.decode(json.dumps(case["usage"]), llmrt.TokenUsage)
    last = chunks[-1]
    assert type(last) is Finish
    if "replay_blocks" in case:
        assert last.replay_state is not None
        assert list(last.replay_state.blocks or ()) == case["replay_blocks"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_transcript_in_one_read(name: str) -> None:
    body = (WIRE / name).read_bytes()
    check_case(name, feed_whole(FEEDS[EXPECTED[name]["provider"]], body))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_transcript_in_random_small_reads(name: str, seed: int) -> None:
    body = (WIRE / name).read_bytes()
    make = FEEDS[EXPECTED[name]["provider"]]
    split = feed_split(make, body, seed)
    check_case(name, split)
    assert split == feed_whole(make, body), "the framing of reads changes nothing"
