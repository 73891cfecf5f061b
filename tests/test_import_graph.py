"""The package's modules import each other in one direction: the import graph has no cycle.

The graph is read from the source with `ast`, not from ``sys.modules``: a node
is a module of the package (``runtime/`` is ``llmrt``, ``actors/`` is
``llmrt.actors``, ``adapters/`` is ``llmrt.adapters``; a package's
``__init__.py`` is the package's own node), and an edge goes from a module to
every package module it names in an import statement:

* every import statement counts, wherever it stands: at module level, inside
  ``if TYPE_CHECKING:`` (a type-only import is still a dependency of the
  module's meaning, and the one place a cycle hides most easily) and inside a
  function (a deferred import is still a dependency, only a later one);
* ``from X import name`` is an edge to ``X.name`` when that is a module, else
  to ``X``: naming a package's re-export depends on the package's
  ``__init__``, naming a defining module depends on that module only;
* the implicit import of a parent package that Python performs before a
  submodule is not an edge. Importing ``llmrt._chunks`` runs ``llmrt/__init__``
  first, but the submodule needs none of the names ``__init__`` binds, so the
  order in which the interpreter loads things is not a dependency between
  them. This is why the actor core names the vocabulary by its defining
  modules (``from llmrt._chunks import Finish``), while ``llmrt/__init__``
  re-exports the actors' facade: the facade depends on the vocabulary, the
  package's namespace depends on both, and nothing depends back on the
  namespace from inside the core.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Source folder -> the package it is installed as (pyproject's package-dir).
PACKAGES = {"runtime": "llmrt", "actors": "llmrt.actors", "adapters": "llmrt.adapters"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder, package in PACKAGES.items():
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            # A sub-package folder (e.g. runtime/testing) may also be a mapped package.
            found.setdefault(name, path)
    return found


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if _is_package(path) else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base_parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            for target in targets:
                # ``import llmrt.actors._call`` names the deepest module it reaches.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


@functools.cache
def _graph() -> dict[str, set[str]]:
    """The package's import graph, parsed once for the module's tests (read, never changed)."""
    return _edges(_modules())


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_walk_sees_the_package() -> None:
    modules = _modules()
    graph = _graph()
    # The walk found the three folders and real edges, so an empty answer below means something.
    assert {"llmrt", "llmrt.actors", "llmrt.adapters", "llmrt.actors._call"} <= modules.keys()
    assert "llmrt.actors" in graph["llmrt"]
    assert "llmrt._chunks" in graph["llmrt"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_has_no_cycle() -> None:
    cycles = _cycles(_graph())
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_actor_core_has_no_cycle_and_no_back_reference() -> None:
    graph = _graph()
    core = {
        f"llmrt.actors.{name}"
        for name in [
            "_abort",
            "_call",
            "_mailbox",
            "_prepare",
            "_registration",
            "_registry",
            "_retry",
            "_runtime",
            "_statistics",
            "_stats",
            "_topology",
            "_watchdog",
        ]
    }
    # Calls and retries are given the core; they never import the runtime that made them.
    assert "llmrt.actors._runtime" not in graph["llmrt.actors._call"]
    assert "llmrt.actors._runtime" not in graph["llmrt.actors._retry"]
    assert "llmrt.actors._retry" not in graph["llmrt.actors._call"]
    # The core names the vocabulary by its defining modules, never the package namespace.
    for name in core:
        assert "llmrt" not in graph[name], f"{name} imports the llmrt namespace"
        assert "llmrt.actors" not in graph[name], f"{name} imports the llmrt.actors namespace"
