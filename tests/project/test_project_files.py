"""The files around the code say what is true: the license, the changelog, the test commands,
what the sdist ships."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.backends import test_memory_backend
from tests.conformance import test_audit

ROOT = Path(__file__).parent.parent.parent
QUICK = 'python -m pytest -m "not slow"'


def _pyproject() -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: tomli, which freqguard itself requires there
        import tomli as tomllib
    found: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return found


def test_the_license_is_the_one_pyproject_names() -> None:
    project = _pyproject()["project"]
    assert project["license"] == "MIT"  # an SPDX expression (PEP 639)
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    assert "Copyright (c) 2026 the freqguard authors" in text


def test_the_changelog_has_an_unreleased_section() -> None:
    assert "\n## Unreleased\n" in (ROOT / "CHANGELOG.md").read_text()


def test_the_version_is_one_everywhere_and_the_changelog_releases_it() -> None:
    """pyproject's version is the package's ``__version__`` and the one ``freqguard
    --version`` shows in docs/cli.md: the newest release section of the changelog, or,
    between releases, a development version of a later one (``0.3.0.dev0``), so that an
    install from main never claims to be a release it behaves unlike."""
    import freqguard

    version = _pyproject()["project"]["version"]
    assert freqguard.__version__ == version
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (\d+\.\d+\.\d+)", changelog, re.M)
    found = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(\.dev\d+)?", version)
    assert found is not None, version
    if found[4] is None:
        assert releases[0] == version
    else:
        newest = tuple(int(n) for n in releases[0].split("."))
        assert tuple(int(n) for n in found.group(1, 2, 3)) > newest
    assert f"$ freqguard --version\nfreqguard {version}\n" in (ROOT / "docs/cli.md").read_text()


def test_the_quick_command_skips_the_slow_proofs_and_ci_runs_everything() -> None:
    assert QUICK in (ROOT / "README.md").read_text()
    assert QUICK in (ROOT / "CONTRIBUTING.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    # CI calls the README's command, then the slow proofs it skips
    assert re.search(r'^python -m pytest -m "not slow"$', ci, re.M)
    assert re.search(r'^HYPOTHESIS_PROFILE=ci python -m pytest -m "slow or properties"$', ci, re.M)
    assert any(
        m.startswith("slow:") for m in _pyproject()["tool"]["pytest"]["ini_options"]["markers"]
    )


@pytest.mark.parametrize(
    "test",
    [
        test_memory_backend.test_a_million_one_off_recipients_are_reclaimed,
        test_audit.test_memory_under_threads_and_tasks,
        test_audit.test_redis_under_processes_threads_and_tasks,
        test_audit.test_redis_cluster_under_processes_threads_and_tasks,
    ],
)
def test_the_long_proofs_are_marked_slow(test: object) -> None:
    assert "slow" in [mark.name for mark in getattr(test, "pytestmark", [])]


def test_the_sdist_ships_what_the_tests_read() -> None:
    config = _pyproject()
    include = config["tool"]["hatch"]["build"]["targets"]["sdist"]["include"]
    imported = {"examples"}  # tests import these packages
    read = {"docs", "README.md"}  # and read these files (test_docs_snippets)
    assert imported | read | {"freqguard", "tests"} <= set(include)
    assert {path.name for path in ROOT.glob("*.md")} <= set(include)


def test_there_is_a_fastapi_extra() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    assert any(req.startswith("fastapi") for req in extras["fastapi"])
    assert "fastapi" in extras["all"][0]


#: A file the prose names: under one of the project's folders, a module, a script or a test.
_NAMED = re.compile(
    r"\b(?:freqguard|tests|benchmarks|scripts|examples)/[A-Za-z0-9_/.-]+\.(?:py|lua)\b"
)


def test_every_file_the_docs_name_is_there() -> None:
    """A path in the docs, the READMEs or CONTRIBUTING.md is to a file that is there (a new
    user's run found nine that had moved: "a test proves it" led nowhere). The changelog
    says what was, and is left as it was."""
    pages = [*ROOT.glob("docs/**/*.md"), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    pages.append(ROOT / "benchmarks" / "README.md")
    gone = sorted(
        f"{page.relative_to(ROOT)}: {path}"
        for page in pages
        if page.name != "changelog.md"
        for path in set(_NAMED.findall(page.read_text()))
        if not (ROOT / path).exists()
    )
    assert gone == []
