"""How the command line answers: a table for people, JSON for scripts; its exit codes."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

__all__ = ["EXIT_OK", "EXIT_STORE", "EXIT_USAGE", "out"]

EXIT_OK, EXIT_STORE, EXIT_USAGE = 0, 1, 2


def out(args: argparse.Namespace, data: object, table: Callable[[], list[list[str]]]) -> None:
    """``data`` as JSON with ``--json``, else ``table()``'s rows (the first a heading)."""
    if args.json:
        print(json.dumps(data, indent=2))
        return
    rows = table()
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  ".join(cells).rstrip())
        if n == 0:
            print("  ".join("-" * width for width in widths))
