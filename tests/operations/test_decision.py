"""Decision: reported lazily, yet immutable, comparable, hashable and picklable by value."""

from __future__ import annotations

import pickle

import pytest

from freqguard import CapExceeded, Decision, Policy, Rule
from tests.conftest import SMS, GuardFactory


def test_a_lazy_decision_equals_one_built_from_its_report(make_guard: GuardFactory) -> None:
    guard = make_guard([SMS])
    for _ in range(3):
        decision = guard.hit("sms", recipient="r", content="c")
        eager = Decision(
            decision.policy,
            decision.allowed,
            decision.retry_after,
            decision.denied_by,
            decision.raw,
        )
        assert eager == decision
        assert hash(eager) == hash(decision)
        assert (eager.remaining, eager.capacity, eager.reset_after) == (
            decision.remaining,
            decision.capacity,
            decision.reset_after,
        )
        assert eager.rules == decision.rules
        assert repr(eager) == repr(decision)


def test_the_report_describes_the_hit_not_later_ones(make_guard: GuardFactory) -> None:
    guard = make_guard([SMS])
    first = guard.hit("sms", recipient="r", content="c")
    second = guard.hit("sms", recipient="r", content="c")
    # read only now, after the second hit changed the stored state
    assert [s.remaining for s in first.rules] == [14, 49, 1, 4]
    assert [s.remaining for s in second.rules] == [13, 48, 0, 3]
    assert first.remaining == 1
    assert second.remaining == 0


def test_decisions_are_immutable(make_guard: GuardFactory) -> None:
    decision = make_guard([SMS]).hit("sms", recipient="r", content="c")
    with pytest.raises(AttributeError, match="immutable"):
        decision.allowed = False
    with pytest.raises(AttributeError, match="immutable"):
        del decision.policy
    assert decision.allowed


def test_decisions_and_cap_exceeded_pickle_by_value(make_guard: GuardFactory) -> None:
    guard = make_guard([SMS])
    decisions = [guard.hit("sms", recipient="p", content="c") for _ in range(3)]
    assert pickle.loads(pickle.dumps(decisions)) == decisions
    error = pickle.loads(pickle.dumps(CapExceeded(decisions[2])))
    assert error.decision == decisions[2]
    assert error.decision.retry_after == 59.0


def test_capacity_is_what_a_decision_and_a_rule_state_call_limit(
    make_guard: GuardFactory,
) -> None:
    """A rule's ``limit`` is its rate's count; what a decision admits at once is its
    ``capacity`` (a bucket's burst), which ``limit`` still names, as the header does."""
    guard = make_guard([Policy("b", Rule("10/minute", by="k", strategy="gcra", burst=3))])
    decision = guard.hit("b", k="x")
    (state,) = decision.rules
    assert (decision.capacity, state.capacity, state.rule.capacity) == (3, 3, 3)
    assert (decision.limit, state.limit, state.rule.limit) == (3, 3, 10)
    assert "capacity=3" in repr(decision)
