"""Exception groups around one exception: the helper every nursery boundary uses.

A trio nursery wraps whatever its body raised in a `BaseExceptionGroup`;
at a public boundary (opening a runtime, serving the gateway, a client
connection, the CLI) the caller wants that one exception back, not a group
around it. No I/O.
"""

from __future__ import annotations

__all__ = ["sole_exception"]


def sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception ``group`` holds, or None when it holds several.

    Raise it with ``raise inner from inner.__cause__`` to keep its own cause.
    """
    if len(group.exceptions) == 1:
        return group.exceptions[0]
    return None
