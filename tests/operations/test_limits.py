"""Per-key limits (``set_limit``, ``clear_limit``, ``limits_for``) on memory, Redis and Redis
Cluster, sync and async: one rule at another rate for one partition value, exempt, for a
ttl, visible to every guard of the store, exact refunds across a change, and every bad input
a clear error that changes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from freqguard import ConfigError, Policy, Rate, Rule
from tests.conftest import SMS, AnyGuardFactory

RATES = {
    "rcpt-1m": Rate(15, timedelta(minutes=1)),
    "rcpt-1d": Rate(50, timedelta(days=1)),
    "content-59s": Rate(2, timedelta(seconds=59)),
    "content-59m": Rate(5, timedelta(minutes=59)),
}


def _send(guard: object, n: int, recipient: str = "a", start: int = 0) -> list[bool]:
    """``n`` messages of distinct content to one recipient."""
    return [
        guard.hit("sms", recipient=recipient, content=f"m{i}").allowed  # type: ignore[attr-defined]
        for i in range(start, start + n)
    ]


def test_a_limit_changes_one_rule_for_one_recipient(make_any_guard: AnyGuardFactory) -> None:
    guard = make_any_guard([SMS])
    assert guard.limits_for("sms", recipient="a") == RATES
    guard.set_limit("sms", "rcpt-1m", "20/minute", recipient="a")
    assert guard.limits_for("sms", recipient="a") == {
        **RATES,
        "rcpt-1m": Rate(20, timedelta(seconds=60)),
    }
    assert guard.limits_for("sms", recipient="b") == RATES
    assert _send(guard, 21) == [True] * 20 + [False]
    assert _send(guard, 16, recipient="b") == [True] * 15 + [False]
    denied = guard.hit("sms", recipient="a", content="late")
    (rule,) = denied.denied_by
    assert (rule.id, rule.rate, rule.name) == (
        "rcpt-1m",
        Rate(20, timedelta(seconds=60)),
        "rcpt-1m",
    )
    assert denied.rules[0].capacity == 20
    guard.clear_limit("sms", "rcpt-1m", recipient="a")
    assert guard.limits_for("sms", recipient="a") == RATES
    assert denied.retry_after > 0


def test_an_exempt_rule_counts_but_never_denies(make_any_guard: AnyGuardFactory) -> None:
    guard = make_any_guard([SMS])
    guard.set_limit("sms", SMS.rules[0], None, recipient="a")  # the Rule itself names it
    assert guard.limits_for("sms", recipient="a")["rcpt-1m"] is None
    decisions = [guard.hit("sms", recipient="a", content=f"m{i}") for i in range(20)]
    assert all(decisions)
    assert decisions[-1].rules[0].rule.shadow
    assert decisions[-1].rules[0].remaining == 0  # counted all along
    assert decisions[-1].rules[1].remaining == 30  # the day's rule: 50 - 20
    guard.clear_limit("sms", "rcpt-1m", recipient="a")
    assert not guard.hit("sms", recipient="a", content="after")  # the minute is full


def test_a_limit_lapses_after_its_ttl(make_any_guard: AnyGuardFactory, clock: object) -> None:
    guard = make_any_guard([SMS])
    guard.set_limit("sms", "rcpt-1m", "1/minute", recipient="a", ttl=timedelta(seconds=10))
    assert _send(guard, 2) == [True, False]
    clock.advance(9.999999)  # type: ignore[attr-defined]
    assert guard.limits_for("sms", recipient="a")["rcpt-1m"] == Rate(1, timedelta(seconds=60))
    clock.advance(0.000001)  # type: ignore[attr-defined]
    assert guard.limits_for("sms", recipient="a") == RATES
    assert _send(guard, 1, start=5) == [True]


def test_a_limit_set_by_one_guard_applies_to_every_guard_of_the_store(
    make_any_guard: AnyGuardFactory,
) -> None:
    operator, worker = make_any_guard([SMS]), make_any_guard([SMS])
    assert _send(worker, 15) == [True] * 15
    operator.set_limit("sms", "rcpt-1m", "17/minute", recipient="a")
    assert _send(worker, 3, start=15) == [True, True, False]
    operator.set_limit("sms", "rcpt-1m", "3/minute", recipient="a")  # replaces the last one
    assert _send(worker, 1, start=20) == [False]
    assert worker.limits_for("sms", recipient="a")["rcpt-1m"] == Rate(3, timedelta(seconds=60))


def test_a_global_rule_and_a_rule_of_another_part(make_any_guard: AnyGuardFactory) -> None:
    policy = Policy(
        "vendor",
        Rule("3/second", name="all", strategy="gcra"),
        Rule("2/second", by="tenant", name="tenant"),
    )
    guard = make_any_guard([policy])
    guard.set_limit("vendor", "all", "5/second")  # a global rule: no context
    guard.set_limit("vendor", "tenant", "4/second", tenant="t1")
    hits = [guard.hit("vendor", tenant="t1").allowed for _ in range(6)]
    assert hits == [True] * 4 + [False] * 2
    assert guard.limits_for("vendor", tenant="t1") == {
        "all": Rate(5, timedelta(seconds=1)),
        "tenant": Rate(4, timedelta(seconds=1)),
    }
    assert [guard.hit("vendor", tenant="t2").allowed for _ in range(2)] == [True, False]


@pytest.mark.parametrize("strategy", ["sliding-log", "fixed-window", "gcra", "token-bucket"])
def test_a_refund_of_a_hit_made_under_the_old_limit_gives_back_exactly_it(
    make_any_guard: AnyGuardFactory, clock: object, strategy: str
) -> None:
    policy = Policy("p", Rule("4/second", by="u", name="r", strategy=strategy))
    guard = make_any_guard([policy])
    first = guard.hit("p", u="a")
    guard.hit("p", u="a")
    clock.advance(0.1)  # type: ignore[attr-defined]
    guard.set_limit("p", "r", "4 per 2 seconds", u="a")  # half the rate, the same capacity
    before = guard.peek("p", u="a")
    after = guard.refund(first)
    if strategy in ("sliding-log", "fixed-window"):  # its one unit, not the second hit's
        assert after.rules[0].remaining - before.rules[0].remaining == 1
    else:  # the hit's own span at 250 ms a token, less the 100 ms that passed
        assert round(before.reset_after - after.reset_after, 6) == 0.15


def test_a_bucket_refund_gives_back_the_hits_own_span(
    make_any_guard: AnyGuardFactory, clock: object
) -> None:
    """The mark carries the interval the hit was charged at: a refund after the rate
    slowed gives back that span, not one at the new interval."""
    policy = Policy("p", Rule("10/second", by="u", name="r", strategy="gcra"))
    guard = make_any_guard([policy])
    hits = [guard.hit("p", u="a") for _ in range(5)]  # tat 500 ms ahead
    guard.set_limit("p", "r", "1/second", u="a")  # 1 s a token from now on
    before = guard.peek("p", u="a")
    guard.refund(hits[0])
    assert round(before.reset_after - guard.peek("p", u="a").reset_after, 6) == 0.1


BAD = [
    (("sms", "nope", "1/second"), {"recipient": "a"}, "has no rule 'nope'"),
    (("nope", "rcpt-1m", "1/second"), {"recipient": "a"}, "unknown policy 'nope'"),
    (("sms", "rcpt-1m", "1/second"), {}, "per value of its partition (recipient)"),
    (("sms", "content-59s", "1/second"), {"recipient": "a", "content": "x"}, "got content"),
    (("sms", "rcpt-1m", "1/second"), {"user": "a"}, "got user"),
    (("sms", "rcpt-1m", 5), {"recipient": "a"}, "a rate string, a Rate or None"),
    (("sms", "rcpt-1m", "lots"), {"recipient": "a"}, "lots"),
    (("sms", "rcpt-1m", "20000/minute"), {"recipient": "a"}, "its limit is at most 10000"),
    (("sms", "rcpt-1m", "1/second"), {"recipient": 1.5}, "must be a str or an int"),
]


@pytest.mark.parametrize(("args", "ctx", "message"), BAD)
def test_a_bad_limit_is_a_clear_error_that_changes_nothing(
    make_any_guard: AnyGuardFactory, args: tuple[object, ...], ctx: dict[str, object], message: str
) -> None:
    guard = make_any_guard([SMS])
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        guard.set_limit(*args, **ctx)
    assert guard.limits_for("sms", recipient="a") == RATES


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), True, "10", 10**12])
def test_a_bad_ttl_is_a_clear_error(make_any_guard: AnyGuardFactory, ttl: object) -> None:
    guard = make_any_guard([SMS])
    with pytest.raises(ConfigError, match="ttl must"):
        guard.set_limit("sms", "rcpt-1m", "1/second", recipient="a", ttl=ttl)
    assert guard.limits_for("sms", recipient="a") == RATES


def test_a_limit_the_policys_bounds_cannot_hold_is_refused(
    make_any_guard: AnyGuardFactory,
) -> None:
    policy = Policy(
        "p",
        Rule("8000/day", by="u", name="d"),
        Rule("8000/hour", by=("u", "c"), name="h"),
        Rule("2000/minute", by=("u", "x"), name="m"),
    )
    guard = make_any_guard([policy])
    with pytest.raises(ConfigError, match=r"rule 'm' of policy 'p'.*logs hold at most 20000"):
        guard.set_limit("p", "m", "5000/minute", u="a")
    with pytest.raises(ConfigError, match="per value of its partition"):
        guard.limits_for("p", c="x")  # the partition is missing
    with pytest.raises(ConfigError, match="per value of its partition"):
        guard.limits_for("p", u="a", typo="y")
    assert guard.limits_for("p", u="a", c="any") == guard.limits_for("p", u="a")
    assert guard.limits_for("p", u="a")["m"] == Rate(2000, timedelta(minutes=1))
