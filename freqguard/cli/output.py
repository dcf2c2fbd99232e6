"""How the command line answers: a table for people, JSON for scripts; its exit codes; and
what it never prints (a store's password: every message and answer is masked)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from typing import NoReturn

from freqguard.backends._url_options import _shown

__all__ = ["EXIT_OK", "EXIT_STORE", "EXIT_USAGE", "Parser", "masked", "out", "say"]

EXIT_OK, EXIT_STORE, EXIT_USAGE = 0, 1, 2

# a URL in a text (a message quotes one, a redis-py error may), to the next space; tried
# only where a scheme can begin (not inside a run of its characters): from every position
# of a long word, the search was quadratic in its length (a 1 MB word: hours)
_URL = re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*://\S*")


def masked(text: str) -> str:
    """``text`` with the password of every URL in it masked (``redis://user:***@host``,
    ``?password=***``)."""
    return _URL.sub(lambda found: _shown(found.group()), text)


def _masked_data(data: object) -> object:
    if isinstance(data, str):
        return masked(data)
    if isinstance(data, dict):
        return {key: _masked_data(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_masked_data(value) for value in data]
    return data


def say(message: str) -> None:
    """A line on standard error, masked."""
    print(masked(message), file=sys.stderr)


def out(args: argparse.Namespace, data: object, table: Callable[[], list[list[str]]]) -> None:
    """``data`` as JSON with ``--json``, else ``table()``'s rows (the first a heading);
    masked either way."""
    if args.json:
        print(json.dumps(_masked_data(data), indent=2))
        return
    rows = [[masked(cell) for cell in row] for row in table()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  ".join(cells).rstrip())
        if n == 0:
            print("  ".join("-" * width for width in widths))


# a word past any name or number the commands take: argparse's refusals quote it whole
_LONG = re.compile(r"\S{81,}")


class Parser(argparse.ArgumentParser):
    """A parser whose refusals (an invalid choice, unrecognized arguments) show each
    over-long word cut short, as :func:`~freqguard.errors.shown` cuts a value (argparse
    quoted it already), on one line: argparse printed a 1 MB word whole, and a newline in
    one as a line of its own."""

    def error(self, message: str) -> NoReturn:
        cut = _LONG.sub(lambda w: f"{w.group()[:60]}... ({len(w.group())} characters)", message)
        super().error(cut.replace("\n", "\\n").replace("\r", "\\r"))
