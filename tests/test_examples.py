"""Every example in README.md and docs/ runs as printed.

tests/_doc_examples.py says what an example is and what a block may need;
tests/_doc_commands.py how commands run. Each example runs as real processes
in a temporary directory: a ``python`` block as a program (which must use
every function it defines: one that only defines tests or a ``main`` runs
nothing), a ``toml`` block through ``load_config``, ``sh`` and ``console``
commands through ``bash``, each with the setup its ``needs:`` names.

The programs run in processes forked from one warm interpreter
(tests/_warm_python.py): each its own ``__main__``, with a new namespace,
but the interpreter's start and the SDKs' imports paid once for the module.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from xml.etree import ElementTree

import attrs
import pytest
from _doc_commands import (
    REPO,
    TIMEOUT,
    Background,
    Env,
    clean_env,
    passed,
    run,
    run_steps,
    shims,
    steps,
)
from _doc_examples import DocError, Example, collect, parse, program, unused_functions
from _warm_python import WarmPython

from llmrt.actors.app.config import load_config

EXAMPLES, PROBLEMS = collect(REPO)


def test_the_pages_can_be_read() -> None:
    assert PROBLEMS == []
    # Every page's kinds of example are seen (a regression in the reader would empty the list).
    assert {e.lang for e in EXAMPLES} == {"python", "toml", "sh", "console"}


@pytest.fixture
def plain(tmp_path: Path) -> Env:
    cwd = tmp_path / "run"
    cwd.mkdir()
    return Env(cwd, clean_env(shims(tmp_path / "bin", sys.executable)))


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmPython]:
    """The module's python blocks' interpreter (tests/_warm_python.py)."""
    tmp = tmp_path_factory.mktemp("warm")
    python = WarmPython(clean_env(tmp), tmp)
    try:
        yield python
    finally:
        python.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One ``llmrt serve`` on the demo for the module's ``needs: gateway`` examples."""
    tmp = tmp_path_factory.mktemp("gateway")
    served = Background.start(
        "llmrt serve --port 0", Env(tmp, clean_env(shims(tmp, sys.executable)))
    )
    try:
        yield served.address()
    finally:
        served.stop()


# ---- the setups --------------------------------------------------------------------------------


def imported(code: str) -> set[str]:
    """The top-level packages a program imports (``import a.b``, ``from a import b``: ``a``)."""
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.partition(".")[0])
    return found


def run_python(example: Example, where: Env, warm: WarmPython) -> None:
    # A program that only defines functions (tests without ``needs: pytest``, a
    # ``main`` never run) would pass without running anything.
    unused = unused_functions(example.code)
    assert unused == [], f"{example.id} defines and never runs {unused}"
    path = where.cwd / (Path(example.doc).name + ".py")
    path.write_text(program(example, where.address), encoding="utf-8")
    assert where.python == sys.executable, "a python block runs in this environment's python"
    ran = warm.run(
        path, cwd=where.cwd, env=where.env, imports=imported(example.code), timeout=TIMEOUT
    )
    passed(ran)


def page_file(example: Example, name: str) -> Example:
    """The page's ``# NAME`` block that goes with ``example``."""
    found = [e for e in EXAMPLES if e.doc == example.doc and e.file_name == name]
    assert found, f"{example.doc} has no `# {name}` block for its example at line {example.line}"
    return found[0]


@attrs.frozen
class PytestRun:
    """One pytest run of a page's test blocks, each its own module: what each module did."""

    output: str
    outcomes: dict[str, list[str]]  # module name -> "passed" or the failure, per test


def _pytest_page(doc: str, tmp: Path) -> PytestRun:
    blocks = [e for e in EXAMPLES if e.doc == doc and "pytest" in e.needs]
    pyproject = page_file(blocks[0], "pyproject.toml")
    (tmp / "pyproject.toml").write_text(pyproject.code, encoding="utf-8")
    for block in blocks:
        (tmp / f"{_module(block)}.py").write_text(program(block), encoding="utf-8")
    where = Env(tmp, clean_env(shims(tmp / "bin", sys.executable)))
    # One process for the page: a pytest start costs more than most of its tests.
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=run.xml"]
    result = run(argv, where)
    outcomes: dict[str, list[str]] = {}
    for case in ElementTree.parse(tmp / "run.xml").iter("testcase"):
        failed = [f"{c.tag}: {c.get('message')}" for c in case if c.tag in ("failure", "error")]
        outcomes.setdefault(case.get("classname", ""), []).extend(failed or ["passed"])
    return PytestRun(result.stdout + result.stderr, outcomes)


def _module(example: Example) -> str:
    return f"test_{Path(example.doc).stem}_{example.line}"


@pytest.fixture(scope="module")
def pytest_pages(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], PytestRun]:
    done: dict[str, PytestRun] = {}

    def page(doc: str) -> PytestRun:
        if doc not in done:
            done[doc] = _pytest_page(doc, tmp_path_factory.mktemp("pytest"))
        return done[doc]

    return page


def check_pytest(example: Example, page: PytestRun) -> None:
    outcomes = page.outcomes.get(_module(example), [])
    if not outcomes or outcomes != ["passed"] * len(outcomes):
        pytest.fail(f"{example.id}: {outcomes or 'no test ran'}\n{page.output}", pytrace=False)


def check_ci(example: Example, where: Env) -> None:
    """A quickstart command: ``.ci/run`` runs it (in its own venv); its llmrt call runs here."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    for step in steps(example):
        for part in (p.strip() for p in step.command.split("&&")):
            in_ci = re.sub(r"\.venv/bin/(\S+)", r'"$venv/bin/\1"', part)
            in_ci = in_ci.replace("-m venv .venv", '-m venv "$venv"')
            assert in_ci in ci, f".ci/run does not run {part!r} (as {in_ci!r})"
            if part.startswith(".venv/bin/llmrt "):
                passed(run(["bash", "-c", part.removeprefix(".venv/bin/")], where))


def check_outline(example: Example) -> None:
    assert example.outline is not None
    module, _, name = example.outline.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    (node,) = [n for n in ast.parse(example.code).body if isinstance(n, ast.ClassDef)]
    assert node.name == name
    outlined = {
        f.name: f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    public = {n for n, v in vars(cls).items() if not n.startswith("_") and callable(v)}
    assert sorted(outlined) == sorted(public), "the outline must list every public method"
    for method, outline in outlined.items():
        real = getattr(cls, method)
        assert isinstance(outline, ast.AsyncFunctionDef) == inspect.iscoroutinefunction(real), (
            method
        )
        notes = real.__annotations__
        params = [
            (a.arg, ast.unparse(a.annotation) if a.annotation else None) for a in outline.args.args
        ]
        assert params == [(p, notes.get(p)) for p in inspect.signature(real).parameters], method
        returns = ast.unparse(outline.returns) if outline.returns else None
        assert returns == notes.get("return"), method


# ---- the example package -----------------------------------------------------------------------


def _build(doc: str, tmp: Path) -> tuple[Env, Path]:
    """The page's package as a wheel, installed into a new venv that also sees this llmrt."""
    src, cwd, wheels = tmp / "src", tmp / "run", tmp / "wheels"
    src.mkdir()
    cwd.mkdir()
    for block in (e for e in EXAMPLES if e.doc == doc and "package" in e.needs):
        if block.file_name == "llmrt.toml":
            (cwd / "llmrt.toml").write_text(block.code, encoding="utf-8")
        elif block.file_name:
            (src / block.file_name).write_text(block.code, encoding="utf-8")
    host = Env(tmp, clean_env(tmp))
    # No build isolation: built offline, with this environment's setuptools.
    pip = [sys.executable, "-m", "pip"]
    offline = ["--no-deps", "--no-index", "-q"]
    passed(
        run([*pip, "wheel", "--no-build-isolation", *offline, "-w", str(wheels), str(src)], host)
    )
    (wheel,) = wheels.glob("*.whl")
    venv = tmp / "venv"
    passed(run([sys.executable, "-m", "venv", "--without-pip", str(venv)], host))
    python = str(venv / "bin" / "python")
    paths = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(passed(run([python, "-c", paths], host)).strip())
    # llmrt (and its dependencies) are this environment's: the venv sees them as its base.
    ours = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    (site / "llmrt_under_test.pth").write_text(
        "".join(f"import site; site.addsitedir({d!r})\n" for d in ours), encoding="utf-8"
    )
    passed(run([*pip, "--python", python, "install", *offline, str(wheel)], host))
    return Env(cwd, clean_env(shims(tmp / "bin", python)), python=python), wheel


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Env, Path]]:
    """Each page's package, built once for all its blocks."""
    built: dict[str, tuple[Env, Path] | BaseException] = {}

    def package(doc: str) -> tuple[Env, Path]:
        if doc not in built:
            try:
                built[doc] = _build(doc, tmp_path_factory.mktemp("package"))
            except BaseException as failure:  # pytest.fail's too: each block reports it
                built[doc] = failure
        found = built[doc]
        if isinstance(found, BaseException):
            raise found
        return found

    return package


def check_package_block(example: Example, where: Env, wheel: Path) -> None:
    name = example.file_name
    if example.lang in ("sh", "console"):
        run_steps(example, where)
    elif name == "llmrt.toml":
        load = "from llmrt.actors.app.config import load_config; load_config(environ={})"
        passed(run([where.python, "-c", load], where))
    elif name == "pyproject.toml":
        project = tomllib.loads(example.code)["project"]
        dist = re.sub(r"[-_.]+", "_", project["name"])
        assert wheel.name.startswith(f"{dist}-{project['version']}-"), wheel.name
        points = (
            "import importlib.metadata as m; print(sorted((e.group, e.name, e.value)"
            " for e in m.distribution(%r).entry_points))"
        )
        declared = sorted(
            (group, key, value)
            for group, entries in project.get("entry-points", {}).items()
            for key, value in entries.items()
        )
        installed = passed(run([where.python, "-c", points % project["name"]], where))
        assert installed.strip() == str(declared)
    elif name is not None and name.endswith(".py"):
        where_from = f"import {name[:-3]} as m; print(m.__file__)"
        installed = Path(passed(run([where.python, "-c", where_from], where)).strip())
        assert Path(where.python).parent.parent in installed.parents, installed
    else:
        raise AssertionError(f"{example.id}: a package block names no file (`# NAME` first)")


# ---- one test per example ----------------------------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_the_example_runs(example: Example, plain: Env, request: pytest.FixtureRequest) -> None:
    if example.outline is not None:
        check_outline(example)
        return
    if "package" in example.needs:
        where, wheel = request.getfixturevalue("packages")(example.doc)
        check_package_block(example, where, wheel)
        return
    where = plain
    if "gateway" in example.needs:
        where = attrs.evolve(where, address=request.getfixturevalue("gateway"))
    if "ci" in example.needs:
        check_ci(example, where)
    elif example.lang == "python" and "pytest" in example.needs:
        check_pytest(example, request.getfixturevalue("pytest_pages")(example.doc))
    elif example.lang == "python":
        run_python(example, where, request.getfixturevalue("warm"))
    elif example.lang == "toml" and example.file_name == "pyproject.toml":
        tomllib.loads(example.code)  # the page's pytest configuration, used by its tests
    elif example.lang == "toml":
        path = where.cwd / "llmrt.toml"
        path.write_text(example.code, encoding="utf-8")
        load_config(path, environ={})
    else:
        run_steps(example, where)


# ---- the examples test itself fails where it should ------------------------------------------


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        ("```python\nprint(1)\n", "never closed"),
        ("```sh\nls\n``` and prose\n", "a fence inside the block"),
        ("<!-- not-run: needs a gateway -->\n```python\nx\n```\n", "say what it needs"),
        ("<!-- needs: gateways -->\n```python\nx\n```\n", "unknown setup ['gateways']"),
        ("  ```python\nx\n  ```\n", "a fence line that opens nothing"),
    ],
)
def test_a_page_the_test_cannot_read_is_an_error(page: str, problem: str) -> None:
    with pytest.raises(DocError, match=re.escape(problem)):
        parse("page.md", page)


def _example(lang: str, code: str) -> Example:
    return Example("page.md", 10, lang, code)


def test_a_failing_program_fails_with_its_line_in_the_page(plain: Env, warm: WarmPython) -> None:
    # The fence is on line 10: the third line of the block is line 13 of the page.
    with pytest.raises(pytest.fail.Exception, match=r'page\.md\.py", line 13'):
        run_python(_example("python", "import llmrt\n\nllmrt.no_such_name\n"), plain, warm)


def test_a_program_that_runs_nothing_is_refused(plain: Env, warm: WarmPython) -> None:
    with pytest.raises(AssertionError, match=r"never runs \['main'\]"):
        run_python(_example("python", "async def main():\n    raise SystemExit(1)\n"), plain, warm)


def test_console_output_must_be_printed(plain: Env) -> None:
    shown = "$ llmrt providers\ndemo  demo  key: none  [built-in]\n"
    run_steps(_example("console", shown), plain)
    with pytest.raises(AssertionError, match="did not print 'demo  demo  key: secret'"):
        run_steps(_example("console", shown.replace("key: none  [built-in]", "key: secret")), plain)
    with pytest.raises(pytest.fail.Exception, match="exit status 2"):
        run_steps(_example("console", "$ llmrt no-such-command\n"), plain)


def test_a_server_started_with_ampersand_serves_the_later_commands(plain: Env) -> None:
    shown = (
        "$ LLMRT_GATEWAY_TOKEN=tok-0123456789abcdef llmrt serve --port 8765 &\n"
        "auth: on (bearer token from $LLMRT_GATEWAY_TOKEN)\n"
        "$ llmrt call hi --via ws://127.0.0.1:8765/ --token-env T\n"
    )
    with pytest.raises(pytest.fail.Exception, match="AUTH"):
        run_steps(_example("console", shown), plain)
    token = attrs.evolve(plain, env={**plain.env, "T": "tok-0123456789abcdef"})
    run_steps(_example("console", shown + "finish: stop\n"), token)


def test_pip_only_checks_what_is_installed(plain: Env) -> None:
    run_steps(_example("sh", 'pip install "llmrt[otel]"\n'), plain)
    with pytest.raises(pytest.fail.Exception, match=r"llmrt has no extra \['nope'\]"):
        run_steps(_example("sh", 'pip install "llmrt[nope]"\n'), plain)
    with pytest.raises(pytest.fail.Exception, match="runs only `pip install llmrt"):
        run_steps(_example("sh", "pip install requests\n"), plain)


def test_a_warm_program_runs_as_python_runs_a_file(plain: Env, warm: WarmPython) -> None:
    # The server has llmrt imported; the program's namespace is still new, its
    # folder is sys.path[0], its exit status, streams and atexit handlers its own.
    (plain.cwd / "sibling.py").write_text("VALUE = 7\n", encoding="utf-8")
    path = plain.cwd / "prog.py"
    path.write_text(
        "import atexit, os, sys\n"
        "import sibling\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "print(__name__, sys.argv == [__file__], sibling.VALUE, os.getcwd(), os.environ['MARK'])\n"
        "print('to stderr', file=sys.stderr)\n"
        "try:\n"
        "    llmrt\n"
        "except NameError:\n"
        "    print('llmrt is not bound')\n"
        "sys.exit(3)\n",
        encoding="utf-8",
    )
    env = {**plain.env, "MARK": "marked"}
    ran = warm.run(path, cwd=plain.cwd, env=env, imports={"llmrt", "sys"}, timeout=TIMEOUT)
    assert ran.returncode == 3
    assert ran.stdout.splitlines() == [
        f"__main__ True 7 {plain.cwd} marked",
        "llmrt is not bound",
        "atexit ran",
    ]
    assert ran.stderr == "to stderr\n"


def test_a_warm_program_past_its_time_is_killed(plain: Env, warm: WarmPython) -> None:
    path = plain.cwd / "slow.py"
    path.write_text("import time\ntime.sleep(60)\n", encoding="utf-8")
    with pytest.raises(subprocess.TimeoutExpired):
        warm.run(path, cwd=plain.cwd, env=plain.env, imports=set(), timeout=0.5)
    # The server is still there for the next program.
    path.write_text("print('next')\n", encoding="utf-8")
    assert warm.run(path, cwd=plain.cwd, env=plain.env, imports=set(), timeout=TIMEOUT).stdout == (
        "next\n"
    )
