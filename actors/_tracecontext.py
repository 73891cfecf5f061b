"""W3C trace context across the gateway: the ``traceparent`` of the call being started.

No OpenTelemetry import here: the gateway sets `TRACEPARENT` around every call
whose frame carried one (a context-variable write), whether or not anything
traces. The call task copies its starter's context, so the otel middleware
(`llmrt.actors.otel`), when installed, reads the value there and opens the
call's span as a child of the client's span.
"""

from __future__ import annotations

import contextvars
import re

__all__ = ["TRACEPARENT", "TRACEPARENT_PATTERN", "MAX_TRACEPARENT", "valid_traceparent"]

#: The longest ``traceparent`` accepted, in characters. Version ``00`` is
#: exactly 55; later versions may append fields, and 256 leaves them room
#: while keeping the field small next to the frame bound.
MAX_TRACEPARENT = 256

#: A W3C ``traceparent``: lowercase hex ``version-traceid-parentid-flags``.
#: Version ``ff`` and all-zero ids are invalid; version ``00`` has no further
#: fields, a later version may carry more after a ``-`` (W3C Trace Context,
#: section "traceparent Header").
TRACEPARENT_PATTERN = (
    r"^(?!ff)(?:00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}"
    r"|(?!00)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}(?:-[!-~]*)?)\Z"
)
_TRACEPARENT = re.compile(TRACEPARENT_PATTERN)

#: The ``traceparent`` of the call being started in this context (None: none given).
TRACEPARENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "llmrt_traceparent", default=None
)


def valid_traceparent(value: str) -> bool:
    """Whether ``value`` is a ``traceparent`` the gateway accepts (format and length)."""
    return len(value) <= MAX_TRACEPARENT and _TRACEPARENT.match(value) is not None
