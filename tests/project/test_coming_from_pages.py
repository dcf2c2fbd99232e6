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
    assert names == {
        "django-ratelimit",
        "drf",
        "envoy-ratelimit",
        "flask-limiter",
        "limits",
        "redis-cell",
        "slowapi",
        "throttled-py",
    }


@pytest.mark.parametrize("page", PAGES, ids=[page.stem for page in PAGES])
def test_every_row_names_a_test_that_exists(page: Path) -> None:
    text = page.read_text()
    modules = sorted(set(re.findall(r"`(tests/integrations/test_coming_from_\w+\.py)`", text)))
    assert modules, f"{page.name} names no test module"
    source = "\n".join((ROOT / module).read_text() for module in modules)
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
        assert re.search(rf"^def {named[0]}\(", source, re.M), f"{modules}: no {named[0]}"


#: Where a page translates a peer's strategy name that freqguard's error also translates:
#: (page, the row's start) -> the peer's name as freqguard.strategy.PEER_NAMES keys it.
_TRANSLATED = {
    ("limits.md", "| `MovingWindowRateLimiter"): "moving-window",
    ("limits.md", "| `SlidingWindowCounterRateLimiter`"): "sliding-window-counter",
    ("throttled-py.md", '| `using="sliding_window"`'): "sliding-window",
    ("throttled-py.md", '| `using="token_bucket"` (the default), `"leaking_bucket"`'): (
        "leaking-bucket"
    ),
}


@pytest.mark.parametrize(
    ("where", "peer"), list(_TRANSLATED.items()), ids=list(_TRANSLATED.values())
)
def test_a_page_and_the_error_translate_a_peers_strategy_alike(
    where: tuple[str, str], peer: str
) -> None:
    """The error for strategy='sliding_window' named the rolling window while the
    throttled-py and limits pages named the sliding log (found by a new user)."""
    from freqguard import ConfigError, Rule
    from freqguard.strategy import PEER_NAMES

    page, start = where
    [row] = [
        line
        for line in (ROOT / "docs" / "coming-from" / page).read_text().splitlines()
        if line.startswith(start)
    ]
    ours = PEER_NAMES[peer][1]
    assert f'strategy="{ours}"' in row.split(" | ")[1], row
    with pytest.raises(ConfigError, match=f"is strategy='{ours}' here"):
        Rule("5/minute", strategy=peer)
