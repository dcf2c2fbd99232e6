"""A recipient whose zone changes: a calendar rule counts each calendar day of the zone a hit
names, so hopping to a zone whose day has just begun starts a fresh count (documented, and
shown here: 81 on "3/day" in 26 hours). The rolling companion docs/messaging.md gives,
``Rule("6 per 23 hours", by="recipient")`` beside ``Rule("3/day", ..., calendar=True)``,
bounds it whatever the zone does (at most 6 in any 23 hours), and never denies a recipient
who stays in one zone (days of 23 hours or more). Both claims on memory and Redis."""

from __future__ import annotations

import itertools
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.backends.redis import RedisBackend
from tests.conftest import AnyGuardFactory, examples, flush
from tests.servers import RedisServer

HOUR = 3600
WINDOW_US = 23 * HOUR * 1_000_000
DAY = Rule("3/day", by="recipient", name="day", calendar=True, tz_from="tz")
ROLLING = Rule("6 per 23 hours", by="recipient", name="rolling")
START = 1_781_172_000  # 2026-06-11 10:00 UTC: 00:00 on the 12th at UTC+14

# east and west of UTC as far as zones go, half and quarter hours, DST north and south
ZONES = [
    "Etc/GMT-14",
    "Pacific/Chatham",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Asia/Kolkata",
    "Europe/Berlin",
    "UTC",
    "America/St_Johns",
    "America/New_York",
    "Pacific/Pago_Pago",
    "Etc/GMT+12",
]
# starts just before DST changes (New York, Berlin, Lord Howe, Chatham) and mid-year
STARTS = [START, 1_772_945_000, 1_774_738_000, 1_775_314_000, 1_790_863_000]


def _hop(guard: Any, clock: ManualClock, recipient: str) -> int:
    """Each hour for 26 hours, to the zone where a day has just begun; three hits each."""
    admitted = 0
    for offset in range(14, -13, -1):  # UTC+14 down to UTC-12: 27 zones
        tz = f"Etc/GMT{-offset:+d}"  # the Etc zones' signs are POSIX's, inverted
        admitted += sum(guard.hit("sms", recipient=recipient, tz=tz).allowed for _ in range(3))
        clock.advance(HOUR)
    return admitted


def test_zone_hopping_restarts_the_calendar_count_and_the_companion_bounds_it(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    clock.set(START, backwards=True)
    alone = make_any_guard([Policy("sms", DAY)])
    assert _hop(alone, clock, "a") == 81  # 27 fresh days: the calendar rule's documented cost
    clock.set(START, backwards=True)
    bounded = make_any_guard([Policy("sms", DAY, ROLLING)])
    assert _hop(bounded, clock, "b") == 12  # 6 at once, 6 more 23 hours later


def _backends(redis_backend: RedisBackend, redis_server: RedisServer) -> list[Any]:
    flush([redis_server])
    return [MemoryBackend(), redis_backend]


# (minutes to wait, the zone the hit names, hits); a wait of MIDNIGHT: to the next local
# midnight of the step's zone, of EVE: to the minute before it (the edges calendar days have)
MIDNIGHT, EVE = -1, -2
steps = st.lists(
    st.tuples(
        st.sampled_from([0, 1, 30, 61, 600, 23 * 60 - 1, 23 * 60, 24 * 60, MIDNIGHT, EVE, EVE]),
        st.integers(0, len(ZONES) - 1),
        st.integers(1, 4),
    ),
    min_size=1,
    max_size=60,
)


def _wait(clock: ManualClock, minutes: int, zone: str) -> None:
    if minutes >= 0:
        clock.advance(minutes * 60)
        return
    local = datetime.fromtimestamp(clock.now(), ZoneInfo(zone))
    for days in (1, 2):
        midnight = datetime.combine(local.date() + timedelta(days=days), time(), local.tzinfo)
        at = midnight.timestamp() - (60 if minutes == EVE else 0)
        if at >= clock.now():
            clock.set(at)
            return


@settings(max_examples=examples(30))
@given(steps=steps, start=st.sampled_from(STARTS))
def test_any_zone_changes_admit_at_most_6_in_any_23_hours(
    redis_backend: RedisBackend,
    redis_server: RedisServer,
    steps: list[tuple[int, int, int]],
    start: int,
) -> None:
    for backend in _backends(redis_backend, redis_server):
        clock = ManualClock(start)
        guard = Guard(backend, [Policy("sms", DAY, ROLLING)], clock=clock)
        admitted: list[int] = []
        for minutes, zone, hits in steps:
            _wait(clock, minutes, ZONES[zone])
            for _ in range(hits):
                if guard.hit("sms", recipient="+1", tz=ZONES[zone]).allowed:
                    admitted.append(clock.now_us())
        for i, first in enumerate(admitted):
            within = [t for t in admitted[i:] if t < first + WINDOW_US]
            assert len(within) <= 6, (first, within)


@settings(max_examples=examples(30))
@given(
    steps=steps.map(lambda found: [(minutes, 0, hits) for minutes, _, hits in found]),
    zone=st.sampled_from(ZONES),
    start=st.sampled_from(STARTS),
)
def test_the_companion_never_denies_a_recipient_who_stays_in_one_zone(
    redis_backend: RedisBackend,
    redis_server: RedisServer,
    steps: list[tuple[int, int, int]],
    zone: str,
    start: int,
) -> None:
    """Its days are 23 hours or more, so 23 hours hold at most two of them: at most the 6
    the calendar rule admits. With the companion or without, the same decisions."""
    for backend in _backends(redis_backend, redis_server):
        clock = ManualClock(start)
        alone = Guard(MemoryBackend(), [Policy("sms", DAY)], clock=clock)
        bounded = Guard(backend, [Policy("sms", DAY, ROLLING)], clock=clock)
        for minutes, _, hits in steps:
            _wait(clock, minutes, zone)
            for _ in range(hits):
                expected = alone.hit("sms", recipient="+1", tz=zone).allowed
                assert bounded.hit("sms", recipient="+1", tz=zone).allowed is expected


def _shortest_day(zone: ZoneInfo) -> tuple[float, float]:
    """The start and end of the zone's shortest local day of 2026 (a DST change's)."""
    starts = [
        datetime.combine(date(2026, 1, 1) + timedelta(days=n), time(), zone).timestamp()
        for n in range(366)
    ]
    return min(itertools.pairwise(starts), key=lambda day: day[1] - day[0])


@pytest.mark.parametrize("zone", ZONES)
def test_the_tightest_one_zone_pattern_passes_the_companion(zone: str) -> None:
    """Three in the last minute before the zone's shortest day, three at its start and three
    at the next day's: all nine admitted (a 23-hour day puts the last six 23 hours apart).
    A "6 per 24 hours" companion would deny the last three where that day is short."""
    start, end = _shortest_day(ZoneInfo(zone))
    for rolling, short in ((ROLLING, True), (Rule("6 per 24 hours", by="recipient"), False)):
        clock = ManualClock(start - 60)
        guard = Guard(MemoryBackend(), [Policy("sms", DAY, rolling)], clock=clock)
        admitted = []
        for at in (start - 60, start, end):
            clock.set(at)
            admitted += [guard.hit("sms", recipient="+1", tz=zone).allowed for _ in range(3)]
        denied = 0 if short or end - start >= 24 * HOUR else 3
        assert admitted == [True] * (9 - denied) + [False] * denied
