"""Check that each dependency is installed at the floor ``pyproject.toml`` names.

    python scripts/ci_floors.py all test   # the venv's python, after a lowest-direct install

``uv pip install --resolution lowest-direct`` gives each requirement the lowest version it
allows, unless another requirement lifts it (fastapi 0.110.1 needs starlette 0.37.2 or newer):
then the floor written in ``pyproject.toml`` is one no test ran on. So this fails, naming the
requirement, wherever the installed version is not the floor, and wherever one package is
written with two floors (the lower one would be tested nowhere). ``scripts/ci_matrix.sh``
runs it before the quick suite of its ``lowest-3.10`` job.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli, which freqguard itself requires there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def requirements(project: dict[str, Any], extras: list[str]) -> list[Requirement]:
    """The project's own requirements and those of ``extras``, following ``freqguard[...]``."""
    own = canonicalize_name(project["name"])
    found = [Requirement(text) for text in project.get("dependencies", [])]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in project["optional-dependencies"][extra]:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) == own:
                todo.extend(requirement.extras)
            else:
                found.append(requirement)
    return [r for r in found if r.marker is None or r.marker.evaluate()]


def floors(found: list[Requirement]) -> tuple[dict[str, Version], list[str]]:
    """Each package's floor (its ``>=`` bound), and a message for each written with two."""
    each: dict[str, set[Version]] = {}
    for requirement in found:
        bounds = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        if bounds:
            each.setdefault(canonicalize_name(requirement.name), set()).update(bounds)
    wrong = [
        f"{name}: written with floors {', '.join(map(str, sorted(low)))}; write one"
        for name, low in sorted(each.items())
        if len(low) > 1
    ]
    return {name: max(low) for name, low in each.items()}, wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extras", nargs="*", help="the extras that were installed")
    args = parser.parse_args()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    expected, wrong = floors(requirements(project, args.extras))
    for name, low in sorted(expected.items()):
        try:
            installed = Version(version(name))
        except PackageNotFoundError:
            wrong.append(f"{name}: not installed (floor {low})")
            continue
        if installed != low:
            wrong.append(
                f"{name}: {installed} installed, not its floor {low}, so no test ran on {low} "
                "(does another requirement lift it?)"
            )
    if wrong:
        print("ci_floors: floors that were not tested:", *wrong, sep="\n  ", file=sys.stderr)
        return 1
    shown = ", ".join(f"{name} {low}" for name, low in sorted(expected.items()))
    print(f"ci_floors: {len(expected)} dependencies at their floors: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
