"""Misuse that would otherwise hang or fail deep inside trio, refused at once with the fix.

Two mistakes a new user makes in the first hour:

* iterating ``rt.stream(request)`` without ``async with``: the call task
  starts when the block is entered, so a bare ``async for`` would wait for
  chunks that never come. `CallNotEnteredError` says so at the first step.
* awaiting the trio API from asyncio (``llmrt.open_runtime()`` under
  ``asyncio.run``): trio fails with an internal ``AttributeError`` or
  "Task got bad yield". `NotInTrioError` names the asyncio entry point.

Both are `RuntimeError` subclasses (the house rule for misuse). The checks
run where the trio API is entered (`open_runtime`, a call's ``__aenter__``,
the first step of a bare iteration), never per chunk.
"""

from __future__ import annotations

import sys

import trio

__all__ = [
    "CallNotEnteredError",
    "ConcurrentIterationError",
    "NotInAsyncioError",
    "NotInTrioError",
    "STREAM_FORM",
    "RETRY_FORM",
    "concurrent_iteration",
    "not_entered",
    "not_in_asyncio",
    "not_in_trio",
    "require_trio",
]


class CallNotEnteredError(RuntimeError):
    """A call was iterated without entering it: use ``async with rt.stream(...) as call``."""


class NotInTrioError(RuntimeError):
    """llmrt's trio API was awaited outside trio (e.g. from asyncio: use ``llmrt.aio``)."""


# Tracebacks name them where users import them from: ``llmrt.NotInTrioError: ...``.
CallNotEnteredError.__module__ = NotInTrioError.__module__ = "llmrt"


def not_entered(form: str) -> CallNotEnteredError:
    """The error for iterating a call outside its ``async with``; ``form`` is the right code."""
    return CallNotEnteredError(
        f"a call streams only inside its `async with`: write `{form}` "
        "(entering the block starts the call, leaving it stops the call and closes the upstream)"
    )


#: The right form of each call API, as `not_entered` shows it.
STREAM_FORM = "async with rt.stream(request) as call: async for chunk in call: ..."
RETRY_FORM = "async with rt.stream_with_retry(request) as call: async for event in call: ..."


def _under_asyncio() -> bool:
    # Only a program that imported asyncio can be running its loop; importing
    # it here, on the error path, would cost a trio program for nothing.
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def not_in_trio(api: str) -> NotInTrioError:
    """The error for awaiting ``api`` (e.g. ``"llmrt.open_runtime()"``) outside a trio task."""
    if _under_asyncio():
        return NotInTrioError(
            f"{api} is llmrt's trio API, awaited here from asyncio: asyncio programs use "
            "llmrt.aio (`async with llmrt.aio.open_runtime() as rt:`), the same API on "
            "the asyncio loop"
        )
    return NotInTrioError(
        f"{api} must be awaited inside trio (`trio.run(main)`); asyncio programs use llmrt.aio"
    )


def require_trio(api: str) -> None:
    """Raise `NotInTrioError` unless this runs in a trio task. Cheap: one attribute test."""
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        raise not_in_trio(api) from None


class NotInAsyncioError(RuntimeError):
    """``llmrt.aio`` was used outside a running asyncio loop (trio programs use ``llmrt``)."""

    code = "NOT_IN_ASYNCIO"


class ConcurrentIterationError(RuntimeError):
    """One call's chunks were awaited by two tasks at once: one task consumes a call."""

    code = "CONCURRENT_ITERATION"


NotInAsyncioError.__module__ = ConcurrentIterationError.__module__ = "llmrt.aio"


def not_in_asyncio(api: str) -> NotInAsyncioError:
    """The error for using ``api`` (e.g. ``"llmrt.aio.open_runtime()"``) outside asyncio."""
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        where = "outside a running asyncio loop"
    else:
        return NotInAsyncioError(
            f"{api} is llmrt's asyncio API, used here from trio: trio programs use "
            "`async with llmrt.open_runtime() as rt:` directly"
        )
    return NotInAsyncioError(
        f"{api} must run inside a running asyncio loop (`asyncio.run(main())`); it was used {where}"
    )


def concurrent_iteration(api: str) -> ConcurrentIterationError:
    """The error for a second task awaiting ``api`` while another one waits on it."""
    return ConcurrentIterationError(
        f"two tasks are reading one call at once ({api}): a call has one consumer; "
        "hand its chunks to other tasks through a queue"
    )
