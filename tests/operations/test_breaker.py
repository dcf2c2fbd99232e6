"""The circuit breaker: it opens on consecutive failures only, answers at once while open
(raising, with ``on_error="raise"``), and one probe closes it; a store that answers with
an error does not open it; ``acquire`` failing closed waits for its probe. On an injected
clock, the store behind the switch of ``failure_rig.py``; a breaker per node is in
``test_failure_nodes.py`` and ``test_breaker_edges.py``.
"""

from __future__ import annotations

import pytest

from freqguard import BackendUnavailable, CapExceeded, Guard, ManualClock, MemoryBackend
from freqguard.failure import Breaker
from tests.operations.failure_rig import CTX, SMS, make


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


def test_the_line_that_opens_the_circuit_names_the_last_failure_s_cause(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A guard has no observer by default, so the breaker's line is the only one an app
    whose store is down logs (a new user's pass: thirty 503s and one line, "circuit open
    after 5 consecutive store failures", with no word of what failed): it says the cause."""
    breaker = Breaker(failures=2, cooldown=5.0, clock=clock.now)
    guard, store = make(clock, "allow", breaker)
    store.down = True
    with caplog.at_level("WARNING", logger="freqguard"):
        for i in range(3):
            guard.hit("sms", recipient=f"r{i}", content="c")
    opened = [r.getMessage() for r in caplog.records if "circuit open" in r.getMessage()]
    assert len(opened) == 1
    assert "(the last: store down)" in opened[0], opened
