"""docs/django.md and docs/coming-from/*.md read by a DRF and django-ratelimit user: an
idiom they rely on that freqguard answers otherwise, with no page saying so or naming
freqguard's way."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DJANGO = ROOT / "docs" / "django.md"
DRF = ROOT / "docs" / "coming-from" / "drf.md"
RATELIMIT = ROOT / "docs" / "coming-from" / "django-ratelimit.md"


def _section(page: Path, heading: str) -> str:
    text = page.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end == -1 else text[start:end]


def test_the_testing_section_names_what_replaces_cache_clear() -> None:
    """DRF's and django-ratelimit's counts live in Django's cache, so their users' tests
    start each test from zero with ``cache.clear()`` (DRF's own throttling tests do, in
    ``setUp``). freqguard's counts live in its own store: ``cache.clear()`` leaves them, and
    a test suite on the default ``memory://`` carries one test's requests into the next
    (a scoped throttle of 2/min: 200, 200, 429, then ``cache.clear()``, still 429).
    django.md's Testing (lines 349-370) offers a ``ManualClock`` and ``guard()`` "to
    ``reset`` or ``peek``", but ``guard().reset("drf.orders")`` without the key's values is
    a ``ConfigError`` ("no rule is keyed by exactly ()"), and the way that does clear them
    (``freqguard.integrations.django.close()``, or a new ``Guard`` per test) is not named
    for this. Expected: the section names ``cache.clear()`` and freqguard's way instead."""
    testing = _section(DJANGO, "## Testing")
    assert "cache.clear()" in testing, testing


def test_is_ratelimited_that_counts_has_a_row() -> None:
    """django-ratelimit's ``is_ratelimited(..., increment=True)`` counts a hit from inside a
    view: the idiom for counting only failed logins (check with ``increment=False``, count
    after ``authenticate()`` fails). django-ratelimit.md's row (line 39) covers only the
    call that does not count (``peek``); neither it nor the "Not taken over" paragraph
    (lines 44-47) says what replaces the counting call (``guard().hit``, on a policy that
    must be registered first, with the key's values as the cap's key makes them).
    Expected: a row for ``increment=True``."""
    assert "increment=True" in RATELIMIT.read_text()
