"""A token bucket's refund after a deploy that changes its tier's rate (the operations
model's deploys found it): a hit of 2 under the tier (2 a second) took 2 tokens; the tier
made 3 a second before the refund, which converted the hit's span (1 s, at the hit's
interval) to tokens at the new interval: 3 given back for 2 taken, one admitted past the
limit. A refund gives back at most the units taken, on every store; time pinned."""

from __future__ import annotations

from datetime import timedelta

from freqguard import Guard, ManualClock, Policy, Rate, Rule, TierRates
from freqguard.backends.base import SyncBackend
from tests.conftest import START


def _policy(tier: int) -> Policy:
    rates = TierRates("plan", {"pro": Rate(tier, timedelta(seconds=1))})
    return Policy("p", Rule("4/second", by="u", name="a", strategy="token-bucket", rate_for=rates))


def test_a_refund_after_its_tier_was_rerated_gives_back_no_more_than_was_taken(
    any_store: SyncBackend,
) -> None:
    clock = ManualClock(START)
    before = Guard(any_store, [_policy(2)], clock=clock)
    for _ in range(2):
        assert before.hit("p", u="17", plan="").allowed
    decision = before.hit("p", 2, u="17", plan="pro")
    assert decision.allowed
    after = Guard(any_store, [_policy(3)], clock=clock)  # the tier's rate alone changed
    after.refund(decision)
    assert after.peek("p", u="17", plan="").rules[0].remaining == 2
    assert [after.hit("p", u="17", plan="").allowed for _ in range(3)] == [True, True, False]
