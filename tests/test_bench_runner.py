"""``python -m bench``: the suite registry, its arguments, plots and README from canned JSON.

No benchmark runs here: the runner is driven with tiny stand-in scripts, and
the plots and README are generated from JSON written by the test. The
raw-trio floor client is checked against the local upstream on loopback.
"""

from __future__ import annotations

import ast
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python -m bench` runs from the repository root
    sys.path.insert(0, str(ROOT))

from bench import _common, _figures, _floor, _readme, _suites  # noqa: E402

runner = importlib.import_module("bench.__main__")

PNG = b"\x89PNG\r\n\x1a\n"


# ---- registry and arguments --------------------------------------------------------------------


def test_every_suite_names_an_existing_script_and_distinct_json() -> None:
    names = [s.name for s in _suites.SUITES]
    assert len(names) == len(set(names))
    for quick in (False, True):
        outputs = [s.json_name(quick) for s in _suites.SUITES]
        assert len(outputs) == len(set(outputs)), outputs
    for suite in _suites.SUITES:
        assert (_suites.HERE / suite.script).is_file(), suite.script


def test_issue_suites_are_all_registered() -> None:
    # The suites the issue names, by the names a user would type.
    for name in ("vocabulary", "sse", "runtime", "http", "abandon", "gateway", "soak", "scale"):
        assert name in _suites.BY_NAME


def _literal(script: str, name: str) -> dict[str, Any]:
    tree = ast.parse((_suites.HERE / script).read_text())
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == name:
            value = ast.literal_eval(node.value)  # type: ignore[arg-type]
            assert isinstance(value, dict)
            return value
    raise AssertionError(f"{script} has no {name} literal")


def test_smoke_sizes_name_only_sizes_the_script_knows() -> None:
    # An unknown key would stop the script (see _common.sized); catch the drift here.
    sized = [s for s in _suites.SUITES if s.quick_sizes is not None]
    assert {s.name for s in sized} >= {"runtime", "http", "soak", "scaleout", "scale"}
    for suite in sized:
        assert suite.quick_sizes is not None
        assert set(suite.quick_sizes) <= set(_literal(suite.script, "QUICK")), suite.name


def test_select_keeps_registry_order_and_resolves_aliases() -> None:
    assert [s.name for s in _suites.select([])] == [s.name for s in _suites.SUITES]
    chosen = _suites.select(["scaleout", "vocabulary", "vocab"])
    assert [s.name for s in chosen] == ["vocab", "scaleout"]
    with pytest.raises(ValueError, match="unknown suite nope"):
        _suites.select(["http", "nope"])


def test_parse_args_and_layout(tmp_path: Path) -> None:
    args = runner.parse_args(["http", "gateway", "--quick"])
    assert args.quick and not args.report_only
    assert [s.name for s in args.selected] == ["http", "gateway"]
    quick = runner.layout(True, None)
    assert quick.results == _suites.HERE / ".quick" / "results"
    assert quick.readme == _suites.HERE / ".quick" / "README.md"
    full = runner.layout(False, None)
    assert full.readme == _suites.HERE / "README.md"
    assert full.plots == _suites.HERE / "plots"
    assert runner.layout(False, tmp_path).results == tmp_path / "results"
    with pytest.raises(SystemExit):
        runner.parse_args(["no-such-suite"])


def test_smoke_run_passes_sizes_and_results_dir(tmp_path: Path) -> None:
    http = _suites.BY_NAME["http"]
    env = http.env(True, tmp_path)
    assert env["LLMRT_BENCH_RESULTS"] == str(tmp_path)
    assert json.loads(env["LLMRT_BENCH_SIZES"]) == http.quick_sizes
    assert "LLMRT_BENCH_SIZES" not in http.env(False, tmp_path)
    assert http.argv(True, tmp_path)[1:] == ["--quick", "--skip", "scale"]
    scale = _suites.BY_NAME["scale"]
    assert scale.argv(False, tmp_path)[1:] == ["--only", "scale"]
    assert scale.json_name(False) == "http-scale.json"
    vocab = _suites.BY_NAME["vocab"].argv(True, tmp_path)
    assert vocab[-1] == f"{tmp_path}/vocab-quick.json"


def test_sized_merges_known_sizes_and_rejects_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = {"calls": 2_000, "runs": 3}
    monkeypatch.delenv("LLMRT_BENCH_SIZES", raising=False)
    assert _common.sized(defaults) == defaults
    monkeypatch.setenv("LLMRT_BENCH_SIZES", '{"calls": 10}')
    assert _common.sized(defaults) == {"calls": 10, "runs": 3}
    monkeypatch.setenv("LLMRT_BENCH_SIZES", '{"cals": 10}')
    with pytest.raises(SystemExit, match="unknown sizes"):
        _common.sized(defaults)


# ---- the runner's verdict: broken workloads only ---------------------------------------------


def _stand_in(tmp_path: Path, name: str, body: str) -> _suites.Suite:
    script = tmp_path / f"{name}.py"
    script.write_text("import json, os, pathlib, sys\n" + body)
    # An absolute script path: Path(HERE) / absolute is the absolute path.
    return _suites.Suite(
        name,
        str(script),
        "stand-in",
        (),
        (),
        f"{name}.json",
        f"{name}-quick.json",
        check=_suites.check_streams,
    )


WRITE = (
    "out = pathlib.Path(os.environ['LLMRT_BENCH_RESULTS']) / '{name}-quick.json'\n"
    "out.write_text(json.dumps({report}))\n"
)


def test_a_missed_target_is_not_a_failure(tmp_path: Path) -> None:
    report = {"targets": {"fast<=1": "MISSED"}, "r": {"errors": 0, "finished": False}}
    suite = _stand_in(tmp_path, "slow", WRITE.format(name="slow", report=repr(report)))
    outcome = runner.run_suite(suite, True, tmp_path, "1/1")
    assert outcome.ok, outcome.broken
    assert outcome.returncode == 0


def test_broken_workloads_fail(tmp_path: Path) -> None:
    crash = _stand_in(tmp_path, "crash", "print('boom'); sys.exit(3)\n")
    outcome = runner.run_suite(crash, True, tmp_path, "1/3")
    assert not outcome.ok and "exit status 3" in outcome.broken[0] and "boom" in outcome.broken[0]

    silent = _stand_in(tmp_path, "silent", "pass\n")
    assert runner.run_suite(silent, True, tmp_path, "2/3").broken == ["wrote no silent-quick.json"]

    report = {"concurrency": {"results": {"llmrt": {"errors": 2, "first_error": "reset"}}}}
    failed = _stand_in(tmp_path, "failed", WRITE.format(name="failed", report=repr(report)))
    broken = runner.run_suite(failed, True, tmp_path, "3/3").broken
    assert broken == ["concurrency.results.llmrt: 2 streams failed (reset)"]


def test_check_streams_flags_wrong_counts_only_for_finished_runs() -> None:
    done_wrong = {"a": {"finished": True, "chunks_ok": False, "errors": 0}}
    cut_short = {"a": {"finished": False, "chunks_ok": False, "errors": 0}}
    assert _suites.check_streams(done_wrong) == ["a: wrong number of chunks"]
    assert _suites.check_streams(cut_short) == []


# ---- plots and README from canned JSON ---------------------------------------------------------


def _summary(cpu: float, rss_before: float, peak: float) -> dict[str, Any]:
    return {
        "cpu_us_per_chunk": cpu,
        "rss_before_mib": rss_before,
        "peak_rss_mib": peak,
        "errors": 0,
        "finished": True,
        "chunks_ok": True,
    }


def canned(results: Path) -> None:
    env = {"python": "3.11.7", "platform": "Linux-test", "nproc": 2, "trio": "0.35.0"}
    http = {
        "environment": {**env, "openai": "3.57.0", "litellm": None},
        "per-chunk": {"per-event": {"results": {"llmrt": {"median_us_per_chunk": 40.0}}}},
        "scaling": {
            "sizes": [{"streams": 100, "delay_s": 0.2}, {"streams": 1000, "delay_s": 1.0}],
            "results": {
                "llmrt": {"100": _summary(120.0, 40, 43), "1000": _summary(130.0, 40, 70)},
                "floor": {"100": _summary(90.0, 38, 40), "1000": _summary(95.0, 38, 56)},
                # cut at its deadline: no comparable point
                "openai": {"100": {**_summary(500.0, 60, 80), "finished": False}},
            },
            "targets": {"llmrt_growth<=1.3x": "MET"},
        },
        "abandon": {
            "results": {
                "llmrt": {"latencies_ms": [0.4, 0.2, 0.9], "streams": 3, "not_closed_in_window": 0},
                "openai": {"latencies_ms": [], "streams": 3, "not_closed_in_window": 3},
            },
            "targets": {"llmrt_every_close<=1ms": "MISSED"},
        },
    }
    runtime = {
        "environment": env,
        "command": "python bench/bench_runtime.py --quick",
        "concurrency": {
            "calls": 500,
            "runtime": {"abort_all": {"demo": {"abort_to_last_finish_ms": 60.0}}},
            "floor": {"cancel_all": {"gc-default": {"cancel_all_to_last_resume_ms": 50.0}}},
        },
    }
    (results / "http-quick.json").write_text(json.dumps(http))
    (results / "runtime-quick.json").write_text(json.dumps(runtime))


def test_series_from_canned_json(tmp_path: Path) -> None:
    canned(tmp_path)
    http = _figures.load(tmp_path / "http-quick.json")
    assert http is not None
    assert _figures.cpu_per_chunk(http) == {
        "llmrt": [(1, 40.0), (100, 120.0), (1000, 130.0)],
        "floor": [(100, 90.0), (1000, 95.0)],
    }
    rss = _figures.rss_per_stream(http)
    assert rss["floor"] == [(100, 2 * 1024 / 100), (1000, 18 * 1024 / 1000)]
    cancel = _figures.cancel_close(http)
    assert cancel["llmrt"]["ms"] == [0.2, 0.4, 0.9]
    assert cancel["openai"]["not_closed"] == 3
    runtime = _figures.load(tmp_path / "runtime-quick.json")
    assert runtime is not None
    demo, stalled = _figures.abort_all(runtime)
    assert demo["ratio"] == pytest.approx(1.2)
    # the floor ran, the runtime's case did not: a row that says so, no ratio
    assert (stalled["runtime_ms"], stalled["floor_ms"], stalled["ratio"]) == (None, 50.0, None)
    assert "openai" not in rss  # cut at its deadline


def test_plots_and_readme_from_canned_json(tmp_path: Path) -> None:
    results, plots, readme = tmp_path / "results", tmp_path / "plots", tmp_path / "README.md"
    results.mkdir()
    canned(results)
    readme.write_text(
        "# Benchmarks\n\nHow we measure: by hand.\n\n## Latest figures\n\nProse kept.\n"
    )
    figures = _figures.draw_all(results, plots, quick=True)
    assert [f.status for f in figures] == ["drawn"] * 5
    for fig in figures:
        assert fig.path.read_bytes().startswith(PNG), fig.path
    by_key = {f.key: f for f in figures}
    assert "LiteLLM (asyncio)" in by_key["cpu"].not_measured
    assert "openai SDK (asyncio)" in by_key["cpu"].not_measured  # cut at its deadline
    assert "LiteLLM (asyncio)" in by_key["cancel"].not_measured
    assert by_key["gateway"].not_measured == ["everything"]  # no gateway JSON at all

    runs = {"http": {"seconds": 3.0, "ok": True, "broken": []}}
    _readme.regenerate(readme, results, plots, figures, True, runs)
    first = readme.read_text()
    assert first.startswith("# Benchmarks\n\nHow we measure: by hand.\n")
    assert first.index(_readme.BEGIN) < first.index("## Latest figures")
    assert first.endswith("Prose kept.\n")
    assert "![Client CPU per chunk vs concurrent streams](plots/cpu_per_chunk.png)" in first
    assert "`http`: abandon.targets: `llmrt_every_close<=1ms` MISSED" in first
    assert "| `http` |" in first and "ok, 3 s" in first
    assert "`python bench/bench_runtime.py --quick`" in first
    assert "| streaming demo calls | 500 | 60.00 | 50.00 | 1.20 |" in first
    assert "Machine: Linux-test, 2 CPUs usable" in first
    assert "openai 3.57.0, litellm not installed." in first

    # A second regeneration replaces the block, keeps the prose, adds nothing.
    runs["http"] = {"seconds": 4.0, "ok": False, "broken": ["exit status 1"]}
    _readme.regenerate(readme, results, plots, figures, True, runs)
    second = readme.read_text()
    assert second.count(_readme.BEGIN) == 1 and second.count(_readme.END) == 1
    assert "**BROKEN** (4 s)" in second and "- `http`: exit status 1" in second
    assert second.endswith("Prose kept.\n")


def test_report_only_with_no_json_draws_not_measured(tmp_path: Path) -> None:
    assert runner.main(["--report-only", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "README.md").read_text()
    assert "Machine: not recorded (no JSON)." in text
    assert "No suite ran in this regeneration (`--report-only`)" in text
    assert "None of the targets recorded in the JSON is missed." in text
    assert (tmp_path / "plots" / "abort_all.png").read_bytes().startswith(PNG)


# ---- the raw-trio floor client -----------------------------------------------------------------


def test_chunked_decoder_is_split_agnostic() -> None:
    body = b"data: one\n\n" * 7 + b"data: [DONE]\n\n"
    wire = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in (body[:5], body[5:40], body[40:]))
    wire += b"0\r\n\r\n"
    for step in (1, 2, 3, 7, len(wire)):
        decoder = _floor._Chunked()
        out = b"".join(decoder.feed(wire[i : i + step]) for i in range(0, len(wire), step))
        assert out == body, step
        assert decoder.done


def test_chunked_decoder_bounds_and_errors() -> None:
    with pytest.raises(_floor.FloorProtocolError, match="chunk size"):
        _floor._Chunked().feed(b"zz\r\n")
    with pytest.raises(_floor.FloorProtocolError, match="too long"):
        _floor._Chunked().feed(b"1" * (_floor.MAX_SIZE_LINE + 1))


async def test_floor_client_streams_from_the_local_upstream() -> None:
    from llmrt.testing import SSEScript, open_upstream, openai_events

    script = SSEScript(openai_events(["Hel", "lo", ", ", "world"]), delay=0.0)
    received = [0]
    body = json.dumps({"stream": True}).encode()
    with trio.fail_after(10):
        async with open_upstream(script) as upstream:
            async with _floor.open_session(upstream.base_url, "sk-test") as session:
                assert await _floor.stream(session, body, None, received) == (4, None)
                count, left = await _floor.stream(session, body, 2, received)
    assert (count, received[0]) == (2, 6)
    assert left is not None


async def test_floor_client_refuses_an_error_status() -> None:
    from llmrt.testing import ErrorScript, open_upstream

    with trio.fail_after(10):
        async with open_upstream(ErrorScript(503, body={"error": "busy"})) as upstream:
            async with _floor.open_session(upstream.base_url, "sk-test") as session:
                with pytest.raises(_floor.FloorProtocolError, match="503"):
                    await _floor.stream(session, b"{}", None, [0])


def test_a_peer_that_fails_streams_is_a_figure_not_a_broken_workload() -> None:
    report = {
        "scaling": {
            "results": {
                "openai": {"5000": {"errors": 99, "first_error": "PoolTimeout"}},
                "llmrt": {"5000": {"errors": 0, "finished": True, "chunks_ok": True}},
            }
        }
    }
    assert _suites.check_streams(report) == []
    report["scaling"]["results"]["llmrt"]["5000"]["errors"] = 1
    assert _suites.check_streams(report) == ["scaling.results.llmrt.5000: 1 streams failed (None)"]
