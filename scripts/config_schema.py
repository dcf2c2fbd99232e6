"""Write the configuration file's JSON Schema (``freqguard.config.SCHEMA``) to
``docs/config.schema.json``, where editors and the docs find it.

    python scripts/config_schema.py           # write it
    python scripts/config_schema.py --check   # exit 1 if the file is stale (a test runs this)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from freqguard.config import SCHEMA

TARGET = Path(__file__).resolve().parent.parent / "docs" / "config.schema.json"


def text() -> str:
    return json.dumps(SCHEMA, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = parser.parse_args(argv)
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text():
            print(f"{TARGET} is stale: run python scripts/config_schema.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
