"""The deny cache: a denial answered from it until its retry_after, forgotten when a refund
or a reset through the guard frees it, never answering a smaller cost, bounded, and
deciding exactly as the store does. On an injected clock, the store behind the switch of
``failure_rig.py``; where it went wrong before is in ``test_deny_cache_holes.py``.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from freqguard import Decision, Guard, ManualClock, Policy, Rule
from tests.operations.failure_rig import CTX, Switch, make


def test_a_denial_is_answered_from_the_cache_until_its_retry_after(clock: ManualClock) -> None:
    guard, store = make(clock, deny_cache=100)
    assert [guard.hit("sms", **CTX).allowed for _ in range(3)] == [True, True, False]
    calls = store.calls
    cached = [guard.hit("sms", **CTX) for _ in range(50)]
    assert store.calls == calls  # no store call
    assert {d.source for d in cached} == {"deny-cache"}
    assert not any(cached)
    assert not cached[0].degraded
    clock.advance(30.0)
    later = guard.hit("sms", **CTX)
    assert later.source == "deny-cache"
    assert later.retry_after == pytest.approx(29.0)
    assert [r.id for r in later.denied_by] == ["same-content"]
    clock.advance(29.0)
    assert guard.hit("sms", **CTX).allowed  # exactly when the store would admit it


def test_a_refund_or_reset_through_the_guard_forgets_the_denials_it_frees(
    clock: ManualClock,
) -> None:
    guard, _ = make(clock, deny_cache=100)
    first = guard.hit("sms", **CTX)
    guard.hit("sms", **CTX)
    assert guard.hit("sms", **CTX).source == "backend"
    assert guard.hit("sms", **CTX).source == "deny-cache"
    guard.refund(first)
    assert guard.hit("sms", **CTX).allowed
    # a per-recipient rule is shared by every content: its reset frees every content's
    guard.hit("sms", recipient="r1", content="other")
    assert not guard.hit("sms", recipient="r1", content="third").allowed
    assert guard.hit("sms", recipient="r1", content="third").source == "deny-cache"
    guard.reset("sms", recipient="r1")
    assert guard.hit("sms", recipient="r1", content="third").allowed


def test_a_cached_denial_of_a_large_cost_does_not_answer_a_smaller_one(clock: ManualClock) -> None:
    policy = Policy("bytes", Rule("10/minute", by="user", strategy="sliding-log"))
    store = Switch(clock)
    guard = Guard(store, [policy], clock, deny_cache=10)
    guard.hit("bytes", 7, user="u")
    assert not guard.hit("bytes", 5, user="u").allowed
    assert guard.hit("bytes", 5, user="u").source == "deny-cache"
    assert guard.hit("bytes", 3, user="u").allowed  # it fits: the store says so


def test_the_deny_cache_is_bounded() -> None:
    clock = ManualClock()
    guard, _ = make(clock, deny_cache=10)
    for i in range(100):
        ctx: dict[str, Any] = {"recipient": f"r{i}", "content": "c"}
        for _ in range(3):
            guard.hit("sms", **ctx)
    assert guard._denials.cache is not None
    assert len(guard._denials.cache) == 10


@pytest.mark.parametrize("seed", range(5))
def test_the_deny_cache_decides_exactly_as_the_store(seed: int) -> None:
    """The same stream of hits, refunds and resets, with and without the cache: the same
    answers (the cache only saves calls), and never a later retry_after than the store's."""
    rnd = random.Random(seed)
    a_clock, b_clock = ManualClock(), ManualClock()
    plain, _ = make(a_clock)
    cached, store = make(b_clock, deny_cache=8)
    held: list[tuple[Decision, Decision]] = []
    for _ in range(3000):
        step = rnd.random()
        ctx = {"recipient": f"r{rnd.randrange(4)}", "content": f"c{rnd.randrange(3)}"}
        if step < 0.05 and held:
            a, b = held.pop(rnd.randrange(len(held)))
            assert plain.refund(a).allowed == cached.refund(b).allowed
        elif step < 0.07:
            plain.reset("sms", **ctx)
            cached.reset("sms", **ctx)
        else:
            cost = rnd.choice((1, 1, 1, 2))
            a, b = plain.hit("sms", cost, **ctx), cached.hit("sms", cost, **ctx)
            assert a.allowed == b.allowed
            # hits of other contexts may have pushed a shared rule's turn further away
            # since the denial was cached: its retry_after is a lower bound, never later
            assert b.retry_after <= a.retry_after + 1e-6
            if a.allowed and rnd.random() < 0.3:
                held.append((a, b))
        dt = rnd.choice((0.0, 0.001, 0.5, 3.0))
        a_clock.advance(dt)
        b_clock.advance(dt)
    assert store.calls < 3000  # it did save calls


def test_a_cached_denial_s_waits_are_whole_microseconds_as_the_store_s(
    clock: ManualClock,
) -> None:
    """An operator's first hour: a deny-cache answer read ``"retry_after":
    45.332014176000484`` beside its rule's ``45.332015``: a float's difference of two times,
    where every other answer is whole µs. The cached denial's top-level waits are µs too,
    and the binding rule's retry_after is the top-level one."""
    guard, _ = make(clock, deny_cache=100)
    for _ in range(3):
        guard.hit("sms", **CTX)
    clock.advance(0.123456789)  # a time between two µs
    cached = guard.hit("sms", **CTX)
    assert cached.source == "deny-cache"
    assert cached.retry_after == round(cached.retry_after, 6)
    assert cached.retry_after == max(r.retry_after for r in cached.rules)
