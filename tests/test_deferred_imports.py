"""The provider SDKs are imported by the tests that use them, not by collection (``_sdks.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _sdks import Deferred
from conftest import SDK_FILES

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


def test_collecting_the_sdk_files_imports_no_sdk() -> None:
    program = (
        "import sys, pytest\n"
        "flags = ['--collect-only', '-q', '-p', 'no:xdist', '-p', 'no:cacheprovider']\n"
        "code = pytest.main([*flags, *sys.argv[1:]])\n"
        "sdks = ('openai', 'anthropic', 'coredis')\n"
        "print(sorted(m for m in sdks if m in sys.modules))\n"
        "sys.exit(code)\n"
    )
    files = sorted(SDK_FILES)
    done = subprocess.run(
        [sys.executable, "-c", program, *files],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "[]", done.stdout
    assert "tests collected" in done.stdout, done.stdout
