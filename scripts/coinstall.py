"""Whether ``freqguard[redis]`` installs beside the libraries its users already run, without
pip downgrading any of them (CI runs it).

    python scripts/coinstall.py            # every peer below
    python scripts/coinstall.py arq        # the peers named

For each peer, pip resolves (``--dry-run --report``, nothing installed) the peer alone and the
peer with this checkout's ``[redis]`` extra; it fails when the second does not resolve, or
resolves the peer (or a library the peer pins, such as kombu for celery) to another version
than the first. Needs the package index, as any install does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Each peer: its requirement, and the distributions whose versions must not move.
PEERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "celery-5.4": (("celery[redis]>=5.4,<5.5",), ("celery", "kombu")),
    "celery-5.5": (("celery[redis]>=5.5,<5.6",), ("celery", "kombu")),
    "limits": (("limits[redis]",), ("limits",)),
    "flask-limiter": (("flask-limiter[redis]",), ("flask-limiter", "limits")),
    "slowapi": (("slowapi", "limits[redis]"), ("slowapi", "limits")),
    "arq": (("arq",), ("arq",)),
}


def resolve(*requirements: str) -> dict[str, str]:
    """What pip would install for ``requirements`` into an empty environment: name -> version."""
    with tempfile.TemporaryDirectory() as work:
        report = Path(work) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet"]
        command += ["--ignore-installed", "--report", str(report), *requirements]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-8:])
            raise SystemExit(f"pip cannot install {' '.join(requirements)} together:\n{tail}")
        found = json.loads(report.read_text())
    return {
        item["metadata"]["name"].lower(): item["metadata"]["version"] for item in found["install"]
    }


def check(name: str) -> str:
    requirements, kept = PEERS[name]
    requirement = " ".join(requirements)
    alone = resolve(*requirements)
    together = resolve(*requirements, f"{ROOT}[redis]")
    moved = [f"{d} {alone[d]} -> {together.get(d)}" for d in kept if together.get(d) != alone[d]]
    if moved:
        raise SystemExit(f"freqguard[redis] beside {requirement} moves {', '.join(moved)}")
    versions = ", ".join(f"{d} {alone[d]}" for d in kept)
    return f"{requirement}: {versions}, redis {together['redis']}"


def main() -> None:
    names = sys.argv[1:] or list(PEERS)
    unknown = [name for name in names if name not in PEERS]
    if unknown:
        raise SystemExit(f"unknown peer {unknown[0]!r}: one of {', '.join(PEERS)}")
    for name in names:
        print(f"ok  {check(name)}")


if __name__ == "__main__":
    main()
