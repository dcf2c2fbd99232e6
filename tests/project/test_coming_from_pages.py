"""Each "Coming from" page (docs/coming-from/) is held to its tests: every row of its tables
names a test that runs the row's two sides, and that test exists in the module the page
names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
PAGES = sorted((ROOT / "docs" / "coming-from").glob("*.md"))


def test_there_is_a_page_for_each_library_users_come_from() -> None:
    names = {page.stem for page in PAGES}
    assert names == {"django-ratelimit", "drf", "flask-limiter", "limits", "throttled-py"}


@pytest.mark.parametrize("page", PAGES, ids=[page.stem for page in PAGES])
def test_every_row_names_a_test_that_exists(page: Path) -> None:
    text = page.read_text()
    [module] = set(re.findall(r"`(tests/integrations/test_coming_from_\w+\.py)`", text))
    source = (ROOT / module).read_text()
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| ")
        and not line.startswith(("| ---", "| django-ratelimit |"))
        and "| test |" not in line
    ]
    assert len(rows) >= 5
    for row in rows:
        named = re.findall(r"`(test_\w+)`\s*\|\s*$", row)
        assert named, f"{page.name}: a row without its test: {row[:60]}"
        assert re.search(rf"^def {named[0]}\(", source, re.M), f"{module}: no {named[0]}"
