"""A fallback whose caps are shared out among the workers (``Fallback(backend,
workers=N)``): together the workers admit about the limit, a burst is scaled, refunds go
back where they were taken, every operation is served, the async guard and view share out
alike, a lease taken on it is given back after a deploy, and a bad one is refused. On an
injected clock, the store behind the switch of ``failure_rig.py``; the edges are in
``test_fallback_edges.py``.
"""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.failure import Fallback
from tests.operations.failure_rig import Switch

FATIGUE = Policy(
    "fatigue",
    Rule("15/minute", by="recipient", name="per-minute"),
    Rule("50/day", by="recipient", strategy="fixed-window", name="per-day"),
)
THROTTLE = Policy("throttle", Rule("200/second", strategy="gcra", burst=20, name="vendor"))


def test_n_workers_falling_back_admit_together_about_the_limit(clock: ManualClock) -> None:
    """Four processes (four guards, each its own memory), the store away: each admits a
    quarter of the per-minute cap, so together they stay within it; a plain fallback would
    admit four times it."""
    store = Switch(clock)
    store.down = True
    shared = [
        Guard(store, [FATIGUE], clock, on_error=Fallback(MemoryBackend(clock), workers=4))
        for _ in range(4)
    ]
    plain = [Guard(store, [FATIGUE], clock, on_error=MemoryBackend(clock)) for _ in range(4)]
    ctx: dict[str, Any] = {"recipient": "+15550100"}
    together = sum(g.hit("fatigue", **ctx).allowed for g in shared for _ in range(20))
    assert together == 4 * (15 // 4) <= 15
    assert sum(g.hit("fatigue", **ctx).allowed for g in plain for _ in range(20)) == 4 * 15
    decision = shared[0].hit("fatigue", recipient="someone")
    assert decision.source == "fallback"
    assert [(r.rule.name, r.limit) for r in decision.rules] == [("per-minute", 3), ("per-day", 12)]


def test_a_shared_out_fallback_scales_bursts_takes_refunds_and_serves_every_operation(
    clock: ManualClock,
) -> None:
    store = Switch(clock)
    guard = Guard(
        store, [FATIGUE, THROTTLE], clock, on_error=Fallback(MemoryBackend(clock), workers=8)
    )
    store.down = True
    burst = [guard.hit("throttle") for _ in range(4)]
    assert [d.allowed for d in burst] == [True, True, False, False]  # 20 // 8 = 2
    assert burst[0].rules[0].limit == 2
    assert guard.refund(burst[0]).source == "fallback"  # given back there, once
    assert guard.hit("throttle").allowed
    assert guard.acquire("throttle", timeout=1.0).source == "fallback"
    many = guard.hit_many("fatigue", [{"recipient": "a"}, {"recipient": "a"}, {"recipient": "a"}])
    assert [(d.source, d.allowed) for d in many] == [("fallback", True)] * 1 + [
        ("fallback", False)
    ] * 2  # 15 // 8 = 1
    assert guard.peek("fatigue", recipient="a").source == "fallback"
    with pytest.raises(BackendUnavailable):  # a reset is never answered in the store's place
        guard.reset("fatigue", recipient="a")
    assert not guard.hit("fatigue", recipient="a").allowed


def test_the_async_guard_and_the_async_view_share_out_a_fallback_too(clock: ManualClock) -> None:
    from freqguard.decorators.adapters import as_async

    store = Switch(clock)
    store.down = True
    fallback = Fallback(MemoryBackend(clock), workers=5)
    aguard = AsyncGuard(store, [FATIGUE], clock, on_error=fallback)
    view = as_async(Guard(store, [FATIGUE], clock, on_error=fallback))

    async def admitted(guard: AsyncGuard, who: str) -> int:
        return sum([(await guard.hit("fatigue", recipient=who)).allowed for _ in range(10)])

    assert asyncio.run(admitted(aguard, "x")) == 3
    assert asyncio.run(admitted(view, "y")) == 3


def test_a_bad_fallback_is_refused_at_construction() -> None:
    with pytest.raises(ConfigError, match="workers must be an integer >= 1, got 0"):
        Fallback(MemoryBackend(), workers=0)
    with pytest.raises(ConfigError, match=r"workers must be an integer >= 1, got 2\.5"):
        Fallback(MemoryBackend(), workers=2.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="takes a backend"):
        Fallback("memory://", workers=2)
    policy = Policy("p", Rule("1/second"), on_error=Fallback(MemoryBackend(), workers=2))
    assert isinstance(policy.on_error, Fallback)


def test_a_lease_taken_on_the_fallback_is_given_back_after_a_deploy(clock: ManualClock) -> None:
    """The store away, a lease taken on the fallback (its limits shared out), then the
    policy replaced: the receipt names the shared-out plan, which the release did not
    find among the replaced ones, so it raised and the lease stayed held (review)."""
    store = Switch(clock)
    store.down = True
    fallback = Fallback(MemoryBackend(clock), workers=2)
    before = Policy("p", Rule("4 concurrent", lease=60, name="cc"))
    guard = Guard(store, [before], clock, on_error=fallback)
    taken = guard.take_lease("p")
    assert (taken.allowed, taken.source) == (True, "fallback")
    guard.add_policy(Policy("p", Rule("6 concurrent", lease=60, name="cc")), replace=True)
    guard.release(taken)
    assert guard.peek("p").remaining == 3  # the new plan shared out: 6 / 2, none held


@pytest.mark.parametrize("other", ["workers", "backend"])
def test_a_lease_taken_on_the_fallback_is_given_back_after_its_fallback_changed(
    clock: ManualClock, other: str
) -> None:
    """A deploy that changes the policy's Fallback (its workers, or its backend) while a
    lease taken on it is held: the release looked the receipt's plan up by the fallback
    the policy has now (its limits shared out among other workers, or on another backend),
    found none, and raised, the lease left held on the first fallback until it lapsed
    (review). The lease goes back where it was taken, by the plan it was taken under."""
    store = Switch(clock)
    store.down = True
    first = MemoryBackend(clock)
    rule = Rule("4 concurrent", lease=60, name="cc")
    guard = Guard(store, [Policy("p", rule, on_error=Fallback(first, workers=2))], clock)
    with guard.lease("p") as taken:
        assert (taken.allowed, taken.source) == (True, "fallback")
        now = Fallback(MemoryBackend(clock), workers=4) if other == "backend" else None
        now = now or Fallback(first, workers=4)
        guard.add_policy(Policy("p", rule, on_error=now), replace=True)
    # nothing held on the first fallback: its two (4 / 2) free again
    again = Guard(store, [Policy("p", rule, on_error=Fallback(first, workers=2))], clock)
    assert again.peek("p").remaining == 2


@pytest.mark.parametrize("now", ["allow", "deny", "raise"])
def test_a_pickled_fallback_lease_released_after_the_fallback_is_gone_is_refused(
    clock: ManualClock, now: str
) -> None:
    """A copy of a lease taken on the fallback (pickled: its receipt has no ``fallback``),
    released after a deploy set the policy's ``on_error`` to a string: the release goes
    "where it is now" (``failover.on_failure(plan)[0]``), which is the string, and the
    guard drives it as a backend: AttributeError 'str' object has no attribute
    'execute_many', the receipt left spent. Before d251c30..HEAD this was the
    ConfigError that names the policy as it was then, the receipt unspent."""
    store = Switch(clock)
    store.down = True
    rule = Rule("4 concurrent", lease=60, name="cc")
    guard = Guard(store, [Policy("p", rule, on_error=Fallback(MemoryBackend(clock), 2))], clock)
    copy = pickle.loads(pickle.dumps(guard.take_lease("p")))
    assert (copy.source, copy.receipt and copy.receipt.fallback) == ("fallback", None)
    guard.add_policy(Policy("p", rule, on_error=now), replace=True)
    with pytest.raises(ConfigError):
        guard.release(copy)
    assert copy.receipt is not None
    assert not copy.receipt.spent


def test_a_lease_taken_on_a_plain_fallback_backend_is_given_back_after_a_deploy(
    clock: ManualClock,
) -> None:
    """``on_error=backend`` (no Fallback: nothing shared out), the store away, a lease
    taken there, then the policy's lease limit changed: the release looks the receipt's
    plan up only among the Fallbacks' shared-out plans (``Failover.taken_under``), which a
    plain backend never makes, finds none, and the current plan refuses the receipt
    (ConfigError "... as it was registered then ..."), the lease held until it lapses.
    Before d251c30..HEAD the registry's replaced plans were searched, and it went back."""
    store = Switch(clock)
    store.down = True
    guard = Guard(
        store,
        [Policy("p", Rule("4 concurrent", lease=60, name="cc"))],
        clock,
        on_error=MemoryBackend(clock),
    )
    taken = guard.take_lease("p")
    assert (taken.allowed, taken.source) == (True, "fallback")
    guard.add_policy(Policy("p", Rule("6 concurrent", lease=60, name="cc")), replace=True)
    assert guard.release(taken).source == "fallback"
    assert guard.peek("p").remaining == 6  # none held
