"""Quiet hours and calendar days on the days a zone's clocks change: every wall time inside
the quiet range is quiet however the clocks move (a time a change repeats, at both its
occurrences and between them; a time it skips, from the change on), and a day starts at the
first instant of its date. Checked minute by minute, for zones that change at midnight, by
half an hour, by two hours or by a whole day, against a reference computed from wall times
alone (the forward map, instant to wall time, that has no ambiguity); and at each edge the
reference finds, on memory, Redis and Cluster, sync and async."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from freqguard import Guard, ManualClock, MemoryBackend, Policy, QuietHours, Rule
from freqguard.engine.plan import PolicyPlan
from freqguard.script.strategies import calendar, quiet
from freqguard.script.strategies.base import StateSpec
from tests.conftest import AnyGuardFactory

US = 1_000_000
MINUTE = 60
DAY = 86_400

# (zone, year): every change of its UTC offset that year is checked
ZONES = [
    ("America/New_York", 2026),  # 02:00 skips to 03:00; 02:00 back to 01:00
    ("Asia/Beirut", 2026),  # midnight skips to 01:00; midnight back to 23:00 the day before
    ("America/Santiago", 2026),  # midnight back to 23:00; midnight skips to 01:00
    ("America/Havana", 2026),  # midnight skips to 01:00; 01:00 back to midnight (repeated)
    ("Australia/Lord_Howe", 2026),  # half an hour: 02:00 back to 01:30, 02:00 to 02:30
    ("Antarctica/Troll", 2026),  # two hours: 01:00 skips to 03:00, and back
    ("Pacific/Apia", 2011),  # 30 December 2011 never happened there
    ("America/St_Johns", 2010),  # 00:01 back to 23:01 the day before: midnight repeated
]


def _offset(zone: ZoneInfo, second: int) -> timedelta:
    found = datetime.fromtimestamp(second, timezone.utc).astimezone(zone).utcoffset()
    assert found is not None
    return found


def _changes(zone: ZoneInfo, year: int) -> Iterator[int]:
    """The UTC second of each change of the zone's offset in ``year`` (bisected)."""
    t = round(datetime(year, 1, 1, tzinfo=timezone.utc).timestamp())
    end = round(datetime(year + 1, 1, 1, tzinfo=timezone.utc).timestamp())
    while t < end:
        if _offset(zone, t) != _offset(zone, t + 3600):
            lo, hi = t, t + 3600
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if _offset(zone, mid) == _offset(zone, lo) else (lo, mid)
            yield hi
        t += 3600


def _wall(zone: ZoneInfo, second: int) -> tuple[int, int]:
    """(the local date's ordinal, the minute of the local day) at a UTC second."""
    local = datetime.fromtimestamp(second, timezone.utc).astimezone(zone)
    return local.toordinal(), local.hour * 60 + local.minute


def _reference_quiet(walls: list[tuple[int, int]], start: int, end: int) -> list[bool]:
    """Each minute quiet or not: a minute is quiet when its wall time is inside the range of
    one night (the local date it begins on), or between two minutes that are, of the same
    night (a quiet night is one stretch of time, so the first 01:45 between two 01:15s is
    quiet too)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, (day, minute) in enumerate(walls):
        if start < end:
            night = day if start <= minute < end else None
        else:  # crossing midnight
            night = day if minute >= start else day - 1 if minute < end else None
        if night is not None:
            first.setdefault(night, i)
            last[night] = i
    out = [False] * len(walls)
    for night, i in first.items():
        out[i : last[night] + 1] = [True] * (last[night] + 1 - i)
    return out


def _text(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def _plan(policy: Policy) -> PolicyPlan:
    return Guard(MemoryBackend(), [policy])._policies.plan(policy.name)


def _spec(plan: PolicyPlan, second: int, twin: object) -> StateSpec:
    """The spec of the twin ``twin`` that a call at ``second`` sends (the client's periods)."""
    (part,) = plan.parts_for(plan.texts({}), second * US)
    return next(spec for spec in part.specs if spec.twin is twin)


def _ranges(zone: ZoneInfo, change: int) -> list[tuple[int, int]]:
    """Quiet ranges that begin and end around the change's skipped or repeated wall times
    (at their edges, inside them, half an hour either side), and at midnight and 21:00."""
    before = (change + _offset(zone, change - 1).total_seconds()) % DAY // MINUTE
    after = (change + _offset(zone, change).total_seconds()) % DAY // MINUTE
    lo, hi = sorted((int(before), int(after)))
    times = {(t + 1440) % 1440 for t in (lo - 30, lo, (lo + hi) // 2, hi, hi + 30, 0, 21 * 60)}
    return [(s, e) for s, e in itertools.permutations(sorted(times), 2)]


def _sweep(zone: ZoneInfo, change: int) -> tuple[list[int], list[tuple[int, int]], slice]:
    """The UTC seconds of every minute from two days before the change to two after, their
    wall times, and the part checked (the day either side: whole nights around it)."""
    first = change - change % MINUTE - 2 * DAY
    seconds = list(range(first, first + 4 * DAY, MINUTE))
    return seconds, [_wall(zone, s) for s in seconds], slice(len(seconds) // 4, -len(seconds) // 4)


def _cases() -> list[tuple[str, int]]:
    return [(name, change) for name, year in ZONES for change in _changes(ZoneInfo(name), year)]


@pytest.mark.parametrize(("name", "change"), _cases())
def test_every_minute_around_a_change_is_quiet_as_its_wall_time_says(
    name: str, change: int
) -> None:
    zone = ZoneInfo(name)
    seconds, walls, checked = _sweep(zone, change)
    wrong = []
    for start, end in _ranges(zone, change):
        plan = _plan(
            Policy("p", Rule("5/hour"), quiet=QuietHours(_text(start), _text(end), tz=name))
        )
        expected = _reference_quiet(walls, start, end)
        # where each run of quiet minutes ends (the next minute that is not quiet)
        ends = [0] * len(seconds)
        for i in reversed(range(len(seconds) - 1)):
            ends[i] = ends[i + 1] if expected[i + 1] else seconds[i + 1]
        for i in range(len(seconds))[checked]:
            until = quiet.load(None, seconds[i] * US, _spec(plan, seconds[i], quiet))
            if bool(until) != expected[i] or (until and until != ends[i] * US):
                local = datetime.fromtimestamp(seconds[i], timezone.utc).astimezone(zone)
                wrong.append(f"{_text(start)}-{_text(end)} at {local.isoformat()} ({until})")
                break
    assert wrong == []


@pytest.mark.parametrize(("name", "change"), _cases())
def test_a_day_around_a_change_starts_at_the_first_instant_of_its_date(
    name: str, change: int
) -> None:
    """The reference: each date starts at the first minute whose wall date is it (a date the
    clocks skip starts and ends at once), and a minute is in the last date started."""
    zone = ZoneInfo(name)
    seconds, walls, checked = _sweep(zone, change)
    starts: dict[int, int] = {}
    for second, (day, _) in zip(seconds, walls, strict=True):
        starts.setdefault(day, second)
    for day in range(min(starts), max(starts)):  # a date never seen starts with the next
        starts.setdefault(day, starts[min(d for d in starts if d > day)])
    plan = _plan(Policy("p", Rule("3/day", calendar=True, tz=name)))
    for second in seconds[checked]:
        day = max(d for d, s in starts.items() if s <= second)
        expected = (starts[day] * US, starts[day + 1] * US)
        got = calendar.period(second * US, _spec(plan, second, calendar))
        assert got == expected, datetime.fromtimestamp(second, timezone.utc).astimezone(zone)


# (zone, start, end, a day of a change): each edge of the nights around it
EDGES = [
    ("Asia/Beirut", "00:15", "07:00", date(2026, 3, 29)),  # the start skipped
    ("America/New_York", "21:00", "01:30", date(2026, 10, 31)),  # the end repeated
    ("America/New_York", "01:30", "08:00", date(2026, 11, 1)),  # the start repeated
    ("America/New_York", "21:00", "02:30", date(2026, 3, 7)),  # the end skipped
    ("America/Havana", "23:00", "00:30", date(2026, 10, 31)),  # the end at a repeated midnight
    ("Australia/Lord_Howe", "01:45", "06:00", date(2026, 4, 5)),  # half an hour repeated
    ("Pacific/Apia", "21:00", "08:00", date(2011, 12, 29)),  # the day after never came
]


@pytest.mark.parametrize(("name", "start", "end", "day"), EDGES)
def test_each_edge_of_a_quiet_night_on_every_backend(
    make_any_guard: AnyGuardFactory,
    clock: ManualClock,
    name: str,
    start: str,
    end: str,
    day: date,
) -> None:
    zone = ZoneInfo(name)
    midnight = round(datetime(day.year, day.month, day.day, tzinfo=zone).timestamp())
    seconds = list(range(midnight - DAY, midnight + 2 * DAY, MINUTE))
    walls = [_wall(zone, s) for s in seconds]
    s_minute, e_minute = (int(t[:2]) * 60 + int(t[3:]) for t in (start, end))
    expected = _reference_quiet(walls, s_minute, e_minute)
    edges = [i for i in range(1, len(seconds)) if expected[i] != expected[i - 1]]
    assert edges  # the nights have edges to check
    policy = Policy("p", Rule("1000/day", by="r"), quiet=QuietHours(start, end, tz=name))
    guard = make_any_guard([policy])
    clock.set(seconds[0], backwards=True)
    for i in edges:
        clock.set(seconds[i] - 1e-6)
        assert guard.hit("p", r="a").allowed is not expected[i - 1], (start, end, seconds[i])
        clock.set(seconds[i])
        decision = guard.hit("p", r="a")
        assert decision.allowed is not expected[i], (start, end, seconds[i])
        if not decision.allowed:
            following = next((j for j in edges if j > i), None)
            if following is not None:
                assert decision.retry_after == seconds[following] - seconds[i]
