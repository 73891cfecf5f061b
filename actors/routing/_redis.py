"""Routing state in Redis: one script call on the path to dispatch, one at an attempt's end.

`SharedState` owns a coredis client for as long as its task runs (it is
started in the runtime's nursery when groups are registered with
``RoutingSettings(redis=...)``). `acquire` and `release` are each one
round trip (``EVALSHA`` of `_scripts.ACQUIRE` / `RELEASE`), bounded by
``redis_timeout``. Any failure — refused, reset, too slow, a script error —
makes the state *degraded* for ``redis_retry`` seconds: the caller gets
None and goes on with local state, one warning is logged per degraded
interval, and the counters `errors` and `degradations` (exported on
``/metrics``) say so. The first call after the interval tries Redis again;
when it answers, state is shared again. Redis never fails a call.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from ._redis_url import open_client
from ._scripts import ACQUIRE, RELEASE, deployment_keys
from ._spec import Group, RoutingSettings
from ._state import DeploymentState

__all__ = ["SharedState", "SharedGrant", "SharedRelease"]

log = logging.getLogger("llmrt.routing")


@attrs.frozen
class SharedGrant:
    """What `SharedState.acquire` answered: the chosen candidate (or None) and when to retry."""

    #: Index into the candidates, or None when none had room.
    chosen: int | None
    #: The tpm bucket charged (for `SharedState.release`).
    bucket: int
    #: Seconds from now until the earliest candidate may have room (inf: unknown or never).
    retry_in: float


@attrs.frozen
class SharedRelease:
    #: Seconds from now until the deployment stops cooling (<= 0: it is not cooling).
    cooling_for: float


@attrs.define(eq=False)
class SharedState:
    """Routing state in Redis for one set of groups (see the module docstring)."""

    settings: RoutingSettings
    _client: Any = attrs.field(default=None, init=False)
    _acquire: Any = attrs.field(default=None, init=False)
    _release: Any = attrs.field(default=None, init=False)
    #: trio time until which Redis is not asked (degraded); -inf: ask it.
    _down_until: float = attrs.field(default=-math.inf, init=False)
    #: Round trips that failed, and times the state went from shared to local.
    errors: int = attrs.field(default=0, init=False)
    degradations: int = attrs.field(default=0, init=False)
    round_trips: int = attrs.field(default=0, init=False)
    _keys: dict[tuple[str, str], tuple[str, ...]] = attrs.field(factory=dict, init=False)

    @property
    def shared(self) -> bool:
        """True while calls use Redis (connected, and not degraded now)."""
        return self._client is not None and trio.current_time() >= self._down_until

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the client until cancelled; reconnect after a failure to open it. Started once
        connected or once the first attempt failed (calls then use local state)."""
        started = False
        url = self.settings.redis
        assert url is not None
        while True:
            try:
                async with open_client(url, self.settings.redis_timeout) as client:
                    self._acquire = client.register_script(ACQUIRE)
                    self._release = client.register_script(RELEASE)
                    # One connection made now, not by the first calls all at once.
                    with trio.move_on_after(self.settings.redis_timeout):
                        await client.ping()
                    self._client = client
                    if not started:
                        started = True
                        task_status.started()
                    await trio.sleep_forever()
            except Exception as exc:
                self._client = None
                self._failed(exc)
            finally:
                self._client = None
            if not started:
                started = True
                task_status.started()
            await trio.sleep(self.settings.redis_retry)

    def _failed(self, exc: BaseException) -> None:
        self.errors += 1
        now = trio.current_time()
        if now >= self._down_until:
            # Once per degraded interval: a Redis outage is one line per interval, not per call.
            self.degradations += 1
            log.warning(
                "routing: Redis failed (%s); using local state for %g s",
                type(exc).__name__,
                self.settings.redis_retry,
            )
        self._down_until = now + self.settings.redis_retry

    def _keys_of(self, state: DeploymentState) -> tuple[str, ...]:
        key = (state.group, state.id)
        found = self._keys.get(key)
        if found is None:
            found = self._keys[key] = deployment_keys(self.settings.key_prefix, *key)
        return found

    async def _call(self, script: Any, keys: list[str], args: list[Any]) -> list[Any] | None:
        """One script round trip; None (and degraded) when it failed or took too long."""
        with trio.move_on_after(self.settings.redis_timeout) as scope:
            try:
                self.round_trips += 1
                reply = await script(keys=keys, args=args)
            except Exception as exc:
                self._failed(exc)
                return None
        if scope.cancelled_caught:
            self._failed(TimeoutError("no answer within redis_timeout"))
            return None
        return list(reply)

    async def acquire(
        self,
        group: Group,
        candidates: Sequence[DeploymentState],
        token: str,
        tokens: int,
    ) -> SharedGrant | None:
        """Charge the first candidate with room (one round trip); None: use local state.

        Mirrors every candidate's shared figures and cooldown into its local state.
        """
        if not self.shared:
            return None
        keys: list[str] = []
        args: list[Any] = [
            group.window * 100.0,  # bucket width in ms: a tenth of the window
            math.ceil(self.settings.in_flight_lease * 1000),
            token,
            tokens,
        ]
        for state in candidates:
            keys.extend(self._keys_of(state))
            spec = state.spec
            args.extend((spec.max_in_flight or 0, spec.rpm or 0, spec.tpm or 0))
        reply = await self._call(self._acquire, keys, args)
        if reply is None:
            return None
        now_ms = int(reply[0])
        chosen = int(reply[1])
        local_now = trio.current_time()
        retry_in = math.inf
        for i, state in enumerate(candidates):
            cool, in_flight, rpm, tpm, at = (int(v) for v in reply[3 + 5 * i : 8 + 5 * i])
            if cool > now_ms:
                state.learn_cooling(local_now + (cool - now_ms) / 1000)
            state.shared_in_flight = in_flight
            state.shared_rpm = rpm
            state.shared_tpm = tpm
            if at >= 0:
                retry_in = min(retry_in, max(0.0, (at - now_ms) / 1000))
        return SharedGrant(
            chosen=chosen - 1 if chosen else None, bucket=int(reply[2]), retry_in=retry_in
        )

    async def release(
        self,
        group: Group,
        state: DeploymentState,
        token: str,
        bucket: int,
        correction: int,
        outcome: int,
        delay: float | None,
    ) -> SharedRelease | None:
        """Free the lease, settle tpm, count a failure (one round trip); None: it failed.

        ``outcome``: 0 success, 1 a failure that counts toward cooling, 2 neither.
        """
        if self._client is None:
            return None
        args = [
            token,
            bucket,
            correction,
            group.window * 100.0,
            outcome,
            math.ceil(delay * 1000) if delay else 0,
            group.cooldown_after,
            group.cooldown_window * 100.0,
            math.ceil(group.cooldown * 1000),
            math.ceil(group.max_cooldown * 1000),
        ]
        reply = await self._call(self._release, list(self._keys_of(state)), args)
        if reply is None:
            return None
        now_ms, cool = int(reply[0]), int(reply[1])
        cooling_for = (cool - now_ms) / 1000
        if cooling_for > 0:
            state.learn_cooling(trio.current_time() + cooling_for)
        return SharedRelease(cooling_for=cooling_for)
