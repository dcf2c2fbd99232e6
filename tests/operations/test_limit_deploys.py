"""Per-key limits across parts and deploys, on every store (memory, Redis, Redis in bins,
Cluster): a limit belongs to one rule and one value of that rule's partition, whatever other
parts hold the same value; and after a deploy that changes the rule's strategy (same name)
it means the rate the operator wrote, as the rule's new strategy decides rates, or it does
not apply at all (logged): never numbers made for another strategy."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

import pytest

from freqguard import Guard, ManualClock, Policy, Rate, Rule
from freqguard.backends.base import SyncBackend
from freqguard.script import limits as script_limits


@pytest.fixture(autouse=True)
def _fresh_log_lines() -> None:
    """A limit that cannot apply is logged once per process: once per test here."""
    script_limits._REFUSED.clear()


TWO_PARTS = Policy(
    "api",
    Rule("100/minute", by="user", name="per-user"),
    Rule("100/minute", by="tenant", name="per-tenant"),
)


def _admitted(guard: Guard, n: int, user: str, tenant: str) -> int:
    return sum(guard.hit("api", user=user, tenant=tenant).allowed for _ in range(n))


def _on(store: SyncBackend, clock: ManualClock, rule: Rule) -> Guard:
    """A guard of policy "p" with one rule, as one deploy has it."""
    return Guard(store, [Policy("p", rule)], clock=clock)


MINUTE = Rate(1, timedelta(minutes=1))


@pytest.mark.parametrize("order", ["user-first", "tenant-first"])
def test_equal_values_of_two_parts_keep_their_own_limits(
    any_store: SyncBackend, clock: ManualClock, order: str
) -> None:
    guard = Guard(any_store, [TWO_PARTS], clock=clock)
    sets: list[Callable[[], None]] = [
        lambda: guard.set_limit("api", "per-user", "1/minute", user="17"),
        lambda: guard.set_limit("api", "per-tenant", "5000/minute", tenant="17"),
    ]
    for do in sets if order == "user-first" else sets[::-1]:
        do()
    assert guard.limits_for("api", user="17", tenant="17") == {
        "per-user": Rate(1, timedelta(minutes=1)),
        "per-tenant": Rate(5000, timedelta(minutes=1)),
    }
    assert _admitted(guard, 5, user="17", tenant="t") == 1
    # the tenant's 5000 a minute, over users of their own 100
    assert sum(guard.hit("api", user=f"u{i}", tenant="17").allowed for i in range(120)) == 120
    # clearing one keeps the other
    guard.clear_limit("api", "per-tenant", tenant="17")
    assert guard.limits_for("api", user="17", tenant="17")["per-user"] == Rate(
        1, timedelta(minutes=1)
    )
    clock.advance(60)
    assert _admitted(guard, 3, user="17", tenant="t2") == 1


KINDS = ["sliding-log", "fixed-window", "gcra", "token-bucket"]


@pytest.mark.parametrize("new", KINDS)
@pytest.mark.parametrize("old", KINDS)
def test_a_limit_means_what_was_written_after_the_rules_strategy_changes(
    any_store: SyncBackend, clock: ManualClock, old: str, new: str
) -> None:
    if old == new:
        pytest.skip("no change")
    before = Guard(
        any_store, [Policy("p", Rule("100/minute", by="u", name="r", strategy=old))], clock=clock
    )
    before.set_limit("p", "r", "2/minute", u="a")
    after = Guard(
        any_store, [Policy("p", Rule("100/minute", by="u", name="r", strategy=new))], clock=clock
    )
    assert after.limits_for("p", u="a") == {"r": Rate(2, timedelta(minutes=1))}
    hits = [after.hit("p", u="a") for _ in range(50)]
    assert sum(d.allowed for d in hits) == 2  # 2 at once: a window's 2, or a bucket of 2
    assert hits[-1].rules[0].capacity == 2
    assert hits[-1].rules[0].rule.rate == Rate(2, timedelta(minutes=1))
    clock.advance(60)
    assert sum(after.hit("p", u="a").allowed for _ in range(5)) == 2


def test_a_bucket_rules_own_burst_stays_under_a_limit_set_before_it_was_a_bucket(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    before = Guard(any_store, [Policy("p", Rule("100/minute", by="u", name="r"))], clock=clock)
    before.set_limit("p", "r", "2/minute", u="a")
    rule = Rule("100/minute", by="u", name="r", strategy="gcra", burst=1)
    after = Guard(any_store, [Policy("p", rule)], clock=clock)
    assert [after.hit("p", u="a").allowed for _ in range(3)] == [True, False, False]
    clock.advance(30)  # 2 a minute: one every 30 s
    assert [after.hit("p", u="a").allowed for _ in range(2)] == [True, False]


def test_an_exemption_survives_a_change_of_strategy(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    before = Guard(any_store, [Policy("p", Rule("2/minute", by="u", name="r"))], clock=clock)
    before.set_limit("p", "r", None, u="a")
    after = Guard(
        any_store, [Policy("p", Rule("2/minute", by="u", name="r", strategy="gcra"))], clock=clock
    )
    assert all(after.hit("p", u="a").allowed for _ in range(10))
    assert after.limits_for("p", u="a") == {"r": None}


def test_a_limit_the_new_strategy_cannot_take_does_not_apply_and_says_so(
    any_store: SyncBackend, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A gcra limit of 20,000 a minute is past a sliding log's bound (10,000 entries): after
    the rule becomes a sliding log, the limit is not applied (and is logged), rather than
    made into a log of 20,000 entries or cut down to another rate."""
    rule = Rule("5/minute", by="u", name="r", strategy="gcra")
    before = Guard(any_store, [Policy("p", rule)], clock=clock)
    before.set_limit("p", "r", "20000/minute", u="a")
    after = Guard(any_store, [Policy("p", Rule("5/minute", by="u", name="r"))], clock=clock)
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        assert sum(after.hit("p", u="a").allowed for _ in range(10)) == 5
        assert after.limits_for("p", u="a") == {"r": Rate(5, timedelta(minutes=1))}
    assert "cannot apply" in caplog.text
    assert "rule 'r' of policy 'p'" in caplog.text


def test_a_calendar_limit_applies_only_over_the_rules_own_period(
    any_store: SyncBackend, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    daily = Guard(any_store, [Policy("p", Rule("100/day", by="u", name="r"))], clock=clock)
    daily.set_limit("p", "r", "3/day", u="a")
    calendar = Rule("100/day", by="u", name="r", calendar=True, tz="UTC")
    same = Guard(any_store, [Policy("p", calendar)], clock=clock)
    assert sum(same.hit("p", u="a").allowed for _ in range(5)) == 3
    weekly = Rule("100/month", by="u", name="r", calendar=True, tz="UTC")
    other = Guard(any_store, [Policy("p", weekly)], clock=clock)
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        assert other.limits_for("p", u="a") == {"r": weekly.rate}
    assert "cannot apply" in caplog.text
