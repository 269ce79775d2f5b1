"""The documentation's generators (``python -m docs.generate``, ``python -m docs.results``); the pages
themselves are the Markdown files beside this package, built by MkDocs (mkdocs.yml)."""

from __future__ import annotations

import argparse
import sys
from typing import Callable


def page_command(prog: str, description: str, stale: Callable[[], list[str]], write: Callable[[], None],
                 source: str, argv: list[str] | None = None) -> int:
    """The command line of a page generator: write the pages, or with ``--check`` name (on stderr) every
    page that differs from what ``source`` gives and exit 1 if any does."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 if any differ")
    if parser.parse_args(argv).check:
        names = stale()
        for name in names:
            print(f"{name} differs from {source}: run {prog}", file=sys.stderr)
        return 1 if names else 0
    write()
    return 0
