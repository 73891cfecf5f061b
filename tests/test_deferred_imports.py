"""The provider SDKs are imported by the tests that use them, not by collection (``_sdks.py``)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import _sdks
import pytest
from _sdks import Deferred

HERE = Path(__file__).parent


def test_a_deferred_module_is_imported_at_its_first_public_attribute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "deferred_probe.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "deferred_probe", raising=False)
    probe = Deferred("deferred_probe")
    # What pytest reads of every name in a module's namespace while collecting it.
    assert getattr(probe, "__test__", None) is None
    assert getattr(probe, "_fixture_function_marker", None) is None
    assert not isinstance(probe, type)
    assert "deferred_probe" not in sys.modules
    assert probe.VALUE == 42
    assert "deferred_probe" in sys.modules
    with pytest.raises(AttributeError):
        _ = probe.MISSING


def test_no_test_module_imports_a_deferred_library_at_its_top() -> None:
    # What collection runs of each file is its top level (a class body
    # included); a function's own imports run with the test.
    deferred = {m._name for m in vars(_sdks).values() if isinstance(m, Deferred)}
    assert {"anthropic", "openai"} <= deferred
    found = []
    for path in sorted(HERE.glob("*.py")):
        if path.name == "_sdks.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                node.body = []  # not walked: imported when the test runs
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            top = [name for name in names if name.split(".")[0] in deferred]
            found += [f"{path.name}:{node.lineno} {name}" for name in top]
    assert found == [], "import these through _sdks.py: " + ", ".join(found)
    assert len(list(HERE.glob("test_*.py"))) > 100  # the walk saw the suite
