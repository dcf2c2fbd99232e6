"""The short spellings people bring from django-ratelimit and DRF (``"5/m"``, ``"100/10s"``,
``"5/min"``) read as they read there, wherever freqguard takes a rate; months spelled out."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import ConfigError, Rate, parse_rate, parse_rates
from tests.conftest import examples

SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


@pytest.mark.parametrize(
    ("short", "written"),
    [
        # django-ratelimit's README and test suite
        ("5/m", "5/minute"),
        ("100/h", "100/hour"),
        ("800/d", "800/day"),
        ("100/s", "100/second"),
        ("100/10s", "100 per 10 seconds"),
        ("400/10m", "400 per 10 minutes"),
        ("1/2d", "1 per 2 days"),
        # DRF's: the first letter of a unit it knows
        ("5/min", "5/minute"),
        ("10/sec", "10/second"),
        ("100/hr", "100/hour"),
        ("3/day", "3/day"),
        # freqguard's own, unchanged: a month is a month
        ("1/month", "1 per 30 days"),
        ("2 per 59 seconds", "2 per 59 seconds"),
        ("5/M", "5/minute"),  # case as the grammar has always ignored it
    ],
)
def test_a_short_spelling_is_the_rate_it_names(short: str, written: str) -> None:
    assert parse_rate(short) == parse_rate(written)


def test_short_and_long_spellings_mix_in_one_text() -> None:
    assert parse_rates("10/m; 1000/d") == parse_rates("10/minute; 1000/day")


@pytest.mark.parametrize("text", ["1/mo", "5/ms", "5/y", "5/mon", "5/min s", "5/0m", "5/x"])
def test_what_would_be_a_guess_is_refused(text: str) -> None:
    """``mo``, ``mon`` and ``y`` are not guessed at (DRF reads ``1/mo`` as a minute):
    months and years are spelled out."""
    with pytest.raises(ConfigError, match="rate"):
        parse_rates(text)


def test_the_error_names_the_short_units() -> None:
    with pytest.raises(ConfigError, match=r"s, m, h or d \('5/m', '100/10s'\)"):
        parse_rate("5 per fortnight")


@settings(max_examples=examples(60))
@given(
    limit=st.integers(1, 10_000),
    multiple=st.one_of(st.none(), st.integers(1, 999)),
    unit=st.sampled_from(sorted(SECONDS)),
    spaces=st.sampled_from(["", " "]),
)
def test_every_short_spelling_reads_as_its_seconds(
    limit: int, multiple: int | None, unit: str, spaces: str
) -> None:
    count = "" if multiple is None else str(multiple)
    rate = parse_rate(f"{limit}{spaces}/{spaces}{count}{unit}")
    assert rate == Rate(limit, timedelta(seconds=(multiple or 1) * SECONDS[unit]))


@settings(max_examples=examples(100))
@given(st.text(st.sampled_from("0123456789/ ;,|smhdperinctoaywk"), max_size=24))
def test_any_text_is_rates_or_a_config_error(text: str) -> None:
    with contextlib.suppress(ConfigError):
        parse_rates(text)


@pytest.mark.parametrize(
    ("text", "days"), [("3/week", 7), ("3 per week", 7), ("2 per 2 weeks", 14), ("5/3weeks", 21)]
)
def test_a_week_is_seven_days(text: str, days: int) -> None:
    """The service lists a weekly calendar rule as ``3/week``, which an operator types back
    as a per-key limit: it was refused (``cannot parse rate``, found by a new user's run of
    docs/service.md)."""
    assert parse_rate(text) == Rate(int(text.split()[0].split("/")[0]), timedelta(days=days))
