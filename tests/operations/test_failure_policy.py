"""on_error, the circuit breaker and the deny cache, on an injected clock: each answer of
``on_error``, a policy's own, every operation honouring it, the three on the async guard,
the observers told of them, ``@capped`` taking them. The breaker, the deny cache and a
fallback shared out among workers have modules of their own (``test_breaker.py``,
``test_deny_cache.py``, ``test_fallback.py``).

The store here is a real MemoryBackend behind a switch that makes every call fail as a
dead Redis does (BackendUnavailable from a ConnectionError; ``failure_rig.py``); the
real-server faults are in tests/backends/test_faults.py and test_fault_replies.py.
"""

from __future__ import annotations

import asyncio

import pytest

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.failure import Breaker
from tests.operations.failure_rig import CTX, SMS, Switch, make

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


@pytest.mark.parametrize("on_error", ["allow", "deny"])
def test_a_refund_the_store_could_not_take_is_answered_as_failing_open(
    clock: ManualClock, on_error: str
) -> None:
    """docs/operations.md: a refund the store could not take is answered as failing open,
    whatever on_error is, nothing given back; with "deny" it was "fail-closed", a refund
    denied (a retry_after, nothing remaining), as though a give-back could be refused."""
    guard, store = make(clock, on_error)
    decision = guard.hit("sms", **CTX)
    store.down = True
    answered = guard.refund(decision)
    assert (answered.source, answered.allowed) == ("fail-open", True)
    store.down = False
    assert guard.refund(decision).source == "backend"  # surely not applied: made again


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
