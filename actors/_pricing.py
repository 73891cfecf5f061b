"""Prices: what one call cost, in US dollars, from the usage its adapter reported.

Two sources, the first that knows the call's (route, model) wins:

1. the price table of the runtime (`LlmRuntime.set_prices`; ``[[price]]``
   in ``llmrt.toml``): exact (route, model) pairs, priced here per million
   tokens;
2. ``genai-prices`` (the ``llmrt[prices]`` extra), under the provider id the
   route's adapter names (`ProviderInfo.price_provider`). Its bundled data
   only: llmrt never asks it to fetch prices over the network, so two
   processes started apart price the same call alike, and a price changes
   when the pinned package does. Its rules apply: tiers by input size,
   prices that change on a date or by the time of day, cache and reasoning
   rates.

A model neither knows has no price: the usage chunk's ``cost`` stays None
(never zero) and the call counts as unpriced in the statistics.

`Pricer.priced` is the one hook, called by the call task for each ``usage``
chunk; it never raises (a price it cannot compute is no price, logged once
per model). Lookups are cached per (route, model), within a bound.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Final, Protocol

import msgspec

from llmrt._chunks import StreamChunk, TokenUsage, UsageChunk
from llmrt._request import GenerateOptions

if TYPE_CHECKING:  # validating llmrt.toml imports this module: no trio behind it
    from ._stats import CallSeries
    from ._topology import Route

__all__ = ["ModelPrice", "PriceTable", "Pricer", "library_version"]

log = logging.getLogger("llmrt.actors")

_Rate = Annotated[float, msgspec.Meta(ge=0)]
#: Lookups kept per pricer; past it the cache starts again (callers choose model names).
_CACHE_BOUND: Final = 4096
_MILLION: Final = Decimal(1_000_000)


class ModelPrice(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One model's price in US dollars per million tokens (a price table's entry).

    ``input_mtok`` prices uncached input; ``cache_read_mtok`` and
    ``cache_write_mtok`` the input read from and written to the provider's
    cache (unset: billed as uncached input); ``reasoning_mtok`` the output
    spent on reasoning (unset: billed as output).
    """

    input_mtok: _Rate
    output_mtok: _Rate
    cache_read_mtok: _Rate | None = None
    cache_write_mtok: _Rate | None = None
    reasoning_mtok: _Rate | None = None

    def cost(self, usage: TokenUsage) -> float:
        """The price of ``usage`` at these rates, in US dollars."""
        total = Decimal(usage.input_tokens) * _dec(self.input_mtok)
        for tokens, rate in (
            (usage.cache_read_tokens, self.cache_read_mtok),
            (usage.cache_write_tokens, self.cache_write_mtok),
        ):
            if tokens:
                total += Decimal(tokens) * _dec(self.input_mtok if rate is None else rate)
        output = usage.output_tokens
        reasoning = min(usage.reasoning_tokens or 0, output)
        if reasoning and self.reasoning_mtok is not None:
            total += Decimal(reasoning) * _dec(self.reasoning_mtok)
            output -= reasoning
        total += Decimal(output) * _dec(self.output_mtok)
        return float(total / _MILLION)


def _dec(rate: float) -> Decimal:
    # The decimal the rate was written as (0.1, not 0.1000000000000000055...).
    return Decimal(repr(rate))


#: (route, model) to its price.
PriceTable = Mapping[tuple[str, str], ModelPrice]


def _load_library() -> Any:
    """genai-prices' bundled snapshot, or None when the extra is not installed."""
    try:
        from genai_prices import data_snapshot
    except ImportError:
        return None
    return data_snapshot


def library_version() -> str | None:
    """The installed genai-prices version (None: not installed)."""
    try:
        import genai_prices
    except ImportError:
        return None
    return str(genai_prices.__version__)


class _Routes(Protocol):
    @property
    def routes(self) -> Mapping[str, Route]: ...


class _Unknown:
    """A cached miss: no source knows the model."""


_UNKNOWN: Final = _Unknown()
_NOT_LOADED: Final = _Unknown()


class Pricer:
    """The runtime's prices: its table, genai-prices, and the lookups made so far."""

    def __init__(
        self,
        table: PriceTable | None = None,
        *,
        library: bool = True,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        #: The wall clock prices are looked up at (genai-prices' prices change by date and hour).
        self._now = now or _utc_now
        self._table: dict[tuple[str, str], ModelPrice] = {}
        #: genai-prices' snapshot module, imported at the first lookup (it brings pydantic).
        self._use_library = library
        self._snapshot: Any = _NOT_LOADED
        self._cache: dict[tuple[str, str, str | None], Any] = {}
        if table:
            self.set_table(table)

    @property
    def library(self) -> bool:
        """Whether genai-prices is installed (and used)."""
        return self._library() is not None

    def _library(self) -> Any:
        if self._snapshot is _NOT_LOADED:
            self._snapshot = _load_library() if self._use_library else None
        return self._snapshot

    @property
    def table(self) -> Mapping[tuple[str, str], ModelPrice]:
        return dict(self._table)

    def set_table(self, table: PriceTable) -> None:
        """Replace the price table: later calls are priced by it (checked first)."""
        checked: dict[tuple[str, str], ModelPrice] = {}
        for key, price in table.items():
            if (
                not isinstance(key, tuple)
                or len(key) != 2
                or not all(isinstance(part, str) and part for part in key)
            ):
                raise TypeError(f"a price table's keys are (route, model) pairs, not {key!r}")
            if not isinstance(price, ModelPrice):
                raise TypeError(f"the price of {key!r} must be a ModelPrice")
            # Constructed in Python, a Struct skips its constraints: check them now.
            msgspec.convert(msgspec.to_builtins(price), ModelPrice)
            checked[key] = price
        self._table = checked
        self._cache = {}

    def price(
        self, route: str, model: str, usage: TokenUsage, price_provider: str | None = None
    ) -> float | None:
        """The price of ``usage`` for ``model`` on ``route``, in US dollars; None: unknown."""
        key = (route, model, price_provider)
        found = self._cache.get(key)
        if found is None:
            found = self._lookup(route, model, price_provider)
            if len(self._cache) >= _CACHE_BOUND:
                self._cache = {}
            self._cache[key] = found
        if found is _UNKNOWN:
            return None
        if type(found) is ModelPrice:
            return found.cost(usage)
        try:
            return _library_cost(found, usage, self._now())
        except Exception as exc:  # the library refused this usage: no price, said once
            self._cache[key] = _UNKNOWN
            log.warning("genai-prices could not price %s/%s: %s", route, model, exc)
            return None

    def _lookup(self, route: str, model: str, price_provider: str | None) -> Any:
        own = self._table.get((route, model))
        if own is not None:
            return own
        snapshot = self._library() if price_provider is not None else None
        if snapshot is None:
            return _UNKNOWN
        try:
            return snapshot.get_snapshot().find_provider_model(model, None, price_provider, None)
        except LookupError:
            return _UNKNOWN

    def priced(
        self, host: _Routes, series: CallSeries, options: GenerateOptions, chunk: StreamChunk
    ) -> StreamChunk:
        """A ``usage`` chunk with the call's price, counted in ``series`` (the call task's hook).

        ``host``: the call's runtime, whose routes name their price provider.
        """
        if type(chunk) is not UsageChunk:
            return chunk
        route = host.routes.get(options.provider)
        price_provider = route.info.price_provider if route is not None else None
        try:
            cost = self.price(options.provider, options.model, chunk.usage, price_provider)
        except Exception:  # never fails a call
            log.exception("pricing a call failed")
            cost = None
        if cost is None:
            cost = chunk.cost  # an adapter's own figure stands where none is known here
        series.priced(cost)
        if cost == chunk.cost:
            return chunk
        return UsageChunk(usage=chunk.usage, cost=cost)


def _utc_now() -> datetime:
    return datetime.now(tz=UTC)


def _library_cost(found: tuple[Any, Any], usage: TokenUsage, when: datetime) -> float:
    """genai-prices' price of ``usage`` (its input counts cached input inside)."""
    from genai_prices import Usage

    provider, model = found
    cache_read = usage.cache_read_tokens or 0
    cache_write = usage.cache_write_tokens or 0
    values: dict[str, int] = {
        "input_tokens": usage.input_tokens + cache_read + cache_write,
        "output_tokens": usage.output_tokens,
    }
    if cache_read:
        values["cache_read_tokens"] = cache_read
    if cache_write:
        values["cache_write_tokens"] = cache_write
    if usage.reasoning_tokens:
        values["output_reasoning_tokens"] = min(usage.reasoning_tokens, usage.output_tokens)
    calculation = model.calc_price(Usage(**values), provider, genai_request_timestamp=when)
    return float(calculation.total_price)
