"""Prices: each usage chunk's cost in US dollars, to the micro-dollar, wherever it shows.

The expected figures are worked out by hand from genai-prices' data at the
version pyproject.toml pins (0.2.3), so a new version that changes a price
fails here, and upgrading the pin is a decision (docs/operations.md, "Prices").
"""

from __future__ import annotations

import io
import json
import pathlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial

import msgspec
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

import llmrt
from llmrt import GenerateOptions, TokenUsage, UsageChunk
from llmrt.actors._pricing import ModelPrice, Pricer, library_version
from llmrt.actors._statistics import ModelCost, RuntimeStatistics
from llmrt.actors.app.cli import main
from llmrt.actors.app.cli.stats import format_stats
from llmrt.actors.app.config import ConfigError, register_config, validate_config
from llmrt.actors.app.plugins import installed
from llmrt.actors.app.workers._sum import fold_models, merge_values
from llmrt.actors.gateway import GatewayServer, serve_gateway
from llmrt.actors.gateway.client import open_gateway_client
from llmrt.adapters.scripted import ScriptedAdapter, text_script

#: Noon UTC: inside DeepSeek's standard-price hours (00:30-16:30 UTC).
NOON = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
#: Evening UTC: DeepSeek's off-peak hours, at half price.
EVENING = datetime(2026, 11, 2, 20, 0, tzinfo=UTC)


def usage(
    input: int, output: int, *, read: int | None = None, write: int | None = None,
    reasoning: int | None = None,
) -> TokenUsage:  # fmt: skip
    return TokenUsage(
        input_tokens=input,
        output_tokens=output,
        cache_read_tokens=read,
        cache_write_tokens=write,
        reasoning_tokens=reasoning,
    )


#: (case, route, model, genai-prices provider, usage, when, expected USD or None).
#: Rates are US dollars per million tokens, genai-prices 0.2.3.
CALLS = [
    # gpt-4.1: input 2, cached input 0.5, output 8.
    ("cached", "openai", "gpt-4.1", "openai", usage(800, 500, read=200), NOON,
     (800 * 2 + 200 * 0.5 + 500 * 8) / 1e6),
    # o3 since 2025-06-10: input 2, output 8; reasoning is billed as output.
    ("reasoning", "openai", "o3", "openai", usage(1000, 2000, reasoning=1500), NOON,
     (1000 * 2 + 2000 * 8) / 1e6),
    # claude-3-5-haiku: input 0.8, cache write 1, cache read 0.08, output 4.
    ("cache write and read", "anthropic", "claude-3-5-haiku-latest", "anthropic",
     usage(100, 300, read=2000, write=1000), NOON,
     (100 * 0.8 + 1000 * 1 + 2000 * 0.08 + 300 * 4) / 1e6),
    # claude-sonnet-4-5 above 200k input tokens (cached input counts): input 6, read 0.6,
    # output 22.5.
    ("tiered", "anthropic", "claude-sonnet-4-5", "anthropic",
     usage(150_000, 1000, read=60_000), NOON,
     (150_000 * 6 + 60_000 * 0.6 + 1000 * 22.5) / 1e6),
    # deepseek-chat by the hour: 0.27 / 0.07 / 1.1 by day, half that in the evening.
    ("by day", "deepseek", "deepseek-chat", "deepseek", usage(1000, 1000, read=4000), NOON,
     (1000 * 0.27 + 4000 * 0.07 + 1000 * 1.1) / 1e6),
    ("off-peak", "deepseek", "deepseek-chat", "deepseek", usage(1000, 1000, read=4000), EVENING,
     (1000 * 0.135 + 4000 * 0.035 + 1000 * 0.55) / 1e6),
    # gemini-2.5-pro under 200k: input 1.25, output 10 (thinking is output).
    ("gemini reasoning", "gemini", "gemini-2.5-pro", "google", usage(2000, 3000, reasoning=2500),
     NOON, (2000 * 1.25 + 3000 * 10) / 1e6),
    ("unknown model", "openai", "gpt-no-such-model", "openai", usage(10, 10), NOON, None),
    ("no price provider", "local", "gpt-4.1", None, usage(10, 10), NOON, None),
    # The table first: an override of a known model, a model genai-prices has not.
    ("override", "openai", "gpt-4.1-mini", "openai", usage(1000, 1000, read=1000), NOON,
     (1000 * 1 + 1000 * 0.25 + 1000 * 3) / 1e6),
    ("added", "local", "llama3", None, usage(1_000_000, 2_000_000, reasoning=500_000), NOON,
     1.0 * 0.05 + 1.5 * 0.2 + 0.5 * 0.4),
    # Unset cache rates bill cached input as input.
    ("added, no cache rate", "local", "qwen", None, usage(100, 0, read=900, write=1000), NOON,
     2000 * 0.1 / 1e6),
]  # fmt: skip

TABLE = {
    ("openai", "gpt-4.1-mini"): ModelPrice(input_mtok=1, output_mtok=3, cache_read_mtok=0.25),
    ("local", "llama3"): ModelPrice(input_mtok=0.05, output_mtok=0.2, reasoning_mtok=0.4),
    ("local", "qwen"): ModelPrice(input_mtok=0.1, output_mtok=0.1),
}


def test_the_pinned_version_is_the_one_tested() -> None:
    assert library_version() == "0.2.3"


@pytest.mark.parametrize(
    ("route", "model", "provider", "spent", "when", "expected"),
    [case[1:] for case in CALLS],
    ids=[case[0] for case in CALLS],
)
def test_a_table_of_calls_priced_to_the_micro_dollar(
    route: str,
    model: str,
    provider: str | None,
    spent: TokenUsage,
    when: datetime,
    expected: float | None,
) -> None:
    pricer = Pricer(TABLE, now=lambda: when)
    cost = pricer.price(route, model, spent, provider)
    if expected is None:
        assert cost is None
    else:
        assert cost is not None and round(cost, 6) == round(expected, 6)
        assert cost == pytest.approx(expected, rel=1e-12)


def test_the_direct_arithmetic_agrees_with_the_library_on_every_model() -> None:
    # Pricing a call takes the library's prices at the call's time and its own
    # arithmetic where the prices are of the kinds it covers (about 180 us less
    # per call); on every model of the pinned data, at two dates, it prices
    # exactly as the library's calculation does.
    from genai_prices.data_snapshot import get_snapshot

    from llmrt.actors._pricing import _calculated_cost, _direct_cost, _plan_of

    spent = (
        usage(1000, 500),
        usage(800, 500, read=200, write=300, reasoning=100),
        usage(150_000, 1000, read=60_000, write=10),  # past the 200k tiers
    )
    covered = compared = 0
    for provider in get_snapshot().providers:
        for model in provider.models:
            for when in (datetime(2024, 3, 1, 12, tzinfo=UTC), NOON):
                plan = _plan_of(model.get_prices(when))
                compared += 1
                if plan is None:
                    continue
                covered += 1
                for tokens in spent:
                    direct = float(_direct_cost(plan, tokens))
                    assert direct == _calculated_cost(provider, model, tokens, when), (
                        provider.id,
                        model.id,
                        tokens,
                    )
    assert compared > 4000 and covered / compared > 0.9


def test_pricing_never_fetches_prices(monkeypatch: pytest.MonkeyPatch) -> None:
    # genai-prices fetches only through its UpdatePrices (httpx2.get): made to
    # fail here, pricing still works, from the data bundled with the package.
    import httpx2
    from genai_prices import data_snapshot

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a price fetch")

    monkeypatch.setattr(httpx2, "get", refuse)
    pricer = Pricer(now=lambda: NOON)
    assert pricer.price("openai", "gpt-4.1", usage(1000, 0), "openai") == pytest.approx(0.002)
    assert data_snapshot.get_snapshot().from_auto_update is False


def test_without_the_extra_nothing_is_priced_but_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "genai_prices", None)  # as if not installed
    pricer = Pricer(TABLE)
    assert not pricer.library and library_version() is None
    assert pricer.price("openai", "gpt-4.1", usage(10, 10), "openai") is None
    assert pricer.price("local", "qwen", usage(10, 0), None) == pytest.approx(1e-6)


def test_without_the_library_only_the_table_prices() -> None:
    pricer = Pricer(TABLE, library=False)
    assert not pricer.library
    assert pricer.price("openai", "gpt-4.1", usage(10, 10), "openai") is None
    assert pricer.price("local", "qwen", usage(10, 0), None) == pytest.approx(1e-6)


def test_a_new_table_replaces_the_old_and_bad_entries_are_refused() -> None:
    pricer = Pricer(TABLE)
    assert pricer.price("local", "qwen", usage(10, 0), None) is not None
    pricer.set_table({("local", "other"): ModelPrice(input_mtok=1, output_mtok=1)})
    assert pricer.price("local", "qwen", usage(10, 0), None) is None
    with pytest.raises(msgspec.ValidationError):
        pricer.set_table({("local", "m"): ModelPrice(input_mtok=-1, output_mtok=1)})
    with pytest.raises(TypeError):
        pricer.set_table({"local/m": ModelPrice(input_mtok=1, output_mtok=1)})  # type: ignore[dict-item]
    # A refused table changes nothing.
    assert pricer.price("local", "other", usage(10, 0), None) == pytest.approx(1e-5)


def test_a_usage_the_library_refuses_is_no_price_that_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from llmrt.actors import _pricing

    real = _pricing._library_cost
    refusals = iter([ValueError("odd usage"), ValueError("odd usage")])

    def refusing(*args: object) -> float:
        exc = next(refusals, None)
        if exc is not None:
            raise exc
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_pricing, "_library_cost", refusing)
    pricer = Pricer(now=lambda: NOON)
    with caplog.at_level("WARNING", logger="llmrt.actors"):
        assert pricer.price("openai", "gpt-4.1", usage(1000, 0), "openai") is None
        assert pricer.price("openai", "gpt-4.1", usage(1000, 0), "openai") is None
    # Logged once for the model; the next usage it accepts is priced (no lasting miss).
    assert [r.getMessage() for r in caplog.records] == [
        "genai-prices could not price a call of openai/gpt-4.1: odd usage"
    ]
    assert pricer.price("openai", "gpt-4.1", usage(1000, 0), "openai") == pytest.approx(0.002)


def test_more_reasoning_than_output_is_clamped() -> None:
    # More reasoning than output is clamped, never a negative output price.
    cost = Pricer(now=lambda: NOON).price("openai", "o3", usage(0, 10, reasoning=50), "openai")
    assert cost == pytest.approx(10 * 8 / 1e6)


# ---- through the runtime ---------------------------------------------------------------------


def scripted(spent: TokenUsage) -> ScriptedAdapter:
    return ScriptedAdapter(text_script(["hi"], usage=spent), price_providers={"openai": "openai"})


def ask(model: str, provider: str = "openai") -> GenerateOptions:
    return GenerateOptions(provider=provider, model=model, messages=(llmrt.user_message("hi"),))


CACHED = usage(800, 500, read=200)
CACHED_COST = (800 * 2 + 200 * 0.5 + 500 * 8) / 1e6


async def test_the_usage_chunk_carries_the_price_and_statistics_count_it() -> None:
    async with llmrt.open_runtime() as rt:
        await rt.register_adapter(["openai"], scripted(CACHED))
        await rt.register_adapter(["local"], ScriptedAdapter(text_script(["x"])))
        rt.set_prices({("local", "priced"): ModelPrice(input_mtok=1, output_mtok=1)})
        chunks = [chunk async for chunk in _stream(rt, ask("gpt-4.1"))]
        priced = [c for c in chunks if type(c) is UsageChunk]
        assert len(priced) == 1 and priced[0].usage == CACHED
        assert priced[0].cost == pytest.approx(CACHED_COST)
        completion = await rt.complete(ask("gpt-4.1"))
        assert completion.cost == pytest.approx(CACHED_COST)
        unknown = await rt.complete(ask("gpt-no-such-model"))
        assert unknown.usage is not None and unknown.cost is None
        await rt.complete(ask("nothing", provider="local"))
        await rt.complete(ask("priced", provider="local"))
        stats = rt.statistics()
    assert stats.cost_of("openai", "gpt-4.1") == ModelCost(
        provider="openai", model="gpt-4.1", cost_usd=pytest.approx(2 * CACHED_COST), priced_calls=2
    )
    assert stats.cost_of("openai", "gpt-no-such-model") == ModelCost(
        provider="openai", model="gpt-no-such-model", unpriced_calls=1
    )
    entry = stats.cost_of("local", "priced")
    assert entry is not None and entry.priced_calls == 1
    assert entry.cost_usd == pytest.approx((1 + 1) / 1e6)  # scripted: 1 input, 1 output
    assert stats.unpriced_calls == 2
    assert stats.cost_usd == pytest.approx(2 * CACHED_COST + 2e-6)
    assert msgspec.json.decode(msgspec.json.encode(stats), type=RuntimeStatistics) == stats
    # `llmrt stats` says it in one line.
    assert (
        f"cost: ${2 * CACHED_COST + 2e-6:.6f} over 3 priced calls; 2 calls with no known price"
        in format_stats(stats)
    )


async def _stream(rt: llmrt.LlmRuntime, options: GenerateOptions) -> AsyncIterator[object]:
    async with rt.stream(options) as call:
        async for chunk in call:
            yield chunk


def test_workers_sum_costs_and_fold_models_past_the_bound() -> None:
    def one(model: str, cost: float, priced: int, unpriced: int) -> RuntimeStatistics:
        return RuntimeStatistics(
            costs=(
                ModelCost(
                    provider="p",
                    model=model,
                    cost_usd=cost,
                    priced_calls=priced,
                    unpriced_calls=unpriced,
                ),
            )
        )

    summed = merge_values([one("a", 0.25, 1, 0), one("a", 0.5, 2, 1), one("b", 0.0, 0, 3)])
    assert summed.costs == (
        ModelCost(provider="p", model="a", cost_usd=0.75, priced_calls=3, unpriced_calls=1),
        ModelCost(provider="p", model="b", unpriced_calls=3),
    )
    folded = fold_models(summed, {"p": ("b",)})
    assert folded.cost_of("p", "(other)") == ModelCost(
        provider="p", model="(other)", cost_usd=0.75, priced_calls=3, unpriced_calls=1
    )


# ---- the gateway frame and /metrics ----------------------------------------------------------


@asynccontextmanager
async def gateway(rt: llmrt.LlmRuntime) -> AsyncIterator[GatewayServer]:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(partial(serve_gateway, rt))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def test_the_price_crosses_the_gateway_and_shows_on_metrics() -> None:
    with trio.fail_after(30):
        async with llmrt.open_runtime() as rt:
            await rt.register_adapter(["openai"], scripted(CACHED))
            async with gateway(rt) as server, open_gateway_client(server.url) as client:
                async with client.stream(ask("gpt-4.1")) as call:
                    chunks = [chunk async for chunk in call]
                async with client.stream(ask("gpt-no-such-model")) as call:
                    unpriced = [chunk async for chunk in call]
                metrics = server.metrics_text().decode()
    [priced] = [c for c in chunks if type(c) is UsageChunk]
    assert priced.cost == pytest.approx(CACHED_COST)
    # On the wire: the usage chunk's ``cost`` field, absent when no price is known.
    assert json.loads(llmrt.encode(priced))["cost"] == pytest.approx(CACHED_COST)
    [none] = [c for c in unpriced if type(c) is UsageChunk]
    assert none.cost is None and "cost" not in json.loads(llmrt.encode(none))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
    }
    labels = (("model", "gpt-4.1"), ("provider", "openai"))
    assert samples["llmrt_cost_usd_total", labels] == pytest.approx(CACHED_COST)
    assert ("llmrt_unpriced_calls_total", labels) not in samples
    unknown = (("model", "gpt-no-such-model"), ("provider", "openai"))
    assert samples["llmrt_unpriced_calls_total", unknown] == 1
    assert ("llmrt_cost_usd_total", unknown) not in samples


# ---- llmrt.toml and the CLI ------------------------------------------------------------------

DEMO_PRICE = """\
[[provider]]
adapter = "demo"
route = "demo"

[[price]]
provider = "demo"
model = "demo-1"
input_mtok = 1.5
output_mtok = 2.0
"""


def check(text: str) -> llmrt.actors.app.config.Config:
    return validate_config(text, file="llmrt.toml", environ={}, plugins=installed())


def test_the_price_table_in_llmrt_toml() -> None:
    config = check(DEMO_PRICE)
    assert config.prices == {("demo", "demo-1"): ModelPrice(input_mtok=1.5, output_mtok=2.0)}


@pytest.mark.parametrize(
    ("tail", "line", "words"),
    [
        ('provider = "dem"\nmodel = "m"\ninput_mtok = 1\noutput_mtok = 1\n', 6,
         "price for route 'dem', which this configuration does not register "
         "(did you mean 'demo'?)"),
        ('provider = "demo"\nmodel = "m"\ninput_mtok = -1\noutput_mtok = 1\n', 8,
         "Expected `float` >= 0.0 - at `$.price[0].input_mtok`"),
        ('provider = "demo"\nmodel = "m"\ninput_mtok = 1\n', 5,
         "missing required field `output_mtok`"),
        ('provider = "demo"\nmodel = "m"\ninput_mtok = 1\noutput_mtok = 1\ncached_mtok = 1\n', 10,
         "unknown field `cached_mtok`"),
        ('provider = "demo"\nmodel = "demo-1"\ninput_mtok = 1\noutput_mtok = 1\n\n'
         '[[price]]\nprovider = "demo"\nmodel = "demo-1"\ninput_mtok = 2\noutput_mtok = 2\n', 13,
         "model 'demo-1' of route 'demo' is priced twice"),
    ],
    ids=["unknown route", "negative rate", "missing rate", "unknown key", "twice"],
)  # fmt: skip
def test_a_bad_price_table_is_refused_at_its_line(tail: str, line: int, words: str) -> None:
    text = '[[provider]]\nadapter = "demo"\nroute = "demo"\n\n[[price]]\n' + tail
    with pytest.raises(ConfigError) as info:
        check(text)
    assert info.value.line == line and words in str(info.value)
    assert str(info.value).startswith(f"llmrt.toml:{line}:")


async def test_registering_the_config_sets_its_prices() -> None:
    async with llmrt.open_runtime() as rt:
        await register_config(rt, check(DEMO_PRICE))
        assert rt.prices == {("demo", "demo-1"): ModelPrice(input_mtok=1.5, output_mtok=2.0)}
        completion = await rt.complete(ask("demo-1", provider="demo"))
    assert completion.usage is not None and completion.cost is not None
    spent = completion.usage
    expected = (spent.input_tokens * 1.5 + spent.output_tokens * 2.0) / 1e6
    assert round(completion.cost, 6) == round(expected, 6)


def test_the_cli_usage_line_shows_the_price(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "llmrt.toml"
    path.write_text(DEMO_PRICE)
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["call", "hello cli", "--no-color", "--config", str(path)], out=out, err=err, environ={}
    )
    assert code == 0
    [line] = [line for line in err.getvalue().splitlines() if line.startswith("usage:")]
    # The demo counts words: 2 input tokens; output as the usage line says.
    output = int(line.split("output ")[1].split(" ")[0])
    expected = (2 * 1.5 + output * 2.0) / 1e6
    assert f" | ${expected:.6f} | " in line
    # Without a price, no price in the line (never $0).
    plain = io.StringIO()
    assert main(["call", "hello cli", "--no-color"], out=io.StringIO(), err=plain, environ={}) == 0
    assert "$" not in plain.getvalue()
