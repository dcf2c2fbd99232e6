"""The four-rule SMS policy of the problem statement, on a pinned clock."""

from __future__ import annotations

from typing import Any

from freqguard import ManualClock, Policy, Rule, Strategy
from tests.conftest import SMS, GuardFactory
from tests.reference import RATE_STRATEGIES


def test_repeated_content_is_stopped_by_the_content_rule_without_consuming_recipient_rules(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    guard = make_guard([SMS])
    ctx: dict[str, Any] = {"recipient": "18829340001", "content": "Your code is 1234"}
    assert guard.hit("sms", **ctx).allowed
    assert guard.hit("sms", **ctx).allowed
    denied = guard.hit("sms", **ctx)
    assert not denied.allowed
    assert [r.id for r in denied.denied_by] == ["content-59s"]
    # the content rule's "no" consumed nothing in the recipient rules: 13 left of 15
    states = {s.rule.id: s for s in denied.rules}
    assert states["rcpt-1m"].remaining == 13
    assert states["rcpt-1d"].remaining == 48
    assert denied.retry_after == 59.0
    for n in range(13):
        assert guard.hit("sms", recipient="18829340001", content=f"other {n}").allowed
    assert not guard.hit("sms", recipient="18829340001", content="one more").allowed


def test_sixteen_distinct_messages_in_a_minute_stop_at_fifteen(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    guard = make_guard([SMS])
    results = []
    for n in range(16):
        results.append(guard.hit("sms", recipient="r1", content=f"msg {n}"))
        clock.advance(3)
    assert [d.allowed for d in results] == [True] * 15 + [False]
    assert [r.id for r in results[-1].denied_by] == ["rcpt-1m"]
    # the first hit leaves the window 60 s after it was made: 60 - 15 * 3 = 15 s from now
    assert results[-1].retry_after == 15.0


def test_fifty_per_rolling_day_across_many_minutes(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    guard = make_guard([SMS])
    start = clock.now()
    for n in range(50):
        assert guard.hit("sms", recipient="r1", content=f"m{n}").allowed, n
        clock.advance(600)  # every 10 minutes, far from the 15/minute rule
    denied = guard.hit("sms", recipient="r1", content="m50")
    assert not denied.allowed
    assert [r.id for r in denied.denied_by] == ["rcpt-1d"]
    # the first message leaves the rolling day at start + 86400
    assert denied.retry_after == start + 86_400 - clock.now()
    clock.set(start + 86_400 - 0.000001)
    assert not guard.hit("sms", recipient="r1", content="m50").allowed
    clock.set(start + 86_400)
    assert guard.hit("sms", recipient="r1", content="m50").allowed


def test_recipients_are_independent(make_guard: GuardFactory) -> None:
    guard = make_guard([SMS])
    for n in range(15):
        assert guard.hit("sms", recipient="a", content=f"m{n}").allowed
    assert not guard.hit("sms", recipient="a", content="x").allowed
    assert guard.hit("sms", recipient="b", content="x").allowed
    assert guard.hit("sms", recipient="b", content="x").allowed
    assert not guard.hit("sms", recipient="b", content="x").allowed
    assert guard.hit("sms", recipient="c", content="x").allowed


def test_design_check_five_per_minute(make_guard: GuardFactory, clock: ManualClock) -> None:
    for strategy in RATE_STRATEGIES:
        guard = make_guard([Policy(f"p-{strategy.value}", Rule("5 per 60 seconds", "r", strategy))])
        name = f"p-{strategy.value}"
        remaining = [guard.hit(name, r="18829340001").remaining for _ in range(5)]
        assert remaining == [4, 3, 2, 1, 0], strategy
        denied = [guard.hit(name, r="18829340001") for _ in range(3)]
        assert [d.allowed for d in denied] == [False] * 3, strategy
        assert all(d.remaining == 0 for d in denied)
        clock.advance(denied[0].retry_after)
        if strategy in (Strategy.TOKEN_BUCKET, Strategy.GCRA):
            clock.advance(48)  # buckets refill one token at a time; wait for all five
        assert guard.hit(name, r="18829340001").allowed, strategy
