"""Calendar rules (``Rule("3/day", ..., calendar=True, tz=... | tz_from=...)``): a count per
local day, week (from Monday) or month (from the 1st) of a fixed zone or of each hit's own,
decided in the same call as the other rules on memory, Redis and Cluster, sync and async;
to the microsecond at local midnight, across the 2026 DST changes of New York and Berlin,
east and west of UTC; and every mistake a clear error that changes nothing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from freqguard import (
    BackendUnavailable,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.backends.redis import RedisBackend
from freqguard.engine.calendar import period_bounds
from freqguard.script.calls import ScriptCall
from freqguard.script.contract import HIT
from freqguard.script.strategies.calendar import OUTSIDE
from tests.conftest import AnyGuardFactory, Driven
from tests.servers import RedisServer, state_keys

US = 1_000_000
HOUR = 3600.0


def _utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=timezone.utc).timestamp()


def _local(zone: str, year: int, month: int, day: int, hour: int = 0) -> float:
    return datetime(year, month, day, hour, tzinfo=ZoneInfo(zone)).timestamp()


def _daily(limit: int = 2, *, tz: str | None = None, tz_from: str | None = None) -> Policy:
    rule = Rule(f"{limit}/day", by="r", name="day", calendar=True, tz=tz, tz_from=tz_from)
    return Policy("sms", rule)


def _fill(guard: Driven, limit: int, **ctx: str) -> None:
    assert [guard.hit("sms", **ctx).allowed for _ in range(limit + 1)] == [True] * limit + [False]


@pytest.mark.parametrize(
    "zone",
    ["Asia/Shanghai", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Kiritimati", "UTC"],
)
def test_a_day_ends_at_local_midnight_to_the_microsecond(
    make_any_guard: AnyGuardFactory, clock: ManualClock, zone: str
) -> None:
    guard = make_any_guard([_daily(tz=zone)])
    midnight = _local(zone, 2026, 6, 11)  # a Thursday, no DST change near
    clock.set(midnight - 5 * HOUR, backwards=True)
    _fill(guard, 2, r="a")
    clock.set(midnight - 1e-6)
    denied = guard.hit("sms", r="a")
    assert not denied.allowed
    assert denied.retry_after == pytest.approx(1e-6)
    clock.set(midnight)
    assert guard.hit("sms", r="a").allowed
    assert guard.peek("sms", r="a").reset_after == 24 * HOUR


@pytest.mark.parametrize(
    ("zone", "day", "hours"),
    [
        ("America/New_York", (2026, 3, 8), 23),
        ("America/New_York", (2026, 11, 1), 25),
        ("Europe/Berlin", (2026, 3, 29), 23),
        ("Europe/Berlin", (2026, 10, 25), 25),
    ],
)
def test_a_dst_day_is_one_day_of_23_or_25_hours(
    make_any_guard: AnyGuardFactory,
    clock: ManualClock,
    zone: str,
    day: tuple[int, int, int],
    hours: int,
) -> None:
    guard = make_any_guard([_daily(tz=zone)])
    start = _local(zone, *day)
    clock.set(start, backwards=True)
    _fill(guard, 2, r="a")
    assert guard.peek("sms", r="a").reset_after == hours * HOUR
    clock.set(start + hours * HOUR - 1e-6)  # the day's last microsecond: still that day
    assert not guard.hit("sms", r="a").allowed
    clock.set(start + hours * HOUR)
    assert guard.hit("sms", r="a").allowed


def test_each_recipient_counts_in_their_own_zone(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    guard = make_any_guard([_daily(tz_from="tz")])
    clock.set(_utc(2026, 6, 10, 23, 30), backwards=True)  # Berlin 01:30 on the 11th
    _fill(guard, 2, r="berlin", tz="Europe/Berlin")
    _fill(guard, 2, r="ny", tz="America/New_York")  # New York 19:30 on the 10th
    clock.set(_utc(2026, 6, 11, 4))  # New York's midnight has come, Berlin's day goes on
    assert guard.hit("sms", r="ny", tz="America/New_York").allowed
    assert not guard.hit("sms", r="berlin", tz="Europe/Berlin").allowed
    assert guard.peek("sms", r="berlin", tz="Europe/Berlin").reset_after == 18 * HOUR


def test_a_week_starts_on_monday_and_a_month_on_the_first(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    zone = "Asia/Tokyo"
    policy = Policy(
        "sms",
        Rule("3 per 7 days", by="r", name="week", calendar=True, tz=zone),
        Rule("5/month", by="r", name="month", calendar=True, tz=zone),
    )
    guard = make_any_guard([policy])
    clock.set(_local(zone, 2026, 2, 22, 12), backwards=True)  # Sunday 22 February
    assert [guard.hit("sms", r="a").allowed for _ in range(4)] == [1, 1, 1, 0]
    clock.set(_local(zone, 2026, 2, 23))  # Monday: a new week, the same month
    assert [guard.hit("sms", r="a").allowed for _ in range(3)] == [1, 1, 0]
    denied = guard.hit("sms", r="a")
    assert [r.id for r in denied.denied_by] == ["month"]
    assert denied.retry_after == 6 * 24 * HOUR  # 1 March: February has 28 days
    clock.set(_local(zone, 2026, 3, 1))
    assert guard.hit("sms", r="a").allowed


def test_a_calendar_rule_decides_with_rolling_rules_in_one_call(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    policy = Policy(
        "sms",
        Rule("2/minute", by="r", name="minute"),
        Rule("3/day", by="r", name="day", calendar=True, tz_from="tz"),
        Rule("2 per 59 seconds", by=("r", "content"), name="content"),
    )
    guard = make_any_guard([policy])
    clock.set(_utc(2026, 6, 10, 12), backwards=True)
    ctx = {"r": "a", "content": "hi", "tz": "Asia/Shanghai"}
    assert [guard.hit("sms", **ctx).allowed for _ in range(3)] == [1, 1, 0]
    clock.advance(60)
    decision = guard.hit("sms", **ctx)
    assert decision.allowed
    clock.advance(60)
    denied = guard.hit("sms", **ctx)
    assert [r.id for r in denied.denied_by] == ["day"]
    assert denied.retry_after == 4 * HOUR - 120  # Shanghai's midnight is 16:00 UTC
    guard.refund(decision)
    assert guard.hit("sms", **ctx).allowed


def test_a_zone_change_keeps_a_count_begun_inside_the_new_day(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    guard = make_any_guard([_daily(tz_from="tz")])
    # New York's day began at 04:00 UTC, Berlin's at 22:00 UTC the day before: the count
    # begun in New York's day lies wholly inside Berlin's, and is kept
    clock.set(_utc(2026, 6, 11, 5), backwards=True)
    _fill(guard, 2, r="a", tz="America/New_York")
    assert not guard.hit("sms", r="a", tz="Europe/Berlin").allowed
    # and back west: the count began (05:00 UTC) after New York's day did: kept too
    assert not guard.hit("sms", r="a", tz="America/New_York").allowed
    # a count begun before the new zone's day did is not known to lie inside it: dropped
    clock.set(_utc(2026, 6, 11, 21))  # New York 17:00, Berlin 23:00, on the 11th
    _fill(guard, 2, r="b", tz="America/New_York")
    clock.set(_utc(2026, 6, 11, 23))  # Berlin's 12th began at 22:00 UTC
    assert guard.hit("sms", r="b", tz="Europe/Berlin").allowed


def test_a_refund_after_the_period_changes_nothing(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    guard = make_any_guard([_daily(tz="UTC")])
    clock.set(_utc(2026, 6, 10, 23, 59), backwards=True)
    decision = guard.hit("sms", r="a")
    clock.set(_utc(2026, 6, 11, 0, 1))
    assert guard.hit("sms", r="a").allowed
    guard.refund(decision)  # yesterday's: today's count stays
    assert guard.hit("sms", r="a").allowed
    assert not guard.hit("sms", r="a").allowed


def test_a_per_key_limit_keeps_the_rules_period(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    guard = make_any_guard([_daily(tz_from="tz")])
    clock.set(_utc(2026, 6, 10, 12), backwards=True)
    guard.set_limit("sms", "day", "4/day", r="vip")
    _fill(guard, 4, r="vip", tz="Europe/Berlin")
    assert guard.limits_for("sms", r="vip")["day"] == Rule("4/day").rate
    with pytest.raises(ConfigError, match="per day"):
        guard.set_limit("sms", "day", "4/hour", r="vip")
    guard.reset("sms", r="vip")  # no zone needed to delete
    assert guard.hit("sms", r="vip", tz="Europe/Berlin").allowed


@pytest.mark.parametrize(
    ("ctx", "message"),
    [
        ({"r": "a"}, "give tz=..."),
        ({"r": "a", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"r": "a", "tz": "../../etc/passwd"}, "unknown time zone"),
        ({"r": "a", "tz": "x" * 200}, "an IANA name"),
    ],
)
def test_a_missing_or_unknown_zone_is_a_clear_error_that_counts_nothing(
    make_any_guard: AnyGuardFactory, clock: ManualClock, ctx: dict[str, str], message: str
) -> None:
    guard = make_any_guard([_daily(1, tz_from="tz")])
    with pytest.raises(ConfigError, match=message):
        guard.hit("sms", **ctx)
    assert guard.hit("sms", r="a", tz="UTC").allowed


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"calendar": True}, "exactly one of tz"),
        ({"calendar": True, "tz": "UTC", "tz_from": "tz"}, "exactly one of tz"),
        ({"calendar": True, "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"tz": "UTC"}, "calendar rules only"),
        ({"calendar": True, "tz": "UTC", "strategy": "gcra"}, "not gcra"),
        ({"calendar": True, "tz_from": "r"}, "is a dimension"),
        ({"calendar": "yes", "tz": "UTC"}, "calendar must be a bool"),
    ],
)
def test_calendar_mistakes_are_refused_at_construction(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Rule("3/day", by="r", **options)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="per day"):
        Rule("3/hour", by="r", calendar=True, tz="UTC")


def test_periods_around_a_time_in_a_zone() -> None:
    now = round(_utc(2026, 3, 8, 12) * US)
    b = period_bounds("day", "America/New_York", now)
    assert [d / US for d in b] == [_local("America/New_York", 2026, 3, d) for d in (7, 8, 9, 10)]
    assert (b[2] - b[1]) // US == 23 * 3600
    month = period_bounds("month", "UTC", round(_utc(2026, 12, 31, 23) * US))
    assert [datetime.fromtimestamp(t / US, timezone.utc).date().isoformat() for t in month] == [
        "2026-11-01",
        "2026-12-01",
        "2027-01-01",
        "2027-02-01",
    ]


def test_a_store_more_than_a_period_from_the_clients_clock_refuses_to_guess(
    redis_server: RedisServer, redis_backend: RedisBackend
) -> None:
    """The client sends periods around its own clock; a store whose time is in none of them
    (clocks more than a day apart) answers an error, on both twins, and writes nothing."""
    policy = _daily(tz="UTC")
    now = round(_utc(2026, 6, 10, 12) * US)
    for backend in (MemoryBackend(), redis_backend):  # the suite's: flushed, closed after
        guard = Guard(backend, [policy], clock=ManualClock(now / US))
        plan = guard._policies.plan("sms")
        texts = plan.texts({"r": "a"})
        (part,) = plan.parts_for(texts, now)
        call = ScriptCall(part, texts, now + 3 * 86_400 * US, 1, HIT)
        with pytest.raises(BackendUnavailable, match=OUTSIDE):
            backend.execute(call)
        assert guard.peek("sms", r="a").remaining == 2
    assert state_keys(redis_server.client) == []


def test_the_record_lives_until_the_local_day_ends(
    redis_server: RedisServer, redis_backend: RedisBackend
) -> None:
    guard = Guard(redis_backend, [_daily(tz="Asia/Kolkata")])  # flushed, closed after
    guard.hit("sms", r="a")  # on the server's time
    (key,) = state_keys(redis_server.client)
    now = datetime.now(timezone.utc)
    local = now.astimezone(ZoneInfo("Asia/Kolkata"))
    midnight = (local + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    left = (midnight - now).total_seconds()
    ttl = redis_server.client.pttl(key) / 1000
    assert left - 5 <= ttl <= left + 2 * 3600  # the day's end, with the record's slack
