"""Quiet hours (``Policy(..., quiet=QuietHours(...))``) and priorities (``priorities=``,
``Rule(only=..., caps=...)``, ``hit(..., priority=...)``): decided in the same call as the
policy's rules on memory, Redis and Cluster, sync and async; to the microsecond at the
quiet period's ends, across midnight and a DST change; every hit counting toward every rule
it falls under; and every mistake a clear error that changes nothing."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from freqguard import (
    AsyncGuard,
    CapExceeded,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    QuietHours,
    Rule,
    capped,
)
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit
from tests.conftest import AnyGuardFactory

HOUR = 3600.0
BERLIN = "Europe/Berlin"
PRIORITIES = ("transactional", "marketing")


def _local(zone: str, year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(zone)).timestamp()


def _quiet_policy(**options: object) -> Policy:
    """21:00 to 08:00; transactional messages pass them unless ``exempt`` says otherwise
    (priorities nothing refers to are refused)."""
    options.setdefault("exempt", ("transactional",))
    return Policy(
        "sms",
        Rule("5/hour", by="r", name="hour"),
        priorities=PRIORITIES,
        quiet=QuietHours("21:00", "08:00", **options),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("zone", ["Asia/Tokyo", "America/Los_Angeles"])
def test_quiet_hours_across_midnight_to_the_microsecond(
    make_any_guard: AnyGuardFactory, clock: ManualClock, zone: str
) -> None:
    guard = make_any_guard([_quiet_policy(tz_from="tz")])
    ctx = {"r": "a", "tz": zone, "priority": "marketing"}
    clock.set(_local(zone, 2026, 6, 11, 21) - 1e-6, backwards=True)
    assert guard.hit("sms", **ctx).allowed  # 20:59:59.999999
    clock.set(_local(zone, 2026, 6, 11, 21))
    denied = guard.hit("sms", **ctx)
    assert not denied.allowed
    assert [r.id for r in denied.denied_by] == ["quiet-hours"]
    assert denied.retry_after == 11 * HOUR  # until 08:00
    clock.set(_local(zone, 2026, 6, 12, 3))  # past midnight: still quiet
    assert guard.hit("sms", **ctx).retry_after == 5 * HOUR
    clock.set(_local(zone, 2026, 6, 12, 8) - 1e-6)
    assert not guard.hit("sms", **ctx).allowed
    clock.set(_local(zone, 2026, 6, 12, 8))
    # the denials counted nothing: the hour's 5 are all there
    assert [guard.hit("sms", **ctx).allowed for _ in range(6)] == [True] * 5 + [False]


def test_quiet_hours_within_a_day_and_in_a_fixed_zone(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    policy = Policy(
        "sms", Rule("5/hour", by="r"), quiet=QuietHours("12:00", "14:30", tz="Asia/Kolkata")
    )
    guard = make_any_guard([policy])
    clock.set(_local("Asia/Kolkata", 2026, 6, 11, 13), backwards=True)
    assert guard.hit("sms", r="a").retry_after == 1.5 * HOUR
    clock.set(_local("Asia/Kolkata", 2026, 6, 11, 14, 30))
    assert guard.hit("sms", r="a").allowed
    clock.set(_local("Asia/Kolkata", 2026, 6, 11, 23, 59))
    assert guard.hit("sms", r="a").allowed


def test_quiet_hours_on_a_dst_night(make_any_guard: AnyGuardFactory, clock: ManualClock) -> None:
    """New York springs forward at 02:00 on 8 March 2026: quiet from 21:00 to 08:00 that
    night lasts ten hours, not eleven."""
    zone = "America/New_York"
    guard = make_any_guard([_quiet_policy(tz=zone)])
    clock.set(_local(zone, 2026, 3, 7, 21), backwards=True)
    assert guard.hit("sms", r="a", priority="marketing").retry_after == 10 * HOUR


def test_an_exempt_priority_passes_and_counts(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    guard = make_any_guard([_quiet_policy(tz=BERLIN, exempt=("transactional",))])
    clock.set(_local(BERLIN, 2026, 6, 11, 23), backwards=True)
    otp = {"r": "a", "priority": "transactional"}
    assert [guard.hit("sms", **otp).allowed for _ in range(6)] == [True] * 5 + [False]
    denied = guard.hit("sms", r="a", priority="marketing")
    assert [r.id for r in denied.denied_by] == ["hour", "quiet-hours"]


def test_quiet_hours_consume_nothing_in_any_part(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    """On a policy of two parts, the quiet hours are decided in the first, so the second
    (the global cap, in another part) is never charged for a quiet hit."""
    policy = Policy(
        "sms",
        Rule("5/hour", by="r", name="rcpt"),
        Rule("3/hour", name="all"),
        quiet=QuietHours("21:00", "08:00", tz=BERLIN),
    )
    guard = make_any_guard([policy])
    clock.set(_local(BERLIN, 2026, 6, 11, 22), backwards=True)
    assert not any(guard.hit("sms", r=f"r{i}").allowed for i in range(10))
    clock.set(_local(BERLIN, 2026, 6, 12, 8))
    assert [guard.hit("sms", r=f"r{i}").allowed for i in range(4)] == [True] * 3 + [False]


def test_acquire_defers_to_the_morning_within_its_timeout(clock: ManualClock) -> None:
    guard = Guard(MemoryBackend(), [_quiet_policy(tz=BERLIN)], clock=clock)
    clock.set(_local(BERLIN, 2026, 6, 11, 23), backwards=True)
    with pytest.raises(CapExceeded):
        guard.acquire("sms", timeout=HOUR, r="a", priority="marketing")
    decision = guard.acquire("sms", timeout=12 * HOUR, r="a", priority="marketing")
    assert decision.allowed
    assert clock.now() == _local(BERLIN, 2026, 6, 12, 8)


def test_the_decorator_waits_for_the_morning(clock: ManualClock) -> None:
    policy = Policy(
        "send",
        Rule("100/day", by="r"),
        priorities=PRIORITIES,
        quiet=QuietHours("21:00", "08:00", tz=BERLIN, exempt=("transactional",)),
    )
    guard = Guard(MemoryBackend(), [policy], clock=clock)
    sent: list[float] = []

    @capped(
        "send",
        key={"r": "to", "priority": "priority"},
        guard=guard,
        on_exceeded="wait",
        timeout=12 * HOUR,
    )
    def send(to: str, priority: str) -> None:
        sent.append(clock.now())

    clock.set(_local(BERLIN, 2026, 6, 11, 23), backwards=True)
    send("a", "transactional")
    send("a", "marketing")
    assert sent == [_local(BERLIN, 2026, 6, 11, 23), _local(BERLIN, 2026, 6, 12, 8)]


@pytest.mark.parametrize("strategy", ["sliding-log", "fixed-window", "token-bucket", "gcra"])
def test_a_capped_priority_stops_at_its_cap_and_the_others_at_the_limit(
    make_any_guard: AnyGuardFactory, clock: ManualClock, strategy: str
) -> None:
    policy = Policy(
        "sms",
        Rule("5/day", by="r", strategy=strategy, name="day", caps={"marketing": 3}),
        priorities=PRIORITIES,
    )
    guard = make_any_guard([policy])
    mkt = {"r": "a", "priority": "marketing"}
    otp = {"r": "a", "priority": "transactional"}
    assert [guard.hit("sms", **mkt).allowed for _ in range(4)] == [True] * 3 + [False]
    assert [guard.hit("sms", **otp).allowed for _ in range(3)] == [True] * 2 + [False]
    # every hit of any priority counts: transactional first leaves marketing less
    assert [guard.hit("sms", r="b", priority="transactional").allowed for _ in range(2)] == [1, 1]
    assert [guard.hit("sms", r="b", priority="marketing").allowed for _ in range(2)] == [1, 0]


def test_a_rule_for_some_priorities_only_counts_only_them(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    policy = Policy(
        "sms",
        Rule("5/hour", by="r", name="all"),
        Rule("2/hour", by="r", name="promo", only=("marketing",)),
        priorities=PRIORITIES,
    )
    guard = make_any_guard([policy])
    otp = guard.hit("sms", r="a", priority="transactional")
    assert otp.allowed
    promo = otp.rules[1]
    assert promo.rule.shadow
    assert promo.allowed
    assert promo.retry_after == 0
    assert [guard.hit("sms", r="a", priority="marketing").allowed for _ in range(3)] == [1, 1, 0]
    assert [guard.hit("sms", r="a", priority="transactional").allowed for _ in range(3)] == [
        True,
        True,
        False,
    ]  # 1 + 2 + 2 = 5 in "all"


def test_a_refund_gives_back_a_capped_hit_exactly(
    make_any_guard: AnyGuardFactory, clock: ManualClock
) -> None:
    policy = Policy(
        "sms",
        Rule("3/day", by="r", name="day", caps={"marketing": 2}),
        Rule("2/hour", by="r", name="promo", only=("marketing",)),
        priorities=PRIORITIES,
    )
    guard = make_any_guard([policy])
    first = guard.hit("sms", r="a", priority="marketing")
    assert guard.hit("sms", r="a", priority="marketing").allowed
    assert not guard.hit("sms", r="a", priority="marketing").allowed
    guard.refund(first)
    assert guard.hit("sms", r="a", priority="marketing").allowed
    batch = guard.hit_many(
        "sms",
        [
            {"r": "b", "priority": p}
            for p in ("marketing", "marketing", "marketing", "transactional")
        ],
    )
    assert [d.allowed for d in batch] == [True, True, False, True]


@pytest.mark.parametrize(
    ("ctx", "message"),
    [
        ({"r": "a"}, "give priority=... .one of transactional, marketing., got none"),
        ({"r": "a", "priority": "bulk"}, "got 'bulk'"),
        ({"r": "a", "priority": "marketing"}, "give tz=..."),
        ({"r": "a", "priority": "marketing", "tz": "Nowhere/Land"}, "unknown time zone"),
    ],
)
def test_a_bad_priority_or_zone_is_a_clear_error_that_counts_nothing(
    make_any_guard: AnyGuardFactory, clock: ManualClock, ctx: dict[str, str], message: str
) -> None:
    guard = make_any_guard([_quiet_policy(tz_from="tz")])
    clock.set(_local(BERLIN, 2026, 6, 11, 12), backwards=True)
    with pytest.raises(ConfigError, match=message):
        guard.hit("sms", **ctx)
    ok = {"r": "a", "priority": "marketing", "tz": BERLIN}
    assert [guard.hit("sms", **ok).allowed for _ in range(6)] == [True] * 5 + [False]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: QuietHours("25:00", "08:00", tz="UTC"), "'HH:MM' from 00:00 to 23:59"),
        (lambda: QuietHours("8:00", "09:00", tz="UTC"), "got '8:00'"),
        (lambda: QuietHours("21:00", "21:00", tz="UTC"), "start and end are both"),
        (lambda: QuietHours("21:00", "08:00"), "exactly one of tz"),
        (lambda: QuietHours("21:00", "08:00", tz="Nowhere/Land"), "unknown time zone"),
        (lambda: Rule("5/day", by="r", caps={"marketing": 5}), r"from 1 to 4 .*got 5"),
        (lambda: Rule("5/day", by="r", caps={"marketing": 0}), "got 0"),
        (lambda: Rule("5/day", by="r", only=()), "names no priority"),
        (
            lambda: Rule("5/day", by="r", only=("a",), caps={"b": 1}),
            "yet the rule applies only to",
        ),
        (lambda: Policy("p", Rule("5/day", caps={"marketing": 3})), "does not have"),
        (
            lambda: Policy("p", Rule("5/day", only=("vip",)), priorities=PRIORITIES),
            r"priorities \['vip'\]",
        ),
        (
            lambda: Policy(
                "p",
                Rule("5/day"),
                priorities=PRIORITIES,
                quiet=QuietHours("21:00", "08:00", tz="UTC", exempt=("otp",)),
            ),
            "the quiet hours names",
        ),
        (lambda: Policy("p", Rule("5/day", name="quiet-hours")), "names the quiet hours"),
        (lambda: Policy("p", Rule("5/day"), priorities=("a", "a")), "distinct"),
        (lambda: Rule("5/day", by="priority"), "not allowed"),
    ],
)
def test_mistakes_are_refused_at_construction(make: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()  # type: ignore[operator]


def test_the_quiet_hours_take_no_per_key_limit(make_any_guard: AnyGuardFactory) -> None:
    guard = make_any_guard([_quiet_policy(tz="UTC")])
    with pytest.raises(ConfigError, match="quiet hours have no rate"):
        guard.set_limit("sms", "quiet-hours", "5/day", r="a")


def test_a_policy_with_quiet_hours_and_priorities_round_trips() -> None:
    policy = _quiet_policy(tz_from="tz", exempt=("transactional",))
    again = Policy(policy.name, *policy.rules, priorities=policy.priorities)
    assert again == policy
    assert again.quiet == policy.quiet
    assert "quiet=QuietHours('21:00', '08:00', tz_from='tz'" in repr(policy)
    assert policy.reads == ("tz", "priority")
    guard = Guard(MemoryBackend(), [policy], clock=ManualClock(_local(BERLIN, 2026, 6, 11, 12)))
    assert guard.hit("sms", r="a", tz=BERLIN, priority="marketing").allowed
    assert datetime.fromtimestamp(0, timezone.utc).year == 1970


def test_an_http_route_decides_by_the_priority_its_key_gives() -> None:
    policy = Policy(
        "send",
        Rule("3/hour", by="r", name="hour", caps={"marketing": 1}),
        priorities=PRIORITIES,
    )

    def key(request: object) -> dict[str, str]:
        headers = request.headers  # type: ignore[attr-defined]
        return {"r": headers["x-to"], "priority": headers["x-priority"]}

    app = Starlette(routes=[Route("/send", lambda r: PlainTextResponse("ok"), methods=["POST"])])
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(1_700_000_000))
    app.add_middleware(FreqGuardMiddleware, guard=guard, limits=[Limit("/send", policy, key=key)])

    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            codes = []
            for priority in ("marketing", "marketing", "transactional", "transactional", "x"):
                headers = {"x-to": "a", "x-priority": priority}
                codes.append((await http.post("/send", headers=headers)).status_code)
            return codes

    assert asyncio.run(run()) == [200, 429, 200, 200, 400]


def test_a_decision_denied_by_quiet_hours_shows_them_not_a_made_up_rate(clock: ManualClock) -> None:
    """The quiet-hours pseudo-rule is shown as the quiet hours it is: its repr printed as a
    rate of a billion a day, which a new user's first hour read as a rule of their own."""
    clock.set(_local(BERLIN, 2026, 11, 28, 23))
    guard = Guard(MemoryBackend(), [_quiet_policy(tz=BERLIN)], clock=clock)
    decision = guard.hit("sms", r="dana", priority="marketing")
    (quiet,) = decision.denied_by
    assert repr(quiet) == (
        "Rule(quiet=QuietHours('21:00', '08:00', tz='Europe/Berlin', "
        "exempt=('transactional',)), by=('r',), name='quiet-hours')"
    )
    assert "1000000000" not in repr(decision)
