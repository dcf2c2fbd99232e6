"""The ``freqguard`` command."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="freqguard", description="freqguard command line")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="send a burst of SMS through the four-rule policy")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from freqguard.demo import main as demo

        demo()
    return 0
