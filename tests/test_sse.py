"""The incremental SSE parser: WHATWG rules, arbitrary read boundaries, bounds, transcripts."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from llmrt import ErrorCode, LlmError
from llmrt.adapters._sse import SSEEvent, SSEParser, is_done

WIRE = Path(__file__).resolve().parent / "wire"
TRANSCRIPTS = sorted(WIRE.glob("*.sse"))


def parse(body: bytes, **bounds: int) -> list[SSEEvent]:
    parser = SSEParser(**bounds)
    return parser.feed(body) + parser.close()


def parse_pieces(pieces: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    return events + parser.close()


def parse_data_pieces(pieces: list[bytes]) -> list[bytes]:
    parser = SSEParser()
    payloads: list[bytes] = []
    for piece in pieces:
        payloads += parser.feed_data(piece)
    parser.close()
    return payloads


def cut(body: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *sorted({c % (len(body) + 1) for c in cuts}), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(edges)]


# -- example tests, one rule each ---------------------------------------------


def test_openai_style_event() -> None:
    assert parse(b'data: {"a":1}\n\n') == [SSEEvent(b'{"a":1}')]
    assert SSEEvent(b"x").event == "message"


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol: bytes) -> None:
    body = b"event: e" + eol + b"data: one" + eol + b"data: two" + eol + eol
    assert parse(body) == [SSEEvent(b"one\ntwo", "e")]


def test_crlf_split_across_reads_is_one_line_end() -> None:
    # If the LF were a second line end it would be a blank line and dispatch
    # "a" early, without "b".
    assert parse_pieces([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == [SSEEvent(b"a\nb")]


def test_lone_cr_at_read_end_then_cr() -> None:
    # CR, then CRLF: two line ends, the second a blank line.
    assert parse_pieces([b"data: a\r", b"\r\n"]) == [SSEEvent(b"a")]


def test_multiline_data_joined_with_lf() -> None:
    assert parse(b"data: a\ndata:\ndata: c\n\n") == [SSEEvent(b"a\n\nc")]


def test_only_one_space_after_colon_is_stripped() -> None:
    assert parse(b"data:x\n\ndata:  y\n\n") == [SSEEvent(b"x"), SSEEvent(b" y")]


def test_comments_ignored() -> None:
    body = b": keep-alive\n\n: keep-alive\n\ndata: x\n: inside\n\n"
    assert parse(body) == [SSEEvent(b"x")]


def test_line_without_colon_is_field_with_empty_value() -> None:
    # "data" alone adds an empty line of data, so the event is dispatched.
    assert parse(b"data\n\n") == [SSEEvent(b"")]
    assert parse(b"data\ndata\n\n") == [SSEEvent(b"\n")]
    # "event" alone sets an empty type, which dispatches as "message".
    assert parse(b"event: x\nevent\ndata: y\n\n") == [SSEEvent(b"y", "message")]


def test_unknown_fields_ignored() -> None:
    assert parse(b"foo: bar\nDATA: no\ndata: yes\n\n") == [SSEEvent(b"yes")]


def test_event_without_data_is_not_dispatched() -> None:
    assert parse(b"event: ping\n\nid: 7\n\nretry: 10\n\n") == []


def test_id_persists_and_nul_id_ignored() -> None:
    events = parse(b"id: 1\ndata: a\n\ndata: b\n\nid: x\x00y\ndata: c\n\nid\ndata: d\n\n")
    assert [(e.data, e.id) for e in events] == [(b"a", "1"), (b"b", "1"), (b"c", "1"), (b"d", "")]


def test_retry_only_ascii_digits() -> None:
    parser = SSEParser()
    events = parser.feed(b"retry: 250\ndata: a\n\nretry: 2x\ndata: b\n\n")
    assert [e.retry for e in events] == [250, None]
    assert parser.retry == 250


def test_leading_bom_ignored_even_split() -> None:
    body = b"\xef\xbb\xbfdata: x\n\n"
    assert parse(body) == [SSEEvent(b"x")]
    assert parse_pieces([b"\xef", b"\xbb", b"\xbf", b"data: x\n\n"]) == [SSEEvent(b"x")]
    # Only a leading BOM is special: a second one is part of the field name.
    assert parse(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n") == []


def test_events_split_at_every_byte() -> None:
    body = b"event: a\ndata: 1\n\ndata: 2\ndata: 3\n\n: c\n\ndata: 4\n\n"
    whole = parse(body)
    assert len(whole) == 3
    assert parse_pieces([body[i : i + 1] for i in range(len(body))]) == whole


def test_anthropic_shape_event_names() -> None:
    body = b'event: ping\ndata: {"type": "ping"}\n\nevent: error\ndata: {}\n\n'
    assert parse(body) == [SSEEvent(b'{"type": "ping"}', "ping"), SSEEvent(b"{}", "error")]


def test_feed_data_matches_feed() -> None:
    body = b"event: a\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\ndata: 5\n\n"
    assert parse_data_pieces([body]) == [e.data for e in parse(body)]


def test_done_sentinel() -> None:
    events = parse(b"data: {}\n\ndata: [DONE]\n\n")
    assert [is_done(e.data) for e in events] == [False, True]


def test_close_discards_unfinished_event_and_reports_it() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\n\ndata: b") == [SSEEvent(b"a")]
    assert parser.partial
    assert parser.close() == []
    assert parser.partial
    with pytest.raises(RuntimeError):
        parser.feed(b"\n\n")


def test_close_can_dispatch_unfinished_event() -> None:
    parser = SSEParser()
    parser.feed(b"data: a\n\ndata: [DONE]\n")
    assert parser.close(dispatch_partial=True) == [SSEEvent(b"[DONE]")]


def test_clean_end_is_not_partial() -> None:
    parser = SSEParser()
    parser.feed(b"data: a\n\n\n")
    assert not parser.partial
    parser.close()
    assert not parser.partial


def test_accepts_bytearray_and_memoryview() -> None:
    parser = SSEParser()
    got = parser.feed(bytearray(b"data: a\n\n")) + parser.feed(memoryview(b"data: b\n\n"))  # type: ignore[arg-type]
    assert got == [SSEEvent(b"a"), SSEEvent(b"b")]


# -- bounds -------------------------------------------------------------------


@pytest.mark.parametrize("pieces", [1, 7, 1000])
def test_oversize_line_is_protocol_error(pieces: int) -> None:
    body = b"data: " + b"x" * 5000
    parser = SSEParser(max_line_bytes=1024, max_event_bytes=1 << 20)
    with pytest.raises(LlmError) as info:
        for i in range(0, len(body), pieces):
            parser.feed(body[i : i + pieces])
        parser.feed(b"\n\n")
    assert info.value.code == ErrorCode.PROTOCOL


@pytest.mark.parametrize("pieces", [1, 7, 100_000])
def test_oversize_event_is_protocol_error(pieces: int) -> None:
    body = b"data: 0123456789\n" * 500 + b"\n"
    parser = SSEParser(max_line_bytes=1024, max_event_bytes=2048)
    with pytest.raises(LlmError) as info:
        for i in range(0, len(body), pieces):
            parser.feed(body[i : i + pieces])
    assert info.value.code == ErrorCode.PROTOCOL


def test_oversize_line_on_hot_path() -> None:
    body = b"data: a\n\n" + b"data: " + b"y" * 3000 + b"\n\ndata: b\n\n"
    with pytest.raises(LlmError) as info:
        parse(body, max_line_bytes=1024)
    assert info.value.code == ErrorCode.PROTOCOL


def test_within_bounds_is_fine() -> None:
    body = b"data: " + b"x" * 1000 + b"\n\n"
    assert parse(body, max_line_bytes=1006, max_event_bytes=1008)[0].data == b"x" * 1000


@pytest.mark.parametrize(
    "unit",
    [b"\n\n", b"\r\n\r\n", b": ping\n\n", b": a\n: b\n: c\n\n", b"x: 1\n\n"],
    ids=["lf", "crlf", "comments", "comment-lines", "events-without-data"],
)
@pytest.mark.parametrize("pieces", [1, 13, 100_000])
def test_lines_without_an_event_are_bounded(unit: bytes, pieces: int) -> None:
    # The bound counts from one dispatched event to the next, so a steady
    # keep-alive between events never trips it; a flood does.
    parser = SSEParser(max_idle_lines=100)

    def feed(body: bytes) -> list[bytes]:
        out: list[bytes] = []
        for i in range(0, len(body), pieces):
            out += parser.feed_data(body[i : i + pieces])
        return out

    assert feed((b"data: a\n\n" + unit * 10 + b"data: b\n\n") * 5) == [b"a", b"b"] * 5
    with pytest.raises(LlmError, match="more than 100 lines without an event") as info:
        feed(unit * 101 + b"data: c\n\n")
    assert info.value.code == ErrorCode.PROTOCOL


def test_an_event_of_too_many_lines_is_refused_before_its_lines_are_read() -> None:
    with pytest.raises(LlmError, match="lines without an event"):
        parse(b": x\n" * 200 + b"data: 1\n\n", max_idle_lines=100)
    assert parse(b": x\n" * 50 + b"data: 1\n\n", max_idle_lines=100) == [SSEEvent(b"1")]


# -- transcripts --------------------------------------------------------------

# Events (with data) per transcript: 2 keep-alive comments in deepseek_reasoner
# are not events; anthropic_overloaded ends with `event: error`.
EVENT_COUNTS = {
    "anthropic_overloaded.sse": 6,
    "anthropic_thinking_tool.sse": 19,
    "deepseek_empty.sse": 5,
    "deepseek_length.sse": 13,
    "deepseek_reasoner.sse": 11,
    "openai_text.sse": 11,
    "openai_tool_calls.sse": 11,
}


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.name)
def test_transcript_event_counts(path: Path) -> None:
    parser = SSEParser()
    events = parser.feed(path.read_bytes()) + parser.close()
    assert len(events) == EVENT_COUNTS[path.name]
    assert not parser.partial
    if path.name.startswith(("openai", "deepseek")):
        assert is_done(events[-1].data)
        assert {e.event for e in events} == {"message"}
    else:
        assert all(e.data.startswith(b'{"type') for e in events)
        assert events[0].event == "message_start"


def test_transcripts_cover_all_files() -> None:
    assert {p.name for p in TRANSCRIPTS} == set(EVENT_COUNTS)


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.name)
@pytest.mark.parametrize("eol", [b"\r\n", b"\r"])
def test_transcript_line_ending_variants(path: Path, eol: bytes) -> None:
    body = path.read_bytes()
    assert parse(body.replace(b"\n", eol)) == parse(body)


# -- properties ---------------------------------------------------------------

_field_value = st.binary(max_size=12).map(
    lambda b: b.replace(b"\n", b"").replace(b"\r", b"").replace(b"\xef", b"")
)
_line = st.one_of(
    _field_value.map(lambda v: b"data: " + v),
    _field_value.map(lambda v: b"data:" + v),
    st.just(b"data"),
    _field_value.map(lambda v: b"event: " + v),
    _field_value.map(lambda v: b"id: " + v),
    st.sampled_from([b"retry: 100", b": keep-alive", b"x: y", b""]),
)
_eol = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    choice = draw(st.integers(0, len(TRANSCRIPTS)))
    if choice < len(TRANSCRIPTS):
        body = TRANSCRIPTS[choice].read_bytes()
        return body.replace(b"\n", draw(_eol))
    lines = draw(st.lists(st.tuples(_line, _eol), max_size=25))
    return b"".join(line + eol for line, eol in lines)


def reference(body: bytes) -> list[SSEEvent]:
    """A line-at-a-time transcription of the WHATWG algorithm, for comparison."""
    body = body.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    lines = body.split(b"\n")[:-1]  # the last piece has no line end: discarded
    events: list[SSEEvent] = []
    data: list[bytes] = []
    event, last_id, retry = "", "", None
    for line in lines:
        if not line:
            if data:
                events.append(SSEEvent(b"\n".join(data), event or "message", last_id, retry))
            data, event, retry = [], "", None
            continue
        name, colon, value = line.partition(b":")
        if colon and not name:
            continue
        value = value.removeprefix(b" ")
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event = value.decode("utf-8", "replace")
        elif name == b"id" and b"\0" not in value:
            last_id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            retry = int(value)
    return events


@settings(max_examples=examples(300), deadline=None)
@given(body=_bodies())
def test_agrees_with_reference(body: bytes) -> None:
    assert parse(body) == reference(body)


@settings(max_examples=examples(300), deadline=None)
@given(body=_bodies(), cuts=st.lists(st.integers(min_value=0), max_size=40))
def test_any_split_gives_same_events(body: bytes, cuts: list[int]) -> None:
    whole = parse(body)
    pieces = cut(body, cuts)
    assert parse_pieces(pieces) == whole
    assert parse_data_pieces(pieces) == [e.data for e in whole]


@settings(max_examples=examples(200), deadline=None)
@given(body=_bodies(), cuts=st.lists(st.integers(min_value=0), max_size=40))
def test_line_ending_style_does_not_matter(body: bytes, cuts: list[int]) -> None:
    lf = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    assert parse_pieces(cut(lf.replace(b"\n", b"\r\n"), cuts)) == parse(lf)
    assert parse_pieces(cut(lf.replace(b"\n", b"\r"), cuts)) == parse(lf)
