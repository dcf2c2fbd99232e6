"""Leases across a deploy: a per-key limit keeps its meaning when a rate rule becomes a
concurrency rule or back (a limit that cannot apply is not applied), a lease limit keeps
its count when the lease changes, and a lease held while its policy is replaced goes back
when its block ends.

On every store: memory, Redis, Redis with records in bins, Redis without Functions (EVAL
scripts) and a Redis Cluster; time pinned (``ManualClock``), so no lease frees itself while
a test runs. The rig is ``lease_rig.py``."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from freqguard import ConfigError, Guard, ManualClock, Policy, Rate, Rule
from freqguard.backends.base import SyncBackend
from freqguard.script import limits as script_limits
from tests.conformance.lease_rig import every_store as every_store
from tests.conftest import START


def _deploy(store: SyncBackend, clock: ManualClock, rule: Rule) -> Guard:
    return Guard(store, [Policy("p", rule)], clock=clock)


def test_a_rate_limit_set_before_the_rule_counts_leases_does_not_apply(
    every_store: SyncBackend, caplog: pytest.LogCaptureFixture
) -> None:
    script_limits._REFUSED.clear()
    clock = ManualClock(START)
    before = _deploy(every_store, clock, Rule("10/hour", by="u", name="x"))
    before.set_limit("p", "x", "3/hour", u="a")
    rule = Rule("1 concurrent", by="u", name="x", lease=60)
    after = _deploy(every_store, clock, rule)
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        taken = [after.take_lease("p", u="a") for _ in range(3)]
        assert [d.allowed for d in taken] == [True, False, False]
        assert after.limits_for("p", u="a") == {"x": rule.rate}
    assert "cannot apply" in caplog.text
    clock.advance(61)  # the lease frees itself after the rule's own 60 s
    again = after.take_lease("p", u="a")
    assert again.allowed
    assert again.rules[0].reset_after <= 60


def test_a_lease_limit_set_before_the_rule_counts_a_rate_does_not_apply(
    every_store: SyncBackend,
) -> None:
    script_limits._REFUSED.clear()
    clock = ManualClock(START)
    before = _deploy(every_store, clock, Rule("1 concurrent", by="u", name="x", lease=60))
    before.set_limit("p", "x", "3 concurrent", u="a")
    after = _deploy(every_store, clock, Rule("5/hour", by="u", name="x"))
    assert after.limits_for("p", u="a") == {"x": Rate(5, timedelta(hours=1))}
    assert sum(after.hit("p", u="a").allowed for _ in range(8)) == 5


def test_a_lease_limit_keeps_its_count_when_the_lease_changes(every_store: SyncBackend) -> None:
    clock = ManualClock(START)
    before = _deploy(every_store, clock, Rule("1 concurrent", by="u", name="x", lease=60))
    before.set_limit("p", "x", "3 concurrent", u="a")
    longer = Rule("1 concurrent", by="u", name="x", lease=120)
    after = _deploy(every_store, clock, longer)
    assert after.limits_for("p", u="a") == {"x": Rate(3, timedelta(seconds=120))}
    assert [after.take_lease("p", u="a").allowed for _ in range(4)] == [True] * 3 + [False]
    clock.advance(90)  # leases of the rule's own 120 s: still held
    assert not after.take_lease("p", u="a").allowed
    clock.advance(31)
    assert after.take_lease("p", u="a").allowed


def test_a_lease_held_across_a_deploy_is_given_back_when_its_block_ends(
    every_store: SyncBackend,
) -> None:
    """A policy replaced while a lease is held (its limit or its lease changed, the rule's
    name kept): leaving the block raised ConfigError ("as it was registered then") and the
    lease stayed held until it lapsed (review). A release finds the plan it was taken under,
    kept beside the new one; the new plan counts the lease meanwhile."""
    clock = ManualClock(START)
    guard = Guard(
        every_store, [Policy("p", Rule("2 concurrent", lease=60, name="cc"))], clock=clock
    )
    for after in (
        Rule("3 concurrent", lease=60, name="cc"),
        Rule("3 concurrent", lease=90, name="cc"),
    ):
        with guard.lease("p") as held:
            assert held.allowed
            guard.add_policy(Policy("p", after), replace=True)
            assert guard.peek("p").remaining == after.capacity - 1  # counted by the new one
        assert guard.peek("p").remaining == after.capacity
    taken = guard.take_lease("p")
    guard.add_policy(Policy("p", Rule("2 concurrent", lease=60, name="cc")), replace=True)
    guard.release(taken)
    assert guard.peek("p").remaining == 2
    with pytest.raises(ConfigError, match="already refunded"):
        guard.release(taken)


def _versioned(name: str, per_minute: int) -> Policy:
    return Policy(
        name,
        Rule("2 concurrent", by="user", lease=60, name="cc"),
        Rule(f"{per_minute}/minute", by="user"),
    )


def test_a_lease_held_across_one_deploy_of_many_policies_is_given_back() -> None:
    """The replaced versions a guard keeps (so that a lease taken before a deploy goes back
    after it) were 64 for all its policies together: one deploy that changed 65 policies
    (a configuration reloaded, every rate raised) dropped the version a lease of the first
    was taken under, and the block's end raised a ConfigError ("the receipt is for policy
    'p0' as it was registered then") with the lease left held (adversarial review). The
    last 64 versions are kept per policy."""
    guard = Guard(policies=[_versioned(f"p{i}", 100) for i in range(65)], clock=ManualClock(START))
    with guard.lease("p0", user="u") as decision:
        assert decision.allowed
        for i in range(65):
            guard.add_policy(_versioned(f"p{i}", 200), replace=True)
    assert guard.peek("p0", user="u").rules[0].remaining == 2
