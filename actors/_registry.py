"""The registry actor: owns routes, the configurable-provider directory and discovery offers.

Its task (`Registry.run`) owns a trio memory channel of typed commands
(`Register`, `Replace`, `Dispose`, `SetDirectory`, `SetOffer`), each with
a one-slot `Reply`, and applies them in the order they arrive. Applying
one validates the whole candidate set first, then swaps in a new
immutable `Topology` (no reader ever sees half a change) and notifies
`adapters_updated` subscribers without ever waiting for them. Readers
(every call's route lookup) read `Registry.topology`, the published
snapshot, and never wait on the actor.

The actor also owns the lifetime of the registration actors: they run in
its nursery and are drained when it ends. Each is given the registry's
`services` (in a runtime: the runtime's nursery and its watchdog's
deadline heap, so adapters' transports and the idle watchdog share one
lazy heap). Nothing it applies waits on anything slow: a disposed
registration's drain, and closing a withdrawn discovery, are awaited by
the caller after its reply.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import attrs
import msgspec
import outcome
import trio

from llmrt._adapter import Adapter
from llmrt._deadlines import RuntimeServices
from llmrt._errors import ErrorCode, LlmError
from llmrt._helpers import revalidated
from llmrt._request import ConfigurableProvider, ProviderInfo
from llmrt._retry import (
    AlwaysRetryPolicy,
    NormalRetryPolicy,
    ResolvedRetryPolicy,
    default_retry_policy,
)

from ._registration import Registration
from ._topology import EMPTY_TOPOLOGY, Discover, Route, Topology, check_provider_name

__all__ = ["Registry", "RegistrationHandle", "DirectoryHandle", "DiscoveryHandle"]

log = logging.getLogger("llmrt.actors")

#: How long calls of a disposed registration may run on before they are aborted.
DEFAULT_DRAIN_TIMEOUT = 30.0
#: Bound on closing a withdrawn model discovery (its kept connections).
_CLOSE_DISCOVERY = 5.0

_policy_decoder: msgspec.json.Decoder[ResolvedRetryPolicy] = msgspec.json.Decoder(
    ResolvedRetryPolicy
)


#: Commands waiting for the registry's task; a sender past this waits for room.
_COMMAND_BUFFER = 64
_CLOSED = "the runtime is closed"


class Reply:
    """The one-slot reply to a command: set once by the registry's task, awaited by the sender."""

    __slots__ = ("_event", "_outcome")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._outcome: outcome.Outcome[Any] | None = None

    def set(self, result: outcome.Outcome[Any]) -> None:
        if self._outcome is None:
            self._outcome = result
            self._event.set()

    async def wait(self) -> Any:
        """The command's result, or its exception raised here.

        Shielded: once a command is in the mailbox it is applied whatever
        happens to its sender, so the sender learns the result rather than
        leaving a commit it never saw (a registration whose handle is lost).
        """
        with trio.CancelScope(shield=True):
            await self._event.wait()
        assert self._outcome is not None
        return self._outcome.unwrap()


@attrs.frozen
class Register:
    """Add a registration serving ``providers``; replies with its `RegistrationHandle`."""

    providers: Sequence[str]
    adapter: Adapter
    idle_timeout: float
    reply: Reply = attrs.field(factory=Reply)


@attrs.frozen
class Replace:
    """Swap a registration's routes for ``providers``; replies None."""

    registration: Registration
    providers: Sequence[str]
    reply: Reply = attrs.field(factory=Reply)


@attrs.frozen
class Dispose:
    """Withdraw a registration's routes and start its drain; replies None (then wait `closed`)."""

    registration: Registration
    drain_timeout: float | None
    reply: Reply = attrs.field(factory=Reply)


@attrs.frozen
class SetDirectory:
    """Declare, replace (``entries``) or withdraw (None) one owner's configurable providers."""

    owner: object
    entries: Sequence[ConfigurableProvider] | None
    new: bool
    reply: Reply = attrs.field(factory=Reply)


@attrs.frozen
class SetOffer:
    """Offer (``discover``) or withdraw (None) a model discovery; replies the withdrawn one."""

    settings_ns: str
    owner: object
    discover: Discover | None
    reply: Reply = attrs.field(factory=Reply)


Command = Register | Replace | Dispose | SetDirectory | SetOffer


@attrs.define(eq=False)
class Registry:
    """The registry actor. Each change is a command: it commits, or raises and changes nothing.

    The change methods (`register`, `replace`, ...) send their command and
    await its reply; `topology` is the published snapshot every reader uses.
    """

    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    #: What every registration lends its adapter (None: each registration starts its own).
    services: RuntimeServices | None = attrs.field(default=None, kw_only=True)
    topology: Topology = attrs.field(default=EMPTY_TOPOLOGY, init=False)
    #: Subscriber receive end -> the send end the registry notifies through.
    _subscribers: dict[trio.MemoryReceiveChannel[None], trio.MemorySendChannel[None]] = attrs.field(
        factory=dict, init=False
    )
    #: Set by `close` (or when the actor ends): changes are refused from then on.
    _closing: trio.Event = attrs.field(factory=trio.Event, init=False)
    _mailbox: trio.MemorySendChannel[Command] = attrs.field(init=False)
    _inbox: trio.MemoryReceiveChannel[Command] = attrs.field(init=False)
    # ---- the actor's own state: read and written by its task only ----
    _registrations: dict[Registration, tuple[str, ...]] = attrs.field(factory=dict, init=False)
    _directory: dict[object, tuple[ConfigurableProvider, ...]] = attrs.field(
        factory=dict, init=False
    )
    _offers: dict[str, object] = attrs.field(factory=dict, init=False)
    _discover: dict[str, Discover] = attrs.field(factory=dict, init=False)
    _ids: itertools.count[int] = attrs.field(factory=itertools.count, init=False)

    def __attrs_post_init__(self) -> None:
        self._mailbox, self._inbox = trio.open_memory_channel[Command](_COMMAND_BUFFER)

    # ---- the actor -----------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Apply commands in order until `close` (or cancellation), hosting the registrations.

        Leaving drains every registration at once and closes its adapter;
        commands still waiting are refused (``ClosedResourceError``).
        """
        async with trio.open_nursery() as nursery:
            task_status.started()
            try:
                async for command in self._inbox:
                    try:
                        result = await self._apply(command, nursery)
                    except Exception as exc:
                        command.reply.set(outcome.Error(exc))
                    except BaseException:
                        # Cancelled mid-command: its sender still gets an answer.
                        command.reply.set(outcome.Error(trio.ClosedResourceError(_CLOSED)))
                        raise
                    else:
                        command.reply.set(outcome.Value(result))
            finally:
                self._closing.set()  # cancelled: refuse changes from now on too
                self._mailbox.close()
                self._refuse_waiting()
                self._inbox.close()
                await self._wind_down()

    def _refuse_waiting(self) -> None:
        while True:
            try:
                command = self._inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            if type(command) is Dispose:
                command.reply.set(outcome.Value(None))  # the wind-down drains it
            else:
                command.reply.set(outcome.Error(trio.ClosedResourceError(_CLOSED)))

    async def _wind_down(self) -> None:
        for registration in list(self._registrations):
            registration.drain(0)
        self._registrations.clear()
        offers = list(self._discover.values())
        self._offers.clear()
        self._discover.clear()
        self._publish(routes={})
        for discover in offers:
            await close_discovery(discover)
        # Nothing will change any more: end every subscriber's ``async for``.
        for send in self._subscribers.values():
            send.close()
        self._subscribers.clear()

    async def _apply(self, command: Command, nursery: trio.Nursery) -> object:
        """One command, in the registry's task: validate, commit, publish."""
        if isinstance(command, Register):
            return await self._register(command, nursery)
        if isinstance(command, Replace):
            self._replace(command)
        elif isinstance(command, Dispose):
            self._dispose(command)
        elif isinstance(command, SetDirectory):
            self._set_directory(command)
        else:
            return self._set_offer(command)
        return None

    async def _send(self, command: Command) -> Any:
        """Hand ``command`` to the actor and wait for its reply (a checkpoint either way)."""
        if self._closing.is_set():
            await trio.lowlevel.checkpoint()
            raise trio.ClosedResourceError(_CLOSED)
        try:
            await self._mailbox.send(command)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise trio.ClosedResourceError(_CLOSED) from None
        return await command.reply.wait()

    def close(self) -> None:
        """Stop taking changes; the actor drains every registration and ends."""
        self._closing.set()
        self._mailbox.close()

    # ---- subscriptions -------------------------------------------------------------------

    def subscribe(self) -> trio.MemoryReceiveChannel[None]:
        """A new subscription: one pending wake-up at most (buffer of one)."""
        send, recv = trio.open_memory_channel[None](1)
        self._subscribers[recv] = send
        return recv

    def unsubscribe(self, recv: trio.MemoryReceiveChannel[None]) -> None:
        """Forget a subscription (idempotent); its receive end sees end-of-channel."""
        send = self._subscribers.pop(recv, None)
        if send is not None:
            send.close()

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def _notify(self) -> None:
        for recv, send in list(self._subscribers.items()):
            try:
                send.send_nowait(None)
            except trio.WouldBlock:
                pass  # a notification is already pending: payload-free, so coalesced
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                # The subscriber closed its end without leaving the subscription.
                self._subscribers.pop(recv, None)

    def _publish(self, *, routes: dict[str, Route] | None = None) -> None:
        old = self.topology
        directory = tuple(entry for entries in self._directory.values() for entry in entries)
        self.topology = Topology(
            version=old.version + 1,
            routes=old.routes if routes is None else MappingProxyType(routes),
            configurable=directory,
            discovery=MappingProxyType(dict(self._discover)),
            registration_count=len(self._registrations),
        )
        self._notify()

    # ---- adapter registrations -----------------------------------------------------------

    def _routes_for(
        self, registration: Registration, providers: Sequence[str], *, allow_empty: bool
    ) -> dict[str, Route]:
        """Validate a candidate route set for ``registration``; the new route map."""
        if isinstance(providers, str) or not isinstance(providers, Sequence):
            raise LlmError(ErrorCode.INVALID_PROVIDER, "providers must be a list of route names")
        if not providers and not allow_empty:
            raise LlmError(
                ErrorCode.INVALID_PROVIDER, "register_adapter needs at least one provider route"
            )
        seen: set[str] = set()
        for name in providers:
            problem = check_provider_name(name)
            if problem:
                raise LlmError(ErrorCode.INVALID_PROVIDER, problem)
            if name in seen:
                raise LlmError(ErrorCode.INVALID_PROVIDER, f"provider {name!r} is listed twice")
            seen.add(name)
            current = self.topology.routes.get(name)
            if current is not None and current.registration is not registration:
                raise LlmError(
                    ErrorCode.DUPLICATE_ADAPTER,
                    f"provider {name!r} is already served by another adapter",
                )
        new_routes: dict[str, Route] = {}
        for name in providers:
            new_routes[name] = Route(
                provider=name,
                info=_provider_info(registration.adapter, name),
                registration=registration,
                retry_policy=_retry_policy(registration.adapter, name),
                idle_timeout=registration.idle_timeout,
            )
        # Registration order: surviving routes keep their place, new ones go last.
        merged: dict[str, Route] = {}
        for name, route in self.topology.routes.items():
            if route.registration is not registration:
                merged[name] = route
            elif name in new_routes:
                merged[name] = new_routes[name]
        for name in providers:
            merged.setdefault(name, new_routes[name])
        return merged

    async def register(
        self, providers: Sequence[str], adapter: Adapter, idle_timeout: float
    ) -> RegistrationHandle:
        if not isinstance(adapter, Adapter):
            raise TypeError(f"adapter must be an llmrt.Adapter, not {type(adapter).__name__}")
        handle: RegistrationHandle = await self._send(Register(providers, adapter, idle_timeout))
        return handle

    async def _register(self, command: Register, nursery: trio.Nursery) -> RegistrationHandle:
        adapter = command.adapter
        for registration in self._registrations:
            if registration.adapter is adapter:
                raise LlmError(
                    ErrorCode.DUPLICATE_ADAPTER,
                    "this adapter instance is already registered; use its handle's replace()",
                )
        registration = Registration(
            adapter=adapter,
            id=next(self._ids),
            idle_timeout=command.idle_timeout,
            services=self.services,
        )
        routes = self._routes_for(registration, command.providers, allow_empty=False)
        self._registrations[registration] = tuple(command.providers)
        self._publish(routes=routes)
        # Its actor runs before the handle exists. Shielded: an actor whose start
        # was cancelled would close the adapter of a published route. It starts at once.
        with trio.CancelScope(shield=True):
            await nursery.start(registration.run)
        return RegistrationHandle(self, registration)

    async def replace(self, registration: Registration, providers: Sequence[str]) -> None:
        await self._send(Replace(registration, providers))

    def _replace(self, command: Replace) -> None:
        registration = command.registration
        if registration not in self._registrations:
            raise LlmError(
                ErrorCode.REGISTRATION_DISPOSED, "this adapter registration was disposed"
            )
        routes = self._routes_for(registration, command.providers, allow_empty=True)
        self._registrations[registration] = tuple(command.providers)
        self._publish(routes=routes)

    async def dispose(self, registration: Registration, drain_timeout: float | None) -> None:
        # A closed runtime drains every registration already.
        with contextlib.suppress(trio.ClosedResourceError):
            await self._send(Dispose(registration, drain_timeout))
        await registration.closed.wait()

    def _dispose(self, command: Dispose) -> None:
        registration = command.registration
        if registration not in self._registrations:
            return  # disposed already: the caller waits for it to close
        del self._registrations[registration]
        routes = {
            name: route
            for name, route in self.topology.routes.items()
            if route.registration is not registration
        }
        self._publish(routes=routes)
        timeout = command.drain_timeout
        registration.drain(self.drain_timeout if timeout is None else timeout)

    @property
    def registration_count(self) -> int:
        return self.topology.registration_count

    # ---- configurable-provider directory and discovery offers ----------------------------

    def _check_entries(self, owner: object, entries: Sequence[ConfigurableProvider]) -> None:
        if isinstance(entries, str | bytes) or not isinstance(entries, Sequence) or not entries:
            raise LlmError(
                ErrorCode.INVALID_PROVIDER, "configurable providers must be a non-empty list"
            )
        seen: set[str] = set()
        for entry in entries:
            if not isinstance(entry, ConfigurableProvider):
                raise LlmError(
                    ErrorCode.INVALID_PROVIDER,
                    f"expected a ConfigurableProvider, not {type(entry).__name__}",
                )
            problem = check_provider_name(entry.provider)
            if problem:
                raise LlmError(ErrorCode.INVALID_PROVIDER, problem)
            if not entry.settings_ns:
                raise LlmError(
                    ErrorCode.INVALID_PROVIDER, f"provider {entry.provider!r} needs a settings_ns"
                )
            if entry.provider in seen:
                raise LlmError(
                    ErrorCode.INVALID_PROVIDER, f"provider {entry.provider!r} is listed twice"
                )
            seen.add(entry.provider)
        for other, declared in self._directory.items():
            if other is owner:
                continue
            for entry in declared:
                if entry.provider in seen:
                    raise LlmError(
                        ErrorCode.DUPLICATE_ADAPTER,
                        f"provider {entry.provider!r} is already declared as configurable",
                    )

    async def set_directory(
        self, owner: object, entries: Sequence[ConfigurableProvider] | None, *, new: bool
    ) -> None:
        await self._send(SetDirectory(owner, entries, new))

    def _set_directory(self, command: SetDirectory) -> None:
        owner, entries = command.owner, command.entries
        if entries is None:
            if self._directory.pop(owner, None) is not None:
                self._publish()
            return
        if not command.new and owner not in self._directory:
            raise LlmError(
                ErrorCode.REGISTRATION_DISPOSED, "this directory registration was withdrawn"
            )
        self._check_entries(owner, entries)
        self._directory[owner] = tuple(entries)
        self._publish()

    async def set_offer(self, settings_ns: str, owner: object, discover: Discover | None) -> None:
        withdrawn: Discover | None = await self._send(SetOffer(settings_ns, owner, discover))
        if withdrawn is not None:
            await close_discovery(withdrawn)

    def _set_offer(self, command: SetOffer) -> Discover | None:
        settings_ns, owner, discover = command.settings_ns, command.owner, command.discover
        if discover is None:
            if self._offers.get(settings_ns) is owner:
                del self._offers[settings_ns]
                withdrawn = self._discover.pop(settings_ns)
                self._publish()
                return withdrawn
            return None
        if not isinstance(settings_ns, str) or not settings_ns:
            raise LlmError(ErrorCode.INVALID_PROVIDER, "settings_ns must be a non-empty string")
        if settings_ns in self._offers:
            raise LlmError(
                ErrorCode.DUPLICATE_ADAPTER,
                f"settings namespace {settings_ns!r} already has a model discovery",
            )
        self._offers[settings_ns] = owner
        self._discover[settings_ns] = discover
        self._publish()
        return None

    def discover_for(self, settings_ns: str) -> Discover | None:
        """The discovery offered for ``settings_ns`` in the published topology."""
        return self.topology.discovery.get(settings_ns)


async def close_discovery(discover: Discover) -> None:
    """Close a withdrawn discovery that holds resources (an ``aclose`` method), as an adapter is.

    Bounded by `_CLOSE_DISCOVERY` and shielded; a failure is logged, not raised.
    """
    aclose = getattr(discover, "aclose", None)
    if aclose is None:
        return
    with trio.move_on_after(_CLOSE_DISCOVERY, shield=True):
        try:
            await aclose()
        except Exception:
            log.exception("closing a model discovery failed")


def _provider_info(adapter: Adapter, provider: str) -> ProviderInfo:
    try:
        info = adapter.provider_info(provider)
    except Exception as exc:
        raise LlmError(
            ErrorCode.INVALID_PROVIDER,
            f"provider {provider!r}: provider_info() raised {type(exc).__name__}: {exc}",
        ) from exc
    if not isinstance(info, ProviderInfo) or info.id != provider:
        raise LlmError(
            ErrorCode.INVALID_PROVIDER,
            f"provider {provider!r}: provider_info() must return a ProviderInfo with id "
            f"{provider!r}, got {info!r}",
        )
    return info


def _retry_policy(adapter: Adapter, provider: str) -> ResolvedRetryPolicy:
    try:
        policy = adapter.provider_retry_policy(provider)
    except Exception as exc:
        raise LlmError(
            ErrorCode.INVALID_PROVIDER,
            f"provider {provider!r}: provider_retry_policy() raised {type(exc).__name__}: {exc}",
        ) from exc
    if policy is None:
        return default_retry_policy()
    if not isinstance(policy, NormalRetryPolicy | AlwaysRetryPolicy):
        raise LlmError(
            ErrorCode.INVALID_PROVIDER,
            f"provider {provider!r}: provider_retry_policy() must return a NormalRetryPolicy, "
            f"an AlwaysRetryPolicy or None, not {type(policy).__name__}",
        )
    try:
        # A round trip validates the constraints a constructor does not check, and
        # detaches the value from anything the adapter holds.
        return revalidated(_policy_decoder, policy)
    except msgspec.ValidationError as exc:
        raise LlmError(
            ErrorCode.INVALID_PROVIDER, f"provider {provider!r}: invalid retry policy: {exc}"
        ) from None


@attrs.define(eq=False)
class RegistrationHandle:
    """What `LlmRuntime.register_adapter` returns: disposes the registration, replaces routes."""

    _registry: Registry
    _registration: Registration

    @property
    def adapter(self) -> Adapter:
        return self._registration.adapter

    async def replace(self, providers: Sequence[str]) -> None:
        """Swap this registration's routes for ``providers`` atomically (an empty list is allowed).

        Raises `LlmError`: ``INVALID_PROVIDER``, ``DUPLICATE_ADAPTER`` (the current
        routes stay untouched), or ``REGISTRATION_DISPOSED`` after `dispose`.
        """
        await self._registry.replace(self._registration, providers)

    async def dispose(self, *, drain_timeout: float | None = None) -> None:
        """Remove every route at once, let running calls finish, then close the adapter.

        Running calls get ``drain_timeout`` seconds (the runtime's default when
        None), then are aborted. Returns when the adapter is closed. Idempotent.
        Raises `ValueError` (and changes nothing) for a negative or NaN timeout.
        """
        if drain_timeout is not None and (
            not isinstance(drain_timeout, int | float) or not drain_timeout >= 0
        ):
            # Checked here: the registration actor would otherwise fail on it and
            # take the whole runtime down.
            raise ValueError(f"drain_timeout must be >= 0 seconds, got {drain_timeout!r}")
        await self._registry.dispose(self._registration, drain_timeout)


@attrs.define(eq=False)
class DirectoryHandle:
    """Withdraws or replaces one `register_configurable_providers` declaration."""

    _registry: Registry

    async def replace(self, entries: Sequence[ConfigurableProvider]) -> None:
        await self._registry.set_directory(self, entries, new=False)

    async def dispose(self) -> None:
        await self._registry.set_directory(self, None, new=False)


@attrs.define(eq=False)
class DiscoveryHandle:
    """Withdraws one `register_model_discovery` offer."""

    _registry: Registry
    _settings_ns: str

    async def dispose(self) -> None:
        await self._registry.set_offer(self._settings_ns, self, None)
