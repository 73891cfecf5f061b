"""The worked example of docs/images.md: its code runs and prints the numbers the page states."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "images.md"
_EXAMPLE = re.compile(r"<!-- worked-example -->\n```python\n(.*?)```\n\n```text\n(.*?)```", re.S)


def test_the_worked_example_prints_what_the_guide_says() -> None:
    found = _EXAMPLE.search(DOC.read_text(encoding="utf-8"))
    assert found is not None, "docs/images.md lost its worked example"
    code, stated = found.groups()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(DOC), "exec"), {"__name__": "worked_example"})
    assert printed.getvalue() == stated
    # The figures the prose walks through are the ones printed.
    assert "offloaded=3, tokens=1445" in stated and "offloaded=3, tokens=1700" in stated
