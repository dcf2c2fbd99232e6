"""peek, hit_many, acquire, refund, reset, shadow rules and multi-part policies."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    CapExceeded,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rate,
    Rule,
    Strategy,
)
from tests.conftest import SMS, AnyGuardFactory
from tests.reference import RATE_STRATEGIES

VENDOR = Policy("vendor", Rule("200/second", strategy="gcra", burst=1, name="calls"))


def test_peek_changes_nothing_and_cost_zero_is_a_peek(make_any_guard: AnyGuardFactory) -> None:
    guard = make_any_guard([SMS])
    ctx: dict[str, Any] = {"recipient": "r", "content": "c"}
    guard.hit("sms", **ctx)
    first = guard.peek("sms", **ctx)
    assert first == guard.peek("sms", **ctx) == guard.hit("sms", 0, **ctx)
    assert first.allowed
    assert first.remaining == 1  # the content rule: one of two left
    guard.hit("sms", **ctx)
    exhausted = guard.peek("sms", **ctx)
    assert not exhausted.allowed
    assert exhausted.retry_after == 59.0


def test_hit_many_keeps_order_and_decides_same_keys_in_order(
    make_any_guard: AnyGuardFactory,
) -> None:
    guard = make_any_guard([SMS])
    contexts = [{"recipient": "a", "content": "x"}] * 3 + [{"recipient": "b", "content": "x"}]
    decisions = guard.hit_many("sms", contexts)
    assert [d.allowed for d in decisions] == [True, True, False, True]
    assert [d.remaining for d in decisions] == [1, 0, 0, 1]


def test_acquire_waits_for_its_own_turn_without_polling(clock: ManualClock) -> None:
    sleeps: list[float] = []

    class RecordingClock(ManualClock):
        def sleep(self, seconds: float) -> None:
            sleeps.append(seconds)
            super().sleep(seconds)

    rec = RecordingClock(clock.now())
    guard = Guard(MemoryBackend(), [VENDOR], clock=rec)
    start = rec.now()
    for _ in range(400):
        assert guard.acquire("vendor").allowed
    # 400 calls at 200/s with no burst: one every 5 ms, never faster, one sleep per wait
    assert rec.now() - start == pytest.approx(399 * 0.005)
    assert len(sleeps) == 399
    assert all(s == pytest.approx(0.005) for s in sleeps)


def test_acquire_fails_at_once_when_the_turn_is_beyond_the_timeout(clock: ManualClock) -> None:
    guard = Guard(MemoryBackend(), [Policy("slow", Rule("1/minute", by="k"))], clock=clock)
    guard.acquire("slow", k="x")
    before = clock.now()
    with pytest.raises(CapExceeded, match="later than the timeout") as caught:
        guard.acquire("slow", timeout=59.9, k="x")
    assert clock.now() == before  # did not wait in vain
    assert caught.value.decision.retry_after == 60.0
    assert guard.acquire("slow", timeout=60, k="x").allowed
    assert clock.now() == before + 60


def test_refund_gives_back_what_a_hit_took(make_any_guard: AnyGuardFactory) -> None:
    for strategy in RATE_STRATEGIES:
        guard = make_any_guard(
            [Policy(f"p{strategy.value}", Rule("3/minute", by="k", strategy=strategy))]
        )
        name = f"p{strategy.value}"
        for _ in range(3):
            guard.hit(name, k="x")
        assert not guard.hit(name, k="x").allowed
        refunded = guard.refund(name, k="x")
        assert refunded.remaining == 1, strategy
        assert guard.hit(name, k="x").allowed, strategy
        assert not guard.hit(name, k="x").allowed, strategy
        guard.refund(name, cost=3, k="x")
        guard.refund(name, cost=3, k="x")  # refunding more than was taken is harmless
        assert guard.peek(name, k="x").remaining == 3, strategy


def test_a_refund_is_never_refused(make_any_guard: AnyGuardFactory) -> None:
    # a refund answered as a hit of its cost would: a refund of more than a rule holds
    # (which the other rules may need) said "denied by" that rule, with a wait after which
    # no hit of that cost could pass either
    for strategy in RATE_STRATEGIES:
        name = f"p{strategy.value}"
        guard = make_any_guard(
            [
                Policy(
                    name,
                    Rule("3/minute", by="k", strategy=strategy, name="minute"),
                    Rule("10/hour", by="k", strategy=strategy, name="hour"),
                )
            ]
        )
        hit = guard.hit(name, 3, k="x")
        refunded = guard.refund(name, cost=5, k="x")
        assert (refunded.allowed, refunded.retry_after, refunded.denied_by) == (True, 0, ())
        assert [(s.allowed, s.retry_after) for s in refunded.rules] == [(True, 0)] * 2
        assert refunded.remaining == 3, strategy
        guard.hit(name, 3, k="x")
        unchanged = guard.refund(name, cost=0, k="x")  # gives back nothing: still full
        assert (unchanged.allowed, unchanged.remaining, unchanged.denied_by) == (True, 0, ())
        assert not guard.peek(name, k="x").allowed, strategy
        exact = guard.refund(hit)  # by its receipt: never refused either
        assert (exact.allowed, exact.retry_after) == (True, 0), strategy


def test_reset_forgets_one_context_only(make_any_guard: AnyGuardFactory) -> None:
    guard = make_any_guard([SMS])
    for who in ("a", "b"):
        guard.hit("sms", recipient=who, content="c")
        guard.hit("sms", recipient=who, content="c")
    guard.reset("sms", recipient="a", content="c")
    assert guard.peek("sms", recipient="a", content="c").remaining == 2
    assert not guard.peek("sms", recipient="b", content="c").allowed


def test_shadow_rules_report_but_never_block(make_any_guard: AnyGuardFactory) -> None:
    policy = Policy(
        "api",
        Rule("5/minute", by="user", name="enforced"),
        Rule("2/minute", by="user", name="trial", shadow=True),
    )
    guard = make_any_guard([policy])
    decisions = [guard.hit("api", user="u") for _ in range(6)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    third = {s.rule.name: s for s in decisions[2].rules}
    assert not third["trial"].allowed  # the shadow rule would have said no...
    assert decisions[2].denied_by == ()  # ...but did not block
    assert third["trial"].remaining == 0  # and it counts only what it would have admitted


def test_multi_part_policy_refunds_when_a_later_part_denies(
    make_any_guard: AnyGuardFactory,
) -> None:
    policy = Policy(
        "login",
        Rule("3/minute", by="user", name="per-user"),
        Rule("2/minute", by="ip", name="per-ip"),
    )
    guard = make_any_guard([policy])
    assert guard.hit("login", user="alice", ip="1.1.1.1").allowed
    assert guard.hit("login", user="bob", ip="1.1.1.1").allowed
    denied = guard.hit("login", user="alice", ip="1.1.1.1")
    assert [r.name for r in denied.denied_by] == ["per-ip"]
    # the per-user part consumed first, then was refunded: alice still has 2 of 3
    states = {s.rule.name: s for s in denied.rules}
    assert states["per-user"].remaining == 2
    assert guard.peek("login", user="alice", ip="2.2.2.2").remaining == 2


def test_rules_keyed_by_the_same_dimensions_in_any_order_share_one_log(
    make_any_guard: AnyGuardFactory,
) -> None:
    """Found by the differential test: `by=("u", "c")` and `by=("c", "u")` name one log; they
    used to land in two parts that both wrote it (the second saw the first's entry), so Redis
    denied a first hit that memory allowed."""
    policy = Policy(
        "p",
        Rule("1/second", by=(), name="global", shadow=True),
        Rule(Rate(1, timedelta(milliseconds=100)), ("u", "c"), "sliding-log", name="short"),
        Rule(Rate(1, timedelta(microseconds=100_001)), ("c", "u"), "sliding-log", name="long"),
    )
    guard = make_any_guard([policy])
    first = guard.hit("p", u="a", c="a")
    assert first.allowed
    assert [s.remaining for s in first.rules] == [0, 0, 0]
    assert [r.name for r in guard.hit("p", u="a", c="a").denied_by] == ["short", "long"]


def test_global_rule_with_per_recipient_rule(make_any_guard: AnyGuardFactory) -> None:
    policy = Policy(
        "campaign",
        Rule("3/minute", name="global", strategy="fixed-window"),
        Rule("1/minute", by="recipient", name="per-recipient"),
    )
    guard = make_any_guard([policy])
    results = [guard.hit("campaign", recipient=r).allowed for r in ["a", "a", "b", "c", "d"]]
    assert results == [True, False, True, True, False]


def test_async_guard_matches_the_sync_one(clock: ManualClock) -> None:
    sync = Guard(MemoryBackend(), [SMS, VENDOR], clock=clock)
    aclock = ManualClock(clock.now())
    asyn = AsyncGuard(MemoryBackend(), [SMS, VENDOR], clock=aclock)

    async def scenario() -> list[object]:
        out: list[object] = []
        for n in range(6):
            out.append(await asyn.hit("sms", recipient="r", content=f"c{n % 2}"))
        out.append(await asyn.peek("sms", recipient="r", content="c0"))
        out.append(await asyn.refund("sms", recipient="r", content="c0"))
        out.append(await asyn.hit_many("sms", [{"recipient": "s", "content": "c"}] * 3))
        await asyn.reset("sms", recipient="r", content="c0")
        out.append(await asyn.peek("sms", recipient="r", content="c0"))
        for _ in range(3):
            out.append(await asyn.acquire("vendor"))
        await asyn.aclose()
        return out

    expected: list[object] = []
    for n in range(6):
        expected.append(sync.hit("sms", recipient="r", content=f"c{n % 2}"))
    expected.append(sync.peek("sms", recipient="r", content="c0"))
    expected.append(sync.refund("sms", recipient="r", content="c0"))
    expected.append(sync.hit_many("sms", [{"recipient": "s", "content": "c"}] * 3))
    sync.reset("sms", recipient="r", content="c0")
    expected.append(sync.peek("sms", recipient="r", content="c0"))
    for _ in range(3):
        expected.append(sync.acquire("vendor"))
    assert asyncio.run(scenario()) == expected
    assert aclock.now() == clock.now()


def test_guard_without_clock_uses_the_backend_clock() -> None:
    backend_clock = ManualClock(1000)
    guard = Guard(MemoryBackend(backend_clock), [Policy("p", Rule("1/second", by="k"))])
    assert guard.hit("p", k="x").allowed
    assert not guard.hit("p", k="x").allowed
    guard.acquire("p", k="x")  # sleeps on the backend's clock, which is manual
    assert backend_clock.now() == 1001


@pytest.mark.parametrize("strategy", RATE_STRATEGIES)
def test_retry_after_is_exact(
    make_any_guard: AnyGuardFactory, clock: ManualClock, strategy: Strategy
) -> None:
    guard = make_any_guard([Policy("p", Rule("3 per 7 seconds", by="k", strategy=strategy))])
    clock.set((clock.now() // 7 + 1) * 7 + 0.123457)  # in one fixed window, off its edges
    for _ in range(3):
        assert guard.hit("p", k="x").allowed
        clock.advance(0.5)
    denied = guard.hit("p", k="x")
    assert not denied.allowed
    clock.advance(denied.retry_after - 0.000001)
    assert not guard.hit("p", k="x").allowed, "allowed 1 µs before retry_after"
    clock.advance(0.000001)
    assert guard.hit("p", k="x").allowed, "still denied at retry_after"
