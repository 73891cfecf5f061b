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
        return _direct_cost(self.plan(), usage)

    def plan(self) -> tuple[int | None, ...]:
        """The rates as `_direct_cost` takes them (an unset rate: the broader count's).

        Rates with more than 12 decimals are rounded to 12 (a millionth of a
        millionth of a dollar per million tokens).
        """
        return tuple(
            None if rate is None else round(_dec(rate).scaleb(_TOKEN_EXP))
            for rate in (
                self.input_mtok,
                self.output_mtok,
                self.cache_read_mtok,
                self.cache_write_mtok,
                self.reasoning_mtok,
                None,
            )
        )


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


class _Own:
    """A cached hit in the price table: its rates, ready for `_direct_cost`."""

    __slots__ = ("plan",)

    def __init__(self, price: ModelPrice) -> None:
        self.plan = price.plan()


_UNKNOWN: Final = _Unknown()
_NOT_LOADED: Final = _Unknown()
_NOT_EXACT: Final = _Unknown()


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
        #: The (route, model, price provider) keys a refusal was logged for.
        self._warned: set[tuple[str, str, str | None]] = set()
        #: Plans by the identity of the genai-prices ``ModelPrice`` they came from (kept with it).
        self._plans: dict[int, tuple[Any, tuple[Any, ...] | None]] = {}
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
        if type(found) is _Own:
            return _direct_cost(found.plan, usage)
        try:
            return _library_cost(found, usage, self._now(), self._plans)
        except Exception as exc:  # the library refused this usage: no price, said once a model
            if key not in self._warned:
                if len(self._warned) >= _CACHE_BOUND:
                    self._warned.clear()
                self._warned.add(key)
                log.warning("genai-prices could not price a call of %s/%s: %s", route, model, exc)
            return None

    def _lookup(self, route: str, model: str, price_provider: str | None) -> Any:
        own = self._table.get((route, model))
        if own is not None:
            return _Own(own)
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


def _library_cost(
    found: tuple[Any, Any],
    usage: TokenUsage,
    when: datetime,
    plans: dict[int, tuple[Any, tuple[Any, ...] | None]],
) -> float:
    """genai-prices' price of ``usage`` (its input counts cached input inside).

    The model's prices at ``when`` are the library's (dates, hours of the
    day); the arithmetic is `_direct_cost` where the prices are of the kinds
    it covers, else the library's own (``tests/test_prices.py`` checks the
    two agree on every model of the pinned data). ``plans``: the pricer's
    memo of the plans made so far.
    """
    provider, model = found
    prices = model.get_prices(when)
    kept = plans.get(id(prices))
    if kept is None or kept[0] is not prices:
        if len(plans) >= _CACHE_BOUND:
            plans.clear()
        kept = plans[id(prices)] = (prices, _plan_of(prices))
    plan = kept[1]
    if plan is not None:
        return _direct_cost(plan, usage)
    return _calculated_cost(provider, model, usage, when)


#: The rates a plan holds, in its order (`_plan_of`).
_PLAN_KEYS: Final = (
    "input_mtok",
    "output_mtok",
    "cache_read_mtok",
    "cache_write_mtok",
    "output_reasoning_mtok",
    "requests_kcount",
)
#: The price keys `_direct_cost` covers: llmrt's five token counts, the fee per
#: request, and the keys of usage llmrt never reports (tool calls, the cache
#: writes by time to live): their counts are 0, so they add nothing and take
#: nothing from the counts they are part of.
_DIRECT_KEYS: Final = frozenset(_PLAN_KEYS) | frozenset(
    {
        "cache_write_5m_mtok",
        "cache_write_1h_mtok",
        "web_searches_kcount",
        "social_searches_kcount",
        "storage_searches_kcount",
        "code_executions_kcount",
    }
)


def _plan_of(prices: Any) -> tuple[Any, ...] | None:
    """(input, output, cache read, cache write, reasoning, per request) rates as `_scaled`
    makes them; None: prices `_direct_cost` does not cover."""
    given = {key for key, value in vars(prices).items() if value is not None}
    if not given <= _DIRECT_KEYS:
        return None
    plan = []
    for key in _PLAN_KEYS:
        price = vars(prices).get(key)
        rate = (
            None
            if price is None
            else _scaled(price, _REQUEST_EXP if key == "requests_kcount" else _TOKEN_EXP)
        )
        if rate is _NOT_EXACT:
            return None
        plan.append(rate)
    return tuple(plan)


#: Sums are whole units of 10^-18 dollars: a rate per million tokens times
#: 10^12 times a count, or a rate per thousand requests times 10^15.
_TOKEN_EXP: Final = 12
_REQUEST_EXP: Final = 15
_UNIT: Final = 10**18


def _scaled(price: Any, exp: int) -> Any:
    """``price`` (a decimal, or tiers of them) in whole units; `_NOT_EXACT`: more digits."""
    if isinstance(price, Decimal):
        value = price.scaleb(exp)
        return int(value) if value == value.to_integral_value() else _NOT_EXACT
    base = _scaled(price.base, exp)
    tiers = [(tier.start, _scaled(tier.price, exp)) for tier in reversed(price.tiers)]
    if base is _NOT_EXACT or any(rate is _NOT_EXACT for _, rate in tiers):
        return _NOT_EXACT
    return (base, tuple(tiers))


def _rate(rate: Any, total_input: int) -> int:
    """A scaled rate; if tiered, the tier the call's whole input (cached included) reaches."""
    if type(rate) is int:
        return rate
    for start, tier in rate[1]:  # highest tier first
        if total_input > start:
            return tier  # type: ignore[no-any-return]
    return rate[0]  # type: ignore[no-any-return]


def _direct_cost(plan: tuple[Any, ...], usage: TokenUsage) -> float:
    """genai-prices' arithmetic for llmrt's counts: each priced count is the tokens of
    its kind not counted by a more specific priced kind (cache reads and writes
    out of input, reasoning out of output), at its rate.

    In whole units (integers): exact, as the library's decimals are, and one
    correctly rounded division makes the float it would make.
    """
    input_rate, output_rate, read_rate, write_rate, reasoning_rate, request_rate = plan
    read = usage.cache_read_tokens or 0
    write = usage.cache_write_tokens or 0
    total_input = usage.input_tokens + read + write
    reasoning = min(usage.reasoning_tokens or 0, usage.output_tokens)
    leaf_input = total_input
    leaf_output = usage.output_tokens
    total = 0
    if read_rate is not None:
        leaf_input -= read
        total += _rate(read_rate, total_input) * read
    if write_rate is not None:
        leaf_input -= write
        total += _rate(write_rate, total_input) * write
    if reasoning_rate is not None:
        leaf_output -= reasoning
        total += _rate(reasoning_rate, total_input) * reasoning
    if input_rate is not None:
        total += _rate(input_rate, total_input) * leaf_input
    if output_rate is not None:
        total += _rate(output_rate, total_input) * leaf_output
    if request_rate is not None:
        total += _rate(request_rate, total_input)
    return total / _UNIT


def _calculated_cost(provider: Any, model: Any, usage: TokenUsage, when: datetime) -> float:
    """The library's own calculation (every kind of price it knows; about 180 us)."""
    from genai_prices import Usage

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
