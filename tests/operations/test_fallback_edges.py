"""Edges of ``Fallback(backend, workers=N)``, written failing by a second adversarial review,
on an injected clock (no sleeps), the store a real MemoryBackend behind the switch of
failure_rig."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from freqguard import (
    AsyncGuard,
    CapExceeded,
    Clock,
    ConfigError,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.decorators.adapters import as_async
from freqguard.failure import Fallback
from freqguard.script.calls import Reply, ScriptCall
from tests.operations.failure_rig import Switch

START = 1_700_000_000.0


class Bounded(ManualClock):
    """A ManualClock whose sleeps are counted: past ``most`` an acquire is looping for ever
    (each turn promised by ``retry_after`` never comes), and the test fails instead of
    hanging."""

    def __init__(self, start: float, most: int = 100) -> None:
        super().__init__(start)
        self.sleeps, self.most = 0, most

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if self.sleeps > self.most:
            raise RuntimeError(f"still waiting after {self.most} turns: the turn never comes")
        super().sleep(seconds)


# -- 1. a cost the store admits, above the shared-out capacity ------------------------------

EIGHT = Policy("eight", Rule("8/minute", by="r", name="per-minute"))


@pytest.mark.parametrize("strategy", ["sliding-log", "fixed-window", "token-bucket", "gcra"])
def test_a_cost_above_the_shared_out_capacity_fails_closed_until_the_store_returns(
    strategy: str,
) -> None:
    """cost=5 is checked against the store's plan (capacity 8) and accepted; the fallback's
    shared-out plan holds 8 // 4 = 2, so no hit of 5 could ever be admitted there. It used
    to be denied with retry_after = one window, a promise never kept (for ever, the store
    away). It now fails closed: denied until the store is probed again, then the store's."""
    clock = ManualClock(START)
    policy = Policy("eight", Rule("8/minute", by="r", strategy=strategy, name="per-minute"))
    store = Switch(clock)
    store.down = True
    guard = Guard(store, [policy], clock, on_error=Fallback(MemoryBackend(clock), workers=4))
    first = guard.hit("eight", cost=5, r="a")
    assert (first.source, first.allowed) == ("fail-closed", False)
    assert guard.hit("eight", cost=2, r="a").source == "fallback"  # what fits goes on there
    store.down = False
    clock.advance(first.retry_after)  # the breaker's probe
    again = guard.hit("eight", cost=5, r="a")
    assert (again.source, again.allowed) == ("backend", True)


def test_acquire_of_such_a_cost_waits_for_the_store_and_a_timeout_ends_it(side: str) -> None:
    """acquire(timeout=None) of a cost the fallback can never admit waits for the store's
    probe (it used to loop on the fallback's denials, the store back or not); with a
    timeout, and the store still away, it gives up at once (CapExceeded)."""

    class Healing(Bounded):
        def sleep(self, seconds: float) -> None:
            store.down = False  # the store returns while the worker waits
            super().sleep(seconds)

    clock = Healing(START)
    store = Switch(clock)
    store.down = True
    fallback = Fallback(MemoryBackend(clock), workers=4)
    if side == "sync":
        guard = Guard(store, [EIGHT], clock, on_error=fallback)
        with pytest.raises(CapExceeded):
            guard.acquire("eight", timeout=1.0, cost=5, r="a")
        decision = guard.acquire("eight", cost=5, r="a")
    else:
        aguard = AsyncGuard(store, [EIGHT], clock, on_error=fallback)
        with pytest.raises(CapExceeded):
            asyncio.run(aguard.acquire("eight", timeout=1.0, cost=5, r="a"))
        decision = asyncio.run(aguard.acquire("eight", cost=5, r="a"))
    assert (decision.source, decision.allowed) == ("backend", True)
    assert clock.sleeps == 1  # one wait: for the probe


# -- 2. a valid policy whose shared-out rule breaks the bounds --------------------------------


def test_a_policy_the_guard_accepts_is_not_refused_at_every_hit_because_of_its_fallback() -> None:
    """shared_out makes Rule(1/day, burst=3750) of Rule(3/day, burst=7500): its refill time
    (3750 days) is past the 10-year bound, so Rule() raises ConfigError. That happens
    lazily, in _guarded -> _fallback, on every operation, the store up or not: a guard that
    accepted the policy answers every hit with ConfigError."""
    clock = ManualClock(START)
    policy = Policy("p", Rule("3/day", strategy="gcra", burst=7500, name="r"))
    try:
        guard = Guard(
            MemoryBackend(clock), [policy], clock, on_error=Fallback(MemoryBackend(clock), 2)
        )
    except ConfigError:
        return  # refused when configured: fine
    assert guard.hit("p").allowed  # got: ConfigError "... more than the bound ... (10 years)"


# -- 3. as_async: a policy added through the view, a sync-only fallback backend ---------------


class SyncOnly:
    """A sync-only backend (as RedisBackend is): the async face drives it from threads."""

    def __init__(self, clock: ManualClock) -> None:
        self.inner = MemoryBackend(clock)
        self.clock: Clock = clock

    def execute(self, call: ScriptCall) -> Reply:
        return self.inner.execute(call)

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        return self.inner.execute_many(calls)

    def close(self) -> None:
        pass


class SyncSwitch(SyncOnly):
    """The store: sync-only, failing while ``down``."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.switch = Switch(clock)

    def execute(self, call: ScriptCall) -> Reply:
        return self.switch.execute(call)

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        return self.switch.execute_many(calls)


def test_a_policy_added_through_the_async_view_falls_back_on_the_sync_guard_too() -> None:
    """add_policy on the view stores the view's on_error (the fallback adapted for async:
    Fallback(ThreadedBackend(...))) in the registry it shares with the sync guard
    (_Adapted.__setitem__); the sync guard then drives a ThreadedBackend on a failure:
    AttributeError 'ThreadedBackend' object has no attribute 'execute_many'. (As at
    7f466a2 with a plain sync-only fallback backend.)"""
    clock = ManualClock(START)
    store = SyncSwitch(clock)
    guard = Guard(store, [], clock, on_error=Fallback(SyncOnly(clock), workers=2), breaker=None)
    view = as_async(guard)
    view.add_policy(Policy("late", Rule("4/minute", name="m")))
    store.switch.down = True
    assert asyncio.run(view.hit("late")).source == "fallback"
    assert guard.hit("late").source == "fallback"  # got: AttributeError


@pytest.mark.parametrize("taker", ["view", "guard"])
@pytest.mark.parametrize("how", ["release", "refund"])
def test_what_one_face_took_on_a_sync_only_fallback_goes_back_through_the_other(
    taker: str, how: str
) -> None:
    """A lease taken on the fallback through the async view (``as_async(guard)``) and given
    back by the sync guard, or the reverse: the receipt remembers the fallback backend as
    the taking face drove it (``Receipt.fallback``: a ThreadedBackend, or the sync-only
    backend itself), and the other face drives that object. AttributeError
    'ThreadedBackend' object has no attribute 'execute_many' (or 'SyncOnly' ... no
    'aexecute_many'), the receipt spent and the lease held until it lapses; before
    Receipt.fallback (d251c30) the giving face looked its own adapted fallback up."""
    clock = ManualClock(START)
    store = SyncSwitch(clock)
    store.switch.down = True
    policy = Policy("p", Rule("4 concurrent", lease=60, name="cc"))
    guard = Guard(store, [policy], clock, on_error=Fallback(SyncOnly(clock), workers=2))
    view = as_async(guard)

    async def through_view(name: str, *args: object) -> Decision:
        return await getattr(view, name)(*args)  # type: ignore[no-any-return]

    if taker == "view":
        taken = asyncio.run(through_view("take_lease", "p"))
        given = getattr(guard, how)(taken)
    else:
        taken = guard.take_lease("p")
        given = asyncio.run(through_view(how, taken))
    assert (taken.source, given.source) == ("fallback", "fallback")
    assert guard.peek("p").remaining == 2  # 4 // 2, none held


def test_capped_refuses_a_fallback_its_rates_cannot_be_shared_out_to_when_decorating() -> None:
    from freqguard import capped

    with pytest.raises(ConfigError, match=r"Fallback\(\.\.\., workers=2\) shares rule"):

        @capped(
            Rule("3/day", strategy="gcra", burst=7500, name="r"),
            guard=Guard(MemoryBackend()),
            on_error=Fallback(MemoryBackend(), workers=2),
        )
        def send() -> None: ...
