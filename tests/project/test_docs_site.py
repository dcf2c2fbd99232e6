"""The documentation site (mkdocs.yml) shows every page and documents every public name.

``mkdocs build --strict`` in CI catches broken links; these catch, in the quick run, a page
left out of the nav and a public name left out of the API reference, which it does not.
"""

from __future__ import annotations

import re
from pathlib import Path

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
