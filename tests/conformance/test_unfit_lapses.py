"""A cost past a capacity that only a lapsing per-key limit (``set_limit(..., ttl=...)``)
makes is a denial told to retry once the limit lapses, on every store: it raised ``Unfit``
("no hit of that cost could ever be allowed"), and a retry after the ttl passed (found by
a review of the Unfit answers). A limit that never lapses, or a cost the rule's own
capacity cannot hold either, is still ``Unfit``."""

from __future__ import annotations

import pytest

from freqguard import Guard, ManualClock, Policy, Rule
from freqguard.backends.base import SyncBackend
from freqguard.engine.requests import Unfit


def _guard(any_store: SyncBackend, clock: ManualClock, rule: str = "10/minute") -> Guard:
    return Guard(any_store, [Policy("p", Rule(rule, by="u", name="r"))], clock=clock)


def test_a_lapsing_limit_denies_until_it_lapses(any_store: SyncBackend, clock: ManualClock) -> None:
    guard = _guard(any_store, clock)
    guard.set_limit("p", "r", "3/minute", ttl=300, u="x")
    denied = guard.hit("p", 5, u="x")
    assert not denied.allowed
    assert 299 <= denied.retry_after <= 300, denied.retry_after  # when it lapses
    clock.advance(301)
    assert guard.hit("p", 5, u="x").allowed


def test_a_limit_for_good_is_unfit(any_store: SyncBackend, clock: ManualClock) -> None:
    guard = _guard(any_store, clock)
    guard.set_limit("p", "r", "3/minute", u="x")
    with pytest.raises(Unfit, match="could ever be allowed"):
        guard.hit("p", 5, u="x")


def test_a_cost_the_rule_cannot_hold_either_is_unfit(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    guard = _guard(any_store, clock, "4/minute")
    guard.set_limit("p", "r", "3/minute", ttl=300, u="x")
    with pytest.raises(Unfit, match="could ever be allowed"):
        guard.hit("p", 5, u="x")
