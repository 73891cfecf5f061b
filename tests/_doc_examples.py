"""The fenced examples of README.md and docs/*.md, as tests/test_examples.py reads them.

An example is a fenced block in one of `LANGUAGES`. By default it runs alone:
a ``python`` block as a program, a ``toml`` block as an ``llmrt.toml`` loaded
with ``load_config`` (a ``# pyproject.toml`` one is parsed as TOML), a ``sh``
or ``console`` block command by command (``console``: ``$ `` lines, with
the output shown under them checked).

A block that cannot run alone says what it needs on the line above its
fence, in an HTML comment; the test provides exactly that:

``<!-- needs: gateway -->``
    a gateway (``llmrt serve`` on the demo) on a free port; the block's
    ``127.0.0.1:8765`` (the address README.md starts one on) becomes its address.
``<!-- needs: pytest -->``
    the block is a test module: pytest runs it (with the page's other test
    modules) under the configuration of the page's ``# pyproject.toml``
    block, and every test in it must pass.
``<!-- needs: package -->``
    the page's example package: its ``needs: package`` blocks whose first
    line names a file (``# pyproject.toml``, ``# NAME.py``) are built into a
    wheel and installed into a temporary virtual environment; the others
    (an ``# llmrt.toml``, the commands using it) run in that environment.
``<!-- needs: ci -->``
    a command only a fresh clone can run (README.md's quickstart): the test
    checks that ``.ci/run`` runs it, and runs its ``llmrt`` commands.
``<!-- outline: DOTTED.NAME -->``
    the block outlines a class: every public method of it, with its
    parameters, annotations and ``async``, and nothing else.

``<!-- not-run: ... -->`` is refused: say what the block needs instead.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import attrs

LANGUAGES = frozenset({"python", "toml", "sh", "console"})
NEEDS = frozenset({"gateway", "pytest", "package", "ci"})
#: The address examples use for a gateway (README.md: ``llmrt serve --port 8765``).
PLACEHOLDER = "127.0.0.1:8765"

_OPEN = re.compile(r"^```([\w-]*)\s*$")
_CLOSE = re.compile(r"^```\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*([\w-]+)\s*:\s*(.*?)\s*-->\s*$")
_FILE = re.compile(r"^#\s+([\w.-]+\.\w+)\b")


class DocError(Exception):
    """A page's fences or directives the examples test cannot read."""


@attrs.frozen
class Example:
    doc: str  # the page, relative to the repository
    line: int  # the line of the opening fence, 1-based
    lang: str
    code: str
    needs: frozenset[str] = frozenset()
    outline: str | None = None

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def file_name(self) -> str | None:
        """The file the block's first line names (``# pyproject.toml of llmrt-echo``)."""
        found = _FILE.match(self.code)
        return found.group(1) if found else None


def _directive(doc: str, line: int, text: str) -> tuple[frozenset[str], str | None]:
    found = _DIRECTIVE.match(text)
    if found is None:
        return frozenset(), None
    kind, value = found.groups()
    if kind == "needs":
        needs = frozenset(v.strip() for v in value.split(","))
        unknown = needs - NEEDS
        if unknown:
            raise DocError(f"{doc}:{line}: unknown setup {sorted(unknown)}; known: {sorted(NEEDS)}")
        return needs, None
    if kind == "outline":
        return frozenset(), value
    if kind == "not-run":
        raise DocError(
            f"{doc}:{line}: every example runs; say what it needs instead of not-run "
            f"(<!-- needs: {' | '.join(sorted(NEEDS))} -->, or <!-- outline: CLASS -->)"
        )
    return frozenset(), None  # another page marker (images.md's worked-example)


def parse(doc: str, text: str) -> list[Example]:
    """Every example of one page, in order; `DocError` for an unclosed fence."""
    lines = text.split("\n")
    found: list[Example] = []
    i = 0
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if opening is None:
            if lines[i].lstrip().startswith("```"):
                raise DocError(f"{doc}:{i + 1}: a fence line that opens nothing: {lines[i]!r}")
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and not _CLOSE.match(lines[i]):
            if lines[i].startswith("```"):
                raise DocError(
                    f"{doc}:{i + 1}: a fence inside the block opened at line {start + 1}"
                )
            i += 1
        if i == len(lines):
            raise DocError(f"{doc}:{start + 1}: the block is never closed")
        lang = opening.group(1)
        if lang in LANGUAGES:
            above = lines[start - 1] if start else ""
            needs, outline = _directive(doc, start, above)
            code = "\n".join(lines[start + 1 : i]) + "\n"
            found.append(Example(doc, start + 1, lang, code, needs, outline))
        i += 1
    return found


def collect(repo: Path) -> tuple[list[Example], list[str]]:
    """The examples of README.md and of every page in docs/, and the pages' problems.

    A page with a problem (`DocError`) contributes the problem and no example.
    """
    pages = [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
    examples: list[Example] = []
    problems: list[str] = []
    for page in pages:
        try:
            examples += parse(str(page.relative_to(repo)), page.read_text(encoding="utf-8"))
        except DocError as err:
            problems.append(str(err))
    return examples, problems


def unused_functions(code: str) -> list[str]:
    """The module-level functions a program defines and never uses (so never runs)."""
    tree = ast.parse(code)
    defined = [
        node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return [name for name in defined if name not in used]


def program(example: Example, address: str | None = None) -> str:
    """The block as a file whose line numbers are the page's (tracebacks point at the doc)."""
    code = example.code if address is None else example.code.replace(PLACEHOLDER, address)
    return "\n" * example.line + code
