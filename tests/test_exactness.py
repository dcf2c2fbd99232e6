"""Exactness where it used to break: refunds that took back another caller's units, the
compensation of multi-slot policies, and clocks that step back. Every test runs on memory,
Redis and Redis Cluster with a pinned clock, and checks the times the backend recorded
(``Decision.receipt``) against the brute-force model, not the caller's clock."""

from __future__ import annotations

import pytest

from freqguard import ConfigError, Decision, ManualClock, Policy, Rule, Strategy
from freqguard.script import HIT
from tests.conftest import START, GuardFactory
from tests.reference import max_in_any_window


def _at(decision: Decision) -> int:
    """The µs at which the hit's one slot recorded it."""
    assert decision.receipt is not None
    (at,) = set(decision.receipt.times_us)
    return at


def test_refund_of_a_decision_takes_back_that_hit_not_the_newest(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    """The issue's case: A hits at 0, B at 0.9, A refunds at 0.95; at 1.001 B's unit is still
    in the window, so only one more hit fits (the context-only refund admitted two)."""
    guard = make_guard([Policy("p", Rule("2/second", by="u"))])
    a = guard.hit("p", u="x")
    clock.advance(0.9)
    assert guard.hit("p", u="x").allowed
    clock.advance(0.05)
    guard.refund(a)
    clock.advance(0.051)
    assert guard.hit("p", u="x").allowed
    assert not guard.hit("p", u="x").allowed


@pytest.mark.parametrize("strategy", list(Strategy))
def test_refund_of_a_decision_is_exact_for_every_strategy(
    make_guard: GuardFactory, clock: ManualClock, strategy: Strategy
) -> None:
    guard = make_guard([Policy("p", Rule("3/second", by="u", strategy=strategy))])
    first = guard.hit("p", cost=2, u="x")
    assert guard.peek("p", u="x").remaining == 1
    refunded = guard.refund(first)
    assert refunded.remaining == 3
    assert guard.hit("p", cost=3, u="x").allowed
    with pytest.raises(ConfigError, match="already refunded"):
        guard.refund(first)


def test_refunding_a_denied_or_peeked_decision_changes_nothing(
    make_guard: GuardFactory,
) -> None:
    guard = make_guard([Policy("p", Rule("1/second", by="u"))])
    assert guard.hit("p", u="x").allowed
    denied = guard.hit("p", u="x")
    assert not denied.allowed
    assert denied.receipt is None
    guard.refund(denied)
    guard.refund(guard.peek("p", u="x"))
    assert not guard.hit("p", u="x").allowed


def test_refund_of_a_decision_takes_no_cost_or_context(make_guard: GuardFactory) -> None:
    guard = make_guard([Policy("p", Rule("1/second", by="u"))])
    decision = guard.hit("p", u="x")
    with pytest.raises(ConfigError, match="refund\\(decision\\)"):
        guard.refund(decision, 2)  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match="refund\\(decision\\)"):
        guard.refund(decision, u="x")  # type: ignore[call-overload]


def test_a_gcra_refund_never_gives_back_what_time_already_returned(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    """burst 1, one per second: A at 0, B at 1.5 (A's unit came back at 1.0); refunding A at
    1.6 must leave B's unit in place, so nothing more fits before 2.5."""
    guard = make_guard([Policy("p", Rule("1/second", by="u", strategy="gcra", burst=1))])
    a = guard.hit("p", u="x")
    clock.advance(1.5)
    assert guard.hit("p", u="x").allowed
    clock.advance(0.1)
    guard.refund(a)
    assert not guard.hit("p", u="x").allowed


def test_multi_slot_compensation_removes_only_its_own_unit(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    """A global 3/second plus 1/second per user span two slots. A's hit consumes in the
    global slot, B's hit lands meanwhile, then A's user slot denies: the compensation must
    take back A's global unit, not B's newer one."""
    policy = Policy("p", Rule("3/second", name="all"), Rule("1/second", by="u", name="user"))
    guard = make_guard([policy])
    assert guard.hit("p", u="a").allowed  # t=0: global [0], a used up
    clock.advance(0.5)
    op = guard._decide("p", 1, {"u": "a"}, HIT)  # A at 0.5, driven by hand
    step = next(op)
    assert isinstance(step, list)
    replies = guard.backend.execute_many(step)  # the global slot admits and consumes
    clock.advance(0.1)
    assert guard.hit("p", u="b").allowed  # B at 0.6
    denied = None
    while denied is None:
        try:
            step = op.send(replies)
        except StopIteration as done:
            denied = done.value
        else:
            assert isinstance(step, list)
            replies = guard.backend.execute_many(step)
    assert not denied.allowed  # A's user slot denied
    clock.set(START + 1.55)  # the 0 unit has left; B's at 0.6 has not
    admitted = sum(guard.hit("p", u=f"n{i}").allowed for i in range(4))
    assert admitted == 2


def test_a_clock_that_steps_back_never_judges_a_state_before_its_latest_time(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    """Three hits 100 µs apart, one at 1.00035 s (nothing in its window), then the clock
    steps back 0.25 ms: judged at 1.0001, two more would fit beside the first three inside one
    second. Each state's time is monotonic, so they are judged (and recorded) at 1.00035."""
    guard = make_guard([Policy("p", Rule("3/second", by="u"))])
    times = []
    for at in (0.0001, 0.0002, 0.0003, 1.00035, 1.0001, 1.0001, 1.0001):
        clock.set(START + at, backwards=True)  # steps back once
        decision = guard.hit("p", u="x")
        if decision.allowed:
            times.append(_at(decision))
    assert len(times) == 6
    assert max_in_any_window(times, 1_000_000) <= 3
    assert min(times[3:]) == round((START + 1.00035) * 1_000_000)


def test_a_fixed_window_that_steps_back_does_not_count_the_previous_window_afresh(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    """Judged at 0.95 after 1.0, a fixed window started [0, 1) afresh (it was full) and
    overwrote the [1, 2) count, which then started afresh again at 1.1."""
    guard = make_guard([Policy("p", Rule("2/second", by="u", strategy="fixed-window"))])
    out = []
    for at, cost in ((0.9, 2), (1.0, 1), (0.95, 1), (1.1, 1), (1.2, 1)):
        clock.set(START + at, backwards=True)  # steps back once
        out.append(guard.hit("p", cost=cost, u="x").allowed)
    assert out == [True, True, True, False, False]


@pytest.mark.parametrize("strategy", list(Strategy))
def test_every_strategy_denies_after_a_step_back_what_it_denied_before(
    make_guard: GuardFactory, clock: ManualClock, strategy: Strategy
) -> None:
    guard = make_guard([Policy("p", Rule("2/second", by="u", strategy=strategy))])
    clock.set(START + 0.9)
    assert guard.hit("p", u="x", cost=2).allowed
    clock.set(START + 1.0)
    assert guard.hit("p", u="x").allowed is (strategy is Strategy.FIXED_WINDOW)
    clock.set(START + 0.95, backwards=True)
    if strategy is not Strategy.FIXED_WINDOW:
        assert not guard.hit("p", u="x").allowed
        assert guard.peek("p", u="x").retry_after > 0
