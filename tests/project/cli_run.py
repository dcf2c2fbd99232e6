"""The command line run in this process, as the console script runs it, its output captured:
an exception that leaves ``main()`` is the traceback an operator would see, so it fails the
test that ran it."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

from freqguard.cli import main

__all__ = ["Ran", "run"]


@dataclass(frozen=True)
class Ran:
    """What one command did: its exit code and its output."""

    code: int
    out: str
    err: str


def run(*argv: str) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
            code = int(exc.code or 0)
    return Ran(code, out.getvalue(), err.getvalue())
