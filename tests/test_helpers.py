"""The shared helpers: ExceptionGroup unwrapping and validation by round trip."""

from __future__ import annotations

from typing import Annotated

import msgspec
import pytest

from llmrt._helpers import raise_sole, revalidated, sole_exception


class Bounded(msgspec.Struct, frozen=True):
    n: Annotated[int, msgspec.Meta(ge=0)]
    tags: tuple[str, ...] = ()


def test_sole_exception_of_one_and_of_several() -> None:
    one = ValueError("x")
    assert sole_exception(BaseExceptionGroup("g", [one])) is one
    assert sole_exception(BaseExceptionGroup("g", [ValueError(), KeyError()])) is None


def test_raise_sole_raises_the_inner_exception_with_its_own_cause() -> None:
    cause = OSError("refused")
    inner = ValueError("bad")
    inner.__cause__ = cause
    with pytest.raises(ValueError) as info:
        raise_sole(BaseExceptionGroup("g", [inner]))
    assert info.value is inner
    assert info.value.__cause__ is cause


def test_raise_sole_raises_a_group_of_several_as_it_is() -> None:
    group = BaseExceptionGroup("g", [ValueError(), KeyError()])
    with pytest.raises(BaseExceptionGroup) as info:
        raise_sole(group)
    assert info.value is group


def test_revalidated_checks_what_the_constructor_skips_and_detaches() -> None:
    decoder = msgspec.json.Decoder(Bounded)
    good = Bounded(n=1, tags=("a",))
    copy = revalidated(decoder, good)
    assert copy == good and copy is not good
    with pytest.raises(msgspec.ValidationError, match=">= 0"):
        revalidated(decoder, Bounded(n=-1))  # the constructor let it through


def test_revalidated_reports_an_unencodable_value_as_a_validation_error() -> None:
    decoder = msgspec.json.Decoder(Bounded)
    with pytest.raises(msgspec.ValidationError, match="Encoding objects of type object"):
        revalidated(decoder, Bounded(n=1, tags=(object(),)))  # type: ignore[arg-type]
