"""The base of every wire value: frozen, keyword-only, camelCase JSON, absent optionals omitted."""

from __future__ import annotations

import msgspec

__all__ = ["Wire"]


class Wire(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Base class of llmrt's wire values.

    Instances are immutable and hashable when their fields are; sequences are
    tuples. JSON field names are the spec's camelCase names.
    """
