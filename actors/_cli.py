"""The ``llmrt`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import llmrt

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmrt", description="Stream LLM calls through llmrt's trio runtime."
    )
    parser.add_argument("--version", action="version", version=f"llmrt {llmrt.__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
