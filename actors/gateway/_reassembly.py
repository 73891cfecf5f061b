"""Frames a gateway sent in ``part`` frames, put back together: the client's side of
`Codec.frames_within` (docs/protocol.md §4, "Bounded bytes").

No I/O: the client hands each ``part`` frame to `Reassembly.add` and gets the
whole frame back once its last part is in. What may be held at once is
bounded in UTF-8 bytes (the ids too: a peer's 1 MiB ids with empty data, or
four-byte characters, would otherwise pass a bound that means memory) and
in frames partly received; past either, `PartsOverflow`.
"""

from __future__ import annotations

import attrs

from ._counters import payload_bytes
from ._protocol import BinaryPartFrame, PartFrame

__all__ = ["PartsOverflow", "Reassembly"]


class PartsOverflow(Exception):
    """The parts held would go past the reassembly's bound in bytes or in frames."""


@attrs.define(eq=False)
class _Partial:
    """One frame partly received in ``part`` frames: its slices, and the bytes they hold."""

    size: int
    data: list[str | bytes] = attrs.field(factory=list)


@attrs.define(eq=False)
class Reassembly:
    """The frames of one connection partly received, by id, within ``max_bytes`` and
    ``max_frames``."""

    max_bytes: int
    max_frames: int
    _frames: dict[str | None, _Partial] = attrs.field(factory=dict, init=False)
    _bytes: int = attrs.field(default=0, init=False)

    def add(self, part: PartFrame | BinaryPartFrame) -> str | bytes | None:
        """Add a ``part`` to its frame; the whole frame once its last part is in.

        Raises `PartsOverflow` when the parts held would exceed ``max_bytes``
        (UTF-8 bytes of ids and data) or ``max_frames`` frames.
        """
        held = self._frames.get(part.id)
        size = payload_bytes(part.data)
        if held is None:
            if not part.more:
                return part.data  # a frame in one part: nothing is held
            if len(self._frames) >= self.max_frames:
                raise PartsOverflow(
                    f"the gateway sent parts of more than {self.max_frames} frames at once"
                )
            # The id is held once per frame, as the buffer's key.
            held = self._frames[part.id] = _Partial(size=payload_bytes(part.id or ""))
            self._bytes += held.size
        self._bytes += size
        if self._bytes > self.max_bytes:
            raise PartsOverflow(f"the gateway sent frames in parts above {self.max_bytes} bytes")
        held.size += size
        held.data.append(part.data)
        if part.more:
            return None
        del self._frames[part.id]
        self._bytes -= held.size
        if isinstance(part.data, bytes):
            return b"".join(held.data)  # type: ignore[arg-type]
        return "".join(held.data)  # type: ignore[arg-type]

    def clear(self) -> None:
        """Drop every frame partly received (the connection is ending)."""
        self._frames.clear()
        self._bytes = 0
