"""The command line run in this process, as the console script runs it, its output captured:
an exception that leaves ``main()`` is the traceback an operator would see, so it fails the
test that ran it. The process's environment is put back afterwards: ``serve`` hands its
settings to its workers there (a token file, a history switch), and a later test's
``freqguard serve`` process inherited them (seen: a 401 where the test gave no token)."""

from __future__ import annotations

import contextlib
import io
import os
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
    environ = dict(os.environ)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
            code = int(exc.code or 0)
        finally:
            os.environ.clear()
            os.environ.update(environ)
    return Ran(code, out.getvalue(), err.getvalue())
