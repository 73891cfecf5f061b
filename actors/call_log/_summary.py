"""The records of calls made of attempts: retried calls and calls to routing groups.

Their layers (`RetryCall`, `RoutedCall`) call these few functions; each is
a no-op when the runtime has no call log. The attempts' own ``call``
records are made by the attempts; these records only link them.
"""

from __future__ import annotations

import time
from typing import Any

from llmrt._chunks import Finish
from llmrt._request import GenerateOptions

from ._log import CallLog
from ._record import RetryAttemptRecord, RetryRecord, RoutedRecord

__all__ = ["log_of", "retried", "retry_ended", "routed_ended"]


def log_of(host: object) -> CallLog | None:
    """The call log of a layer's host (None: off, or a host without one)."""
    found = getattr(host, "call_log", None)
    return found if isinstance(found, CallLog) else None


def attempt_id(attempt: object) -> str | None:
    found = getattr(attempt, "log_id", None)
    return found if isinstance(found, str) else None


def retried(
    attempts: list[RetryAttemptRecord] | None,
    number: int,
    attempt: Any,
    code: str | None,
    delay_ms: float | None,
) -> list[RetryAttemptRecord]:
    """``attempts`` with attempt ``number`` added (retried after ``code``, or the last)."""
    entry = RetryAttemptRecord(
        attempt=number, call=attempt_id(attempt), code=code, delay_ms=delay_ms
    )
    return [*(attempts or ()), entry]


def retry_ended(
    log: CallLog,
    record_id: str,
    started: float,
    options: GenerateOptions,
    attempts: list[RetryAttemptRecord] | None,
    finish: Finish,
) -> None:
    """A retried call ended with ``finish``: its ``retry`` record."""
    log.submit(
        RetryRecord(
            id=record_id,
            at=started,
            provider=options.provider,
            model=options.model,
            attempts=tuple(attempts or ()),
            finish=finish,
        )
    )


def routed_ended(
    log: CallLog, record_id: str, started: float, group: str, calls: list[str], finish: Finish
) -> None:
    """A call to a routing group ended with ``finish``: its ``routed`` record."""
    log.submit(
        RoutedRecord(
            id=record_id,
            at=started,
            group=group,
            calls=tuple(calls),
            routing=finish.routing,
            finish=finish,
        )
    )


def now() -> float:
    return time.time()
