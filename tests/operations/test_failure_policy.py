"""on_error, the circuit breaker and the deny cache, on an injected clock.

The store here is a real MemoryBackend behind a switch that makes every call fail as a
dead Redis does (BackendUnavailable from a ConnectionError); the real-server faults are in
tests/backends/test_faults.py and test_fault_replies.py.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
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
from freqguard.failure import Breaker, Fallback
from freqguard.script.calls import Reply, ScriptCall

SMS = Policy(
    "sms",
    Rule("2/59 seconds", by=("recipient", "content"), strategy="sliding-log", name="same-content"),
    Rule("3/minute", by="recipient", strategy="sliding-log", name="per-minute"),
)
VENDOR = Policy("vendor", Rule("2/second", strategy="gcra", burst=1, name="calls"))


class AsyncSide:
    """The async methods and the closes of a test store whose sync ones do the work."""

    def execute(self, call: ScriptCall) -> Reply:
        raise NotImplementedError

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        raise NotImplementedError

    async def aexecute(self, call: ScriptCall) -> Reply:
        return self.execute(call)

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        return self.execute_many(calls)

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class Switch(AsyncSide):
    """A MemoryBackend that fails every call while ``down``, counting the calls it got."""

    def __init__(self, clock: ManualClock) -> None:
        self.inner = MemoryBackend(clock)
        self.clock: Clock = clock
        self.down = False
        self.sent = False  # refused connections; True: timeouts (the call may be applied)
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if self.down:
            raise BackendUnavailable("store down", sent=self.sent) from ConnectionError("refused")

    def execute(self, call: ScriptCall) -> Reply:
        self._check()
        return self.inner.execute(call)

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        self._check()
        return self.inner.execute_many(calls)


def make(
    clock: ManualClock, on_error: Any = "raise", breaker: Breaker | None = None, **kw: Any
) -> tuple[Guard, Switch]:
    store = Switch(clock)
    guard = Guard(store, [SMS, VENDOR], clock, on_error=on_error, breaker=breaker, **kw)
    return guard, store


CTX: dict[str, Any] = {"recipient": "r1", "content": "hello"}


# -- on_error -------------------------------------------------------------------------------


def test_raise_is_the_default(clock: ManualClock) -> None:
    guard, store = make(clock)
    store.down = True
    with pytest.raises(BackendUnavailable):
        guard.hit("sms", **CTX)


def test_allow_fails_open_and_says_so(clock: ManualClock) -> None:
    guard, store = make(clock, "allow")
    store.down = True
    decision = guard.hit("sms", **CTX)
    assert decision.allowed
    assert decision.degraded
    assert decision.source == "fail-open"
    assert decision.receipt is None  # nothing was consumed: nothing to give back
    assert guard.refund(decision) is decision


def test_deny_fails_closed_with_a_retry_after(clock: ManualClock) -> None:
    guard, store = make(clock, "deny")
    store.down = True
    decision = guard.hit("sms", **CTX)
    assert not decision.allowed
    assert decision.source == "fail-closed"
    assert decision.degraded
    assert decision.retry_after > 0
    assert [r.id for r in decision.denied_by] == ["same-content", "per-minute"]
    assert decision.remaining == 0


def test_a_fallback_backend_decides_with_its_own_caps_and_takes_its_refunds(
    clock: ManualClock,
) -> None:
    fallback = MemoryBackend(clock)
    guard, store = make(clock, fallback)
    guard.hit("sms", **CTX)  # one on the store
    store.down = True
    first, second, third = (guard.hit("sms", **CTX) for _ in range(3))
    assert [d.allowed for d in (first, second, third)] == [True, True, False]
    assert {d.source for d in (first, second, third)} == {"fallback"}
    assert len(fallback) > 0
    again = guard.refund(first)  # given back where it was taken: on the fallback
    assert again.source == "fallback"
    assert guard.hit("sms", **CTX).allowed
    store.down = False
    # the store still holds its own one hit: back to it, with its caps
    assert [guard.hit("sms", **CTX).allowed for _ in range(2)] == [True, False]


# -- a fallback whose caps are shared out among the workers ---------------------------------

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


def test_a_policy_overrides_the_guards_on_error(clock: ManualClock) -> None:
    store = Switch(clock)
    strict = Policy("login", Rule("5/minute", by="user"), on_error="deny")
    guard = Guard(store, [SMS, strict], clock, on_error="allow")
    store.down = True
    assert guard.hit("sms", **CTX).allowed
    assert not guard.hit("login", user="u").allowed


def test_every_operation_honours_on_error(clock: ManualClock) -> None:
    guard, store = make(clock, "allow")
    decision = guard.hit("sms", **CTX)
    store.down = True
    assert guard.peek("sms", **CTX).source == "fail-open"
    many = guard.hit_many("sms", [CTX, {"recipient": "r2", "content": "x"}])
    assert [(d.allowed, d.source) for d in many] == [(True, "fail-open")] * 2
    assert guard.acquire("vendor").source == "fail-open"
    refunded = guard.refund(decision)
    assert refunded.degraded
    with pytest.raises(BackendUnavailable):  # a reset that did not happen is never answered
        guard.reset("sms", **CTX)
    assert guard.refund("sms", 1, **CTX).degraded
    store.down = False
    # the refund the store surely did not take can be made again, once
    assert guard.refund(decision).source == "backend"
    with pytest.raises(ConfigError, match="already refunded"):
        guard.refund(decision)


@pytest.mark.parametrize("on_error", ["raise", "allow"])
def test_a_refund_that_may_have_reached_the_store_is_not_given_back_twice(
    clock: ManualClock, on_error: str
) -> None:
    """A refund that timed out may still run when a hung server resumes: its receipt stays
    spent, so a retry cannot give back twice (an under-refund errs on the strict side)."""
    guard, store = make(clock, on_error)
    decision = guard.hit("sms", **CTX)
    store.down, store.sent = True, True
    if on_error == "raise":
        with pytest.raises(BackendUnavailable):
            guard.refund(decision)
    else:
        assert guard.refund(decision).degraded
    store.down = False
    with pytest.raises(ConfigError, match="already refunded"):
        guard.refund(decision)


def test_a_store_that_answers_with_an_error_does_not_open_the_breaker(clock: ManualClock) -> None:
    full = MemoryBackend(clock, max_keys=1, when_full="reject")
    breaker = Breaker(failures=1, clock=clock.now)
    guard = Guard(full, [SMS], clock, on_error="allow", breaker=breaker)
    guard.hit("sms", **CTX)
    decisions = [guard.hit("sms", recipient=f"r{i}", content="x") for i in range(5)]
    assert {d.source for d in decisions} == {"fail-open"}
    assert breaker.state == "closed"  # it is up, and still serves what it holds
    assert guard.peek("sms", **CTX).source == "backend"


def test_acquire_failing_closed_waits_for_the_probe_then_takes_its_turn(
    clock: ManualClock,
) -> None:
    breaker = Breaker(failures=1, cooldown=2.0, clock=clock.now)
    guard, store = make(clock, "deny", breaker)
    store.down = True
    with pytest.raises(CapExceeded):
        guard.acquire("vendor", timeout=1.0)
    start = clock.now()

    class Healing(ManualClock):
        def sleep(self, seconds: float) -> None:
            store.down = False  # the store comes back while the worker waits
            clock.advance(seconds)

        def now(self) -> float:
            return clock.now()

        def now_us(self) -> int:
            return clock.now_us()

    guard.clock = Healing()
    decision = guard.acquire("vendor", timeout=10.0)
    assert decision.allowed
    assert decision.source == "backend"
    assert clock.now() - start >= 1.0  # it waited for the breaker's probe, not a spin


def test_bad_on_error_deny_cache_and_breaker_are_refused(clock: ManualClock) -> None:
    with pytest.raises(ConfigError, match="on_error must be 'raise', 'allow', 'deny'"):
        Guard(on_error="ignore")
    with pytest.raises(ConfigError, match="on_error"):
        Policy("p", Rule("1/second"), on_error="open")
    with pytest.raises(ConfigError, match="deny_cache"):
        Guard(deny_cache=-1)
    with pytest.raises(ConfigError, match="breaker"):
        Guard(breaker="off")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="failures"):
        Breaker(failures=0)
    with pytest.raises(ConfigError, match="cooldown"):
        Breaker(cooldown=float("inf"))

    class SyncOnly:
        clock = ManualClock()

        def execute_many(self, calls: object) -> None: ...

    with pytest.raises(ConfigError, match="lacks aexecute"):
        AsyncGuard(on_error=SyncOnly())


# -- the breaker ----------------------------------------------------------------------------


def test_an_open_breaker_answers_at_once_and_one_probe_closes_it(clock: ManualClock) -> None:
    breaker = Breaker(failures=3, cooldown=5.0, clock=clock.now)
    guard, store = make(clock, "allow", breaker)
    store.down = True
    decisions = [guard.hit("sms", recipient=f"r{i}", content="c") for i in range(1000)]
    assert all(d.source == "fail-open" for d in decisions)
    assert store.calls == 3  # then the breaker opened: 997 hits never waited on the store
    assert breaker.state == "open"
    clock.advance(5.0)
    assert guard.hit("sms", **CTX).source == "fail-open"  # the probe failed: open again
    assert store.calls == 4
    assert breaker.state == "open"
    store.down = False
    clock.advance(5.0)
    first = guard.hit("sms", **CTX)
    assert first.source == "backend"  # the first hit after the store returns: the store's
    assert breaker.state == "closed"
    assert guard.hit("sms", **CTX).source == "backend"


def test_the_breaker_opens_on_consecutive_failures_only(clock: ManualClock) -> None:
    breaker = Breaker(failures=2, cooldown=1.0, clock=clock.now)
    guard, store = make(clock, "allow", breaker)
    for _ in range(5):
        store.down = True
        guard.hit("sms", **CTX)
        store.down = False
        guard.hit("sms", recipient="other", content="c")
    assert breaker.state == "closed"


def test_with_on_error_raise_an_open_breaker_raises_at_once(clock: ManualClock) -> None:
    guard, store = make(clock, "raise", Breaker(failures=1, clock=clock.now))
    store.down = True
    with pytest.raises(BackendUnavailable):
        guard.hit("sms", **CTX)
    with pytest.raises(BackendUnavailable, match="circuit is open"):
        guard.hit("sms", **CTX)
    assert store.calls == 1


# -- the deny cache -------------------------------------------------------------------------


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


# -- async ----------------------------------------------------------------------------------


def test_the_async_guard_honours_on_error_breaker_and_cache(clock: ManualClock) -> None:
    async def main() -> None:
        store = Switch(clock)
        breaker = Breaker(failures=2, cooldown=1.0, clock=clock.now)
        fallback = MemoryBackend(clock)
        guard = AsyncGuard(store, [SMS], clock, on_error=fallback, breaker=breaker, deny_cache=10)
        store.down = True
        got = [await guard.hit("sms", **CTX) for _ in range(4)]
        assert [d.allowed for d in got] == [True, True, False, False]
        assert [d.source for d in got] == ["fallback"] * 4
        assert store.calls == 2
        store.down = False
        clock.advance(1.0)
        assert (await guard.hit("sms", **CTX)).source == "backend"
        await guard.hit("sms", **CTX)
        assert (await guard.hit("sms", **CTX)).source == "backend"
        assert (await guard.hit("sms", **CTX)).source == "deny-cache"
        assert (await guard.refund(got[0])).source == "fallback"

    asyncio.run(main())


# -- observers ------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.decisions: list[tuple[str, bool, str]] = []
        self.errors: list[tuple[str, str, str]] = []

    def decided(self, decision: Decision, context: object, seconds: float) -> None:
        assert seconds >= 0
        self.decisions.append((decision.policy, decision.allowed, decision.source))

    def failed(self, error: BackendUnavailable, policy: str, backend: str) -> None:
        self.errors.append((policy, backend, type(error.__cause__).__name__))


def test_observers_hear_of_every_decision_and_store_error(clock: ManualClock) -> None:
    recorder = Recorder()
    breaker = Breaker(failures=2, clock=clock.now)
    guard, store = make(clock, "allow", breaker, deny_cache=10, observers=[recorder])
    for _ in range(4):
        guard.hit("sms", **CTX)
    guard.hit_many("sms", [CTX, {"recipient": "r9", "content": "x"}])
    guard.peek("sms", **CTX)  # not a decision
    store.down = True
    for _ in range(3):
        guard.hit("vendor")
    assert recorder.decisions == [
        ("sms", True, "backend"),
        ("sms", True, "backend"),
        ("sms", False, "backend"),
        ("sms", False, "deny-cache"),
        ("sms", False, "deny-cache"),
        ("sms", True, "backend"),
        ("vendor", True, "fail-open"),
        ("vendor", True, "fail-open"),
        ("vendor", True, "fail-open"),
    ]
    # two store errors; the third hit found the circuit open and did not call the store
    assert recorder.errors == [("vendor", "Switch", "ConnectionError")] * 2 + [
        ("vendor", "Switch", "NoneType")  # a CircuitOpen: told, with no driver error
    ]


def test_observers_must_have_both_methods() -> None:
    with pytest.raises(TypeError, match="observers"):
        Guard(observers=[object()])  # type: ignore[list-item]


# -- the decorator --------------------------------------------------------------------------


def test_capped_takes_on_error_for_its_own_cap_and_configure_the_guards(
    clock: ManualClock,
) -> None:
    from freqguard import capped
    from freqguard.decorators.defaults import configure, default_guard

    store = Switch(clock)
    guard = Guard(store, [], clock)

    @capped("2/minute", "user", guard=guard, on_error="allow")
    def read(user: str) -> str:
        return user

    @capped("2/minute", "user", guard=guard, on_error="deny", on_exceeded="skip")
    def write(user: str) -> str:
        return user

    store.down = True
    assert [read("u") for _ in range(3)] == ["u"] * 3  # failing open
    assert write("u") is None  # failing closed: skipped
    with pytest.raises(ConfigError, match="on_error"):
        capped("sms", on_error="allow", guard=Guard(policies=[SMS]))
    with pytest.raises(ConfigError, match="on_error must be"):
        capped("1/second", on_error="open")

    configure(MemoryBackend(clock), on_error="deny", deny_cache=5)
    try:
        assert default_guard().on_error == "deny"
        assert default_guard()._denials.cache is not None
    finally:
        configure()


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
