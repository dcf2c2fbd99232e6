"""The documentation site (mkdocs.yml) builds, shows every page and documents every public
name.

The site is built as CI builds it, ``mkdocs build --strict`` (a broken link, an anchor
missing, a docstring griffe cannot read all fail it): a slow test, since it takes seconds.
The quick ones catch a page left out of the nav and a public name left out of the API
reference, which the build does not.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import freqguard

ROOT = Path(__file__).parent.parent.parent
DOCS = ROOT / "docs"


def test_every_page_is_in_the_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    nav = config[config.index("\nnav:") :]
    listed = re.findall(r"^\s+- (?:[^\n]*: )?(\S+\.md)$", nav, re.M)
    pages = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
    assert sorted(listed) == pages


def test_every_public_name_is_in_the_api_reference() -> None:
    documented = {
        found
        for page in (DOCS / "reference").glob("*.md")
        for found in re.findall(r"^::: (\S+)$", page.read_text(), re.M)
    }
    # @capped is documented where its module's docstring explains it
    public = {f"freqguard.{name}" for name in freqguard.__all__} - {
        "freqguard.capped",
        "freqguard.configure",
    }
    decorators = {"freqguard.decorators.capped", "freqguard.decorators.configure"}
    integrations = {
        f"freqguard.integrations.{name}" for name in ("starlette", "flask", "wsgi", "celery")
    }
    assert public | decorators | integrations <= documented


def test_every_included_file_exists() -> None:
    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"^<!-- include: (\S+) -->$", page.read_text(), re.M):
            assert (page.parent / target).is_file(), page


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """As CI and the README's ``mkdocs serve`` build it (``strict: true`` in mkdocs.yml).

    Not ``--quiet``: it drops the warnings before strict mode counts them, so a quiet
    strict build passed with four (``set_limit``'s docstring).
    """
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "django" / "index.html").is_file()
