"""An independent review of the lapsing per-key limit's denial (``set_limit(..., ttl=...)``:
a cost past a capacity only it makes is a denial told to retry when it lapses, not
``Unfit``) and of ``limits_for``'s contexts, on every store.

docs/concepts.md (Costs): "A per-key limit that lapses (set with a ``ttl``) is not for ever:
a cost only it refuses (the rule's own capacity holds it) is a denial, its ``retry_after``
the time it lapses." ``Decision``'s docstring: ``retry_after`` is "the seconds until every
denying rule admits the hit ... waiting that long is enough unless others get there first".
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from freqguard import Guard, ManualClock, Policy, Rate, Rule, TierRates
from freqguard.backends.base import SyncBackend
from freqguard.engine.requests import Unfit

PRIORITIES = ("transactional", "marketing")


def _guard(store: SyncBackend, clock: ManualClock, *rules: Rule, **options: object) -> Guard:
    return Guard(store, [Policy("p", *rules, **options)], clock=clock)  # type: ignore[arg-type]


# -- retry_after of a cost only a lapsing limit refuses --------------------------------------


def test_retry_after_is_the_lapse_when_the_limits_window_is_longer(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """An operator slows one user to 3 an hour for five minutes (``ttl=300``) on a rule of
    10 an hour; the user sends a batch of 5. Expected (concepts.md): denied, told to retry
    when the limit lapses, 300 s, and admitted then. Instead ``retry_after`` is the
    limit's own wait for a cost it can never hold (3600 s on a sliding log, 2400 s on a
    bucket): the longer of that and the lapse, so a job sleeps an hour for nothing."""
    guard = _guard(any_store, clock, Rule("10/hour", by="u", name="r"))
    guard.set_limit("p", "r", "3/hour", ttl=300, u="x")
    denied = guard.hit("p", 5, u="x")
    assert not denied.allowed
    assert 299 <= denied.retry_after <= 300, denied.retry_after
    clock.advance(300)
    assert guard.hit("p", 5, u="x").allowed


def test_acquire_takes_its_turn_when_the_limit_lapses(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """The same user's worker calls ``acquire(cost=5, timeout=400)``: the hit is admitted
    at 300 s, within the timeout. Expected: admitted after waiting about 300 s. Instead
    ``CapExceeded``: "the next turn is in 3600.000s, later than the timeout of 400s
    allows"."""
    guard = _guard(any_store, clock, Rule("10/hour", by="u", name="r"))
    guard.set_limit("p", "r", "3/hour", ttl=300, u="x")
    start = clock.now()
    assert guard.acquire("p", cost=5, timeout=400, u="x").allowed
    assert 299 <= clock.now() - start <= 301


def test_a_lease_past_a_lapsing_limit_waits_for_the_lapse_not_its_lease(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """A concurrency rule of 10 calls in flight (``lease=600``) limited to 3 for 30 s; a
    caller asks for 5 leases. Expected: denied, retry in 30 s (the lapse). Instead 600 s,
    the rule's lease."""
    guard = _guard(any_store, clock, Rule("10 concurrent", by="u", name="c", lease=600))
    guard.set_limit("p", "c", "3 concurrent", ttl=30, u="x")
    with guard.lease("p", 5, u="x") as denied:
        assert not denied.allowed
        assert 29 <= denied.retry_after <= 30, denied.retry_after


def test_two_lapsing_limits_tell_the_later_lapse(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """Two rules, each limited for a while (300 s and 100 s), both below a cost of 5 their
    own rates hold. Expected: retry when the later lapses (300 s). Instead 3600 s, the
    hourly limit's own wait."""
    guard = _guard(
        any_store, clock, Rule("10/minute", by="u", name="r"), Rule("100/hour", by="u", name="h")
    )
    guard.set_limit("p", "r", "3/minute", ttl=300, u="x")
    guard.set_limit("p", "h", "4/hour", ttl=100, u="x")
    denied = guard.hit("p", 5, u="x")
    assert {r.id for r in denied.denied_by} == {"r", "h"}
    assert 299 <= denied.retry_after <= 300, denied.retry_after


def test_waiting_retry_after_is_enough_when_the_own_count_holds_past_the_lapse(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """Found right, and kept by the fix: 3 sent under a limit of 3 per 10 minutes that
    lapses in 60 s, on a rule of 10 per 10 minutes; a cost of 8 fits the rule's own 10
    only once those 3 leave (600 s). Waiting ``retry_after`` is enough (Decision's
    docstring)."""
    guard = _guard(any_store, clock, Rule("10 per 10 minutes", by="u", name="r"))
    guard.set_limit("p", "r", "3 per 10 minutes", ttl=60, u="x")
    for _ in range(3):
        assert guard.hit("p", u="x").allowed
    denied = guard.hit("p", 8, u="x")
    assert not denied.allowed
    clock.advance(denied.retry_after)
    assert guard.hit("p", 8, u="x").allowed


def test_a_priority_below_a_lapsing_limit_is_told_the_lapse(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """A rule of 100 a minute leaves marketing 50 (``caps``); an operator limits one
    recipient to 40 a minute for 300 s, below the 50 kept for transactional, so no
    marketing message passes until the limit lapses. Expected: ``retry_after`` is when it
    lapses; waiting it is enough. Instead 60 s, again and again, until the lapse."""
    guard = _guard(
        any_store,
        clock,
        Rule("100/minute", by="u", name="r", caps={"marketing": 50}),
        priorities=PRIORITIES,
    )
    guard.set_limit("p", "r", "40/minute", ttl=300, u="x")
    denied = guard.hit("p", 1, u="x", priority="marketing")
    assert not denied.allowed
    assert 299 <= denied.retry_after <= 300, denied.retry_after
    clock.advance(denied.retry_after)
    assert guard.hit("p", 1, u="x", priority="marketing").allowed


def test_a_cost_past_the_tiers_own_capacity_is_unfit_under_a_lapsing_limit(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """A free plan's tier is 5 a minute; a cost of 10 is ``Unfit`` for a free user
    (concepts.md: "the capacity as decided for that hit, its tier's"). An operator then
    limits that user to 3 a minute for 300 s. Expected: still ``Unfit`` (concepts.md: only
    a cost "the rule's own capacity holds" is a denial told to wait for the lapse).
    Instead a denial with ``retry_after`` 300, and ``Unfit`` at the retry."""
    tiers = TierRates("plan", {"free": "5/minute"})
    rule = Rule("100/minute", by="u", name="r", rate_for=tiers, reads="plan")
    guard = _guard(any_store, clock, rule)
    with pytest.raises(Unfit):
        guard.hit("p", 10, u="y", plan="free")
    guard.set_limit("p", "r", "3/minute", ttl=300, u="x")
    with pytest.raises(Unfit, match="capacity"):
        guard.hit("p", 10, u="x", plan="free")


def test_a_batchs_denial_is_told_the_lapse(any_store: SyncBackend, clock: ManualClock) -> None:
    """``hit_many`` of a context whose cost only a lapsing limit refuses: concepts.md says
    it is denied (not raised). Expected: its ``retry_after`` the lapse, as ``hit``'s;
    waiting it is enough. Instead the limit's own wait (60 s on a log, 40 s on a bucket):
    a retry then is denied again."""
    guard = _guard(any_store, clock, Rule("10/minute", by="u", name="r"))
    guard.set_limit("p", "r", "3/minute", ttl=300, u="x")
    [denied] = guard.hit_many("p", [{"u": "x"}], cost=5)
    assert not denied.allowed
    assert 299 <= denied.retry_after <= 300, denied.retry_after


# -- limits_for's contexts -------------------------------------------------------------------


def test_limits_for_takes_a_hits_whole_context(any_store: SyncBackend, clock: ManualClock) -> None:
    """docs/limits.md: ``limits_for`` "takes the partition values (a hit's whole context is
    accepted too)"; the guard's docstring says the same. A support tool passes the context
    it hits with, which carries the plan a tier reads. Expected: the user's rates.
    Instead ``ConfigError``: "plan is no dimension of it" (the CLI's ``limit show`` passes
    ``plan=`` through too: its words accept what the rules read)."""
    tiers = TierRates("plan", {"pro": "1000/hour"})
    rule = Rule("100/hour", by="user", name="per-user", rate_for=tiers, reads="plan")
    guard = _guard(any_store, clock, rule)
    guard.set_limit("p", "per-user", "7/hour", user="u-17")
    assert guard.limits_for("p", user="u-17", plan="pro") == {
        "per-user": Rate(7, timedelta(hours=1))
    }
