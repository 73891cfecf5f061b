"""No hidden tasks and no module state in the runtime's code (issue 23: "the design in letter").

An ast walk over ``runtime/``, ``actors/`` and ``adapters/``: no
``spawn_system_task`` (a task nobody's nursery holds), no ``global``
rebinding, and no module-level mutable value that the module mutates: a
dict, list, set or deque (literal, comprehension or constructor call), a
weak container or a ``RunVar`` bound at module level and then written
(``X[k] = v``, ``del X[k]``, ``X += ...``, ``X.append(...)``, ``X.set(...)``,
...). A module-level table that is only read is a constant and passes.

What must stay for now is in `ALLOWED`, each with its reason.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("runtime", "actors", "adapters")

#: (path, name) -> why it may stay.
ALLOWED: dict[tuple[str, str], str] = {
    ("runtime/_codec.py", "_decoders"): (
        "a memo of one msgspec decoder per wire type: a pure function of its key, "
        "the same for every runtime in the process"
    ),
    ("runtime/_vocab.py", "_current"): (
        "the vocabulary extensions (llmrt.register_content_block and kin) are "
        "process-wide by design: every codec of the process decodes them"
    ),
}

#: Constructors whose result is a mutable container (or per-run state).
MUTABLE_CALLS = frozenset(
    {
        "dict",
        "list",
        "set",
        "bytearray",
        "deque",
        "defaultdict",
        "OrderedDict",
        "Counter",
        "WeakKeyDictionary",
        "WeakValueDictionary",
        "WeakSet",
        "RunVar",
    }
)
#: Methods that change a container (or a RunVar) in place.
MUTATORS = frozenset(
    {
        "append",
        "appendleft",
        "add",
        "clear",
        "discard",
        "extend",
        "extendleft",
        "insert",
        "pop",
        "popitem",
        "popleft",
        "remove",
        "set",
        "setdefault",
        "update",
    }
)


def _callee(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_mutable(value: ast.expr | None) -> bool:
    if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp | ast.SetComp):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Subscript):  # RunVar[int](...)
            func = func.value
        return _callee(func) in MUTABLE_CALLS
    return False


def _module_bindings(tree: ast.Module) -> dict[str, int]:
    """Names bound at module level (also under module-level if/try) to a mutable value."""
    found: dict[str, int] = {}

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Assign) and _is_mutable(stmt.value):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = stmt.lineno
            elif (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and _is_mutable(stmt.value)
            ):
                found[stmt.target.id] = stmt.lineno
            elif isinstance(stmt, ast.If | ast.Try):
                visit(stmt.body)
                visit(stmt.orelse)
                if isinstance(stmt, ast.Try):
                    for handler in stmt.handlers:
                        visit(handler.body)
                    visit(stmt.finalbody)

    visit(tree.body)
    return found


def _mutated(tree: ast.Module, names: set[str]) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            if isinstance(node.value, ast.Name) and node.value.id in names:
                out.add(node.value.id)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            if node.target.id in names:
                out.add(node.target.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id in names and node.func.attr in MUTATORS:
                out.add(owner.id)
    return out


@functools.cache
def findings() -> tuple[tuple[str, str, str], ...]:
    """(path, name, what) for every hidden task, global rebinding and mutated module value.

    Parsed once for the module's tests.
    """
    out: list[tuple[str, str, str]] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
            for node in ast.walk(tree):
                name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
                if name == "spawn_system_task":
                    out.append((rel, "spawn_system_task", f"line {node.lineno}: a system task"))
                elif isinstance(node, ast.Global):
                    for name in node.names:
                        out.append((rel, name, f"line {node.lineno}: rebinds a module global"))
            bound = _module_bindings(tree)
            for name in sorted(_mutated(tree, set(bound))):
                out.append((rel, name, f"line {bound[name]}: module-level state, mutated"))
    return tuple(out)


def test_no_hidden_task_and_no_module_state() -> None:
    unexpected = [f for f in findings() if (f[0], f[1]) not in ALLOWED]
    assert unexpected == [], "\n".join(f"{p}: {n} ({w})" for p, n, w in unexpected)


def test_every_allowance_is_still_needed_and_says_why() -> None:
    present = {(p, n) for p, n, _ in findings()}
    stale = sorted(set(ALLOWED) - present)
    assert stale == [], f"allowed but no longer found (drop them): {stale}"
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_walk_catches_each_kind_it_names() -> None:
    """The detector itself: each shape it claims to find is found, constants are not."""
    source = """
import trio
from weakref import WeakKeyDictionary
TABLE = {"a": 1}
CACHE: dict[str, int] = {}
SEEN = set()
WEAK = WeakKeyDictionary()
VAR = trio.lowlevel.RunVar("v")
ROWS = [1, 2]
def f(k):
    CACHE[k] = 1
    SEEN.add(k)
    WEAK[k] = 2
    VAR.set(3)
    return TABLE[k], ROWS[0]
"""
    tree = ast.parse(source)
    bound = _module_bindings(tree)
    assert set(bound) == {"TABLE", "CACHE", "SEEN", "WEAK", "VAR", "ROWS"}
    assert _mutated(tree, set(bound)) == {"CACHE", "SEEN", "WEAK", "VAR"}
