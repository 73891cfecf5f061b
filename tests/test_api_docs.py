"""docs/http-api.md says what the code does: its tables are the code's tables, its example runs."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from llmrt.actors.gateway.api import ERROR_CLASSES, chat, messages, responses

DOC = (Path(__file__).resolve().parent.parent / "docs" / "http-api.md").read_text("utf-8")


def section(title: str) -> str:
    start = DOC.index(f"\n{title}\n")
    end = DOC.find("\n#", start + len(title) + 2)
    return DOC[start : end if end >= 0 else None]


def rows(text: str) -> list[list[str]]:
    out = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            out.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return out[1:]  # without the header


def test_the_parameter_tables_are_the_decoders_tables() -> None:
    for title, module in (
        ("### Chat Completions", chat),
        ("### Responses", responses),
        ("### Messages", messages),
    ):
        table = rows(section(title))
        assert table == [
            [f"`{name}`", param.kind, param.note] for name, param in module.PARAMETERS.items()
        ], title


def test_the_error_table_is_the_code() -> None:
    table = rows(section("## Errors"))

    def cell(value: str | None) -> str:
        return f"`{value}`" if value is not None else "`null`"

    assert table == [
        [
            f"`{code}`",
            str(kind.status),
            cell(kind.openai_type),
            cell(kind.openai_code),
            cell(kind.anthropic_type),
            str(kind.messages_status),
        ]
        for code, kind in ERROR_CLASSES.items()
    ]


def test_the_in_process_example_runs_as_printed() -> None:
    found = re.search(r"## In-process use\n.*?```python\n(.*?)```", DOC, re.S)
    assert found is not None, "docs/http-api.md lost its example"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(found.group(1), "docs/http-api.md", "exec"), {"__name__": "__doc__"})
    output = printed.getvalue()
    assert output.endswith("data: [DONE]\n\n")
    assert '"object":"chat.completion.chunk"' in output
    assert '"choices":[],"usage":{"prompt_tokens"' in output
    assert '"reasoning_content":' in output and '"content":' in output  # the answer, streamed
