"""An adversarial review of d26d76c (the deny cache keeps a tier's denials,
``PolicyPlan.lapses``) on a real Redis server (the conftest's, on the test ports); time
pinned by the guard's clock."""

from __future__ import annotations

from freqguard import Guard, ManualClock, Policy, Rule, TierRates
from freqguard.backends.redis import RedisBackend
from tests.conftest import START


def test_a_ttl_limit_at_a_tier_s_numbers_is_not_remembered_past_its_ttl_on_redis(
    redis_backend: RedisBackend,
) -> None:
    """On Redis: ``Policy("t", Rule("100/minute", by="u", name="r", rate_for=TierRates(
    "plan", {"free": "5/minute"})))``, ``Guard(redis_backend, ..., clock, deny_cache=100)``,
    time pinned at START. A free caller hits once (the free tier's ``KeyLimit`` enters
    ``Tiers.limits``); ``set_limit("t", "r", "5/minute", ttl=10, u="bob")``; bob (pro)
    hits 5 times, the sixth denied by the store (retry 60 s). At START + 11 s the limit has
    lapsed (bob is back at 100/minute, 5 used) and the store would admit him; the hit is
    answered by the deny cache, denied (``source="deny-cache"``): the stored limit reaches
    ``PolicyPlan.lapses`` with its expiry set to 0 (``script.limits.apply``), equal to the
    free tier's ``KeyLimit``, and is taken for a tier's. Expected: allowed, by the store."""
    clock = ManualClock(START)
    rule = Rule("100/minute", by="u", name="r", rate_for=TierRates("plan", {"free": "5/minute"}))
    guard = Guard(redis_backend, [Policy("t", rule)], clock, deny_cache=100)
    assert guard.hit("t", u="ann", plan="free").allowed
    guard.set_limit("t", "r", "5/minute", ttl=10, u="bob")
    assert [guard.hit("t", u="bob", plan="pro").allowed for _ in range(6)] == [True] * 5 + [False]
    clock.advance(11)
    assert guard.peek("t", u="bob", plan="pro").allowed  # the store's answer: room again
    decision = guard.hit("t", u="bob", plan="pro")
    assert (decision.allowed, decision.source) == (True, "backend"), decision
