"""The nesting-depth checks, against the decoders they protect."""

from __future__ import annotations

import json
import tomllib

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmrt._nesting import MAX_NESTING, json_too_deep, msgpack_too_deep, toml_too_deep


def nested(depth: int) -> object:
    value: object = 1
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize("depth", [0, 1, 5, MAX_NESTING - 1, MAX_NESTING])
def test_within_the_limit_passes(depth: int) -> None:
    value = nested(depth)
    assert not json_too_deep(json.dumps(value))
    assert not json_too_deep(json.dumps(value).encode())
    assert not msgpack_too_deep(msgspec.msgpack.encode(value))


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 1000, 100_000])
def test_past_the_limit_is_refused(depth: int) -> None:
    # Built by hand: json.dumps itself recurses.
    text = "[" * depth + "]" * depth
    assert json_too_deep(text)
    assert json_too_deep(text.encode())
    assert msgpack_too_deep(b"\x91" * depth + b"\xc0")
    assert toml_too_deep("a = " + text)


def test_brackets_in_strings_do_not_count() -> None:
    text = json.dumps({"s": "[{" * 500, "t": ['\\"[[[[', "]]"]})
    assert not json_too_deep(text)
    payload = msgspec.msgpack.encode({"s": "\x91" * 500, "b": b"\x91\xdc" * 500, "n": [1.5, -3]})
    assert not msgpack_too_deep(payload)
    toml = "".join(
        f'a{i} = "[[[["\nb{i} = \'{{{{{{{{\'\nc{i} = """\n[[[[[\n"""\n# [[[[[[[[\n'
        for i in range(40)
    )
    assert not toml_too_deep(toml)
    assert tomllib.loads(toml)["a0"] == "[[[["


def test_toml_table_headers_are_shallow() -> None:
    text = "".join(f"[[t{i}]]\nx = [[1], [2]]\n" for i in range(200))
    assert not toml_too_deep(text)
    assert not toml_too_deep(text, limit=2)
    assert toml_too_deep(text, limit=1)


def test_the_limit_is_a_parameter() -> None:
    assert json_too_deep("[[[1]]]", limit=2)
    assert not json_too_deep("[[[1]]]", limit=3)
    assert msgpack_too_deep(msgspec.msgpack.encode([[[1]]]), limit=2)
    assert not msgpack_too_deep(msgspec.msgpack.encode([[[1]]]), limit=3)


def test_malformed_input_is_left_to_the_decoder() -> None:
    assert not msgpack_too_deep(b"\xc1" * 100)
    assert not msgpack_too_deep(b"\x9f" * 3)  # truncated, shallow
    assert not json_too_deep('["unterminated' + "[" * 100)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(alphabet='[]{}"\\ab'),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=30,
)


def depth_of(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    return 0


@given(json_values, st.integers(min_value=0, max_value=8))
def test_agrees_with_the_true_depth(value: object, limit: int) -> None:
    expected = depth_of(value) > limit
    assert json_too_deep(json.dumps(value), limit) == expected
    assert msgpack_too_deep(msgspec.msgpack.encode(value), limit) == expected
