"""A rule's window changed for some of its contexts, by a per-key limit (longer, or
stricter and then cleared) or a tier's rate: every store counts the same entries, each
strategy's state as its writes left it. The random replays are in
``test_differential.py``."""

from __future__ import annotations

import pytest

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule, Strategy, TierRates
from freqguard.backends.redis import RedisBackend
from tests.conformance.lease_rig import EVERY_STORE
from tests.conftest import START, flush, flush_scripts
from tests.reference import RATE_STRATEGIES
from tests.servers import RedisServer


@pytest.mark.parametrize("strategy", [Strategy.SLIDING_LOG, Strategy.CONCURRENCY])
@pytest.mark.parametrize("store", EVERY_STORE)
def test_a_window_made_longer_counts_the_same_entries_in_every_store(
    request: pytest.FixtureRequest, store: str, strategy: Strategy
) -> None:
    """Entries that left the window while a later write kept the log are dropped by that
    write in every store: the Lua kept them until the cap pushed them out (the Python twin
    dropped them), so a per-key limit that made the window longer counted one more hit on
    Redis than in memory."""
    backend = MemoryBackend() if store == "memory" else request.getfixturevalue(f"{store}_backend")
    clock = ManualClock(START)
    leases = strategy is Strategy.CONCURRENCY
    rate = "5 concurrent" if leases else "5 per 30 seconds"
    rule = Rule(rate, by="u", strategy=strategy, name="r", lease=30.0 if leases else None)
    guard = Guard(backend, [Policy("p", rule)], clock=clock)
    take = guard.take_lease if strategy is Strategy.CONCURRENCY else guard.hit
    for step in (0, 20, 20):  # at 0, 20 and 40 s: the first has left the 30 s window
        clock.advance(step)
        assert take("p", u="a").allowed
    longer = "5 concurrent" if strategy is Strategy.CONCURRENCY else "5 per 60 seconds"
    guard.set_limit("p", "r", longer, u="a")
    if strategy is Strategy.CONCURRENCY:  # a lease's length is the rule's: a deploy
        rule = Rule(rate, by="u", strategy=strategy, name="r", lease=60.0)
        guard = Guard(backend, [Policy("p", rule)], clock=clock)
    assert guard.peek("p", u="a").remaining == 3  # the hits at 20 and 40 s


@pytest.mark.parametrize("strategy", RATE_STRATEGIES)
def test_a_per_key_limit_that_makes_the_window_longer_decides_alike(
    redis_backend: RedisBackend,
    binned_backend: RedisBackend,
    scripts_backend: RedisBackend,
    cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    scripts_server: RedisServer,
    strategy: Strategy,
) -> None:
    """Hits under a short window, some of them out of it by the last; then a per-key limit
    over a longer one: every store counts the same hits again (each strategy's state as its
    writes left it)."""
    flush([redis_server, *redis_cluster])
    flush_scripts([scripts_server])
    seen = []
    for backend in (
        MemoryBackend(),
        redis_backend,
        binned_backend,
        scripts_backend,
        cluster_backend,
    ):
        clock = ManualClock(START)
        guard = Guard(
            backend,
            [Policy("p", Rule("5 per 30 seconds", by="u", strategy=strategy, name="r"))],
            clock=clock,
        )
        for step in (0, 10, 10, 10, 10):
            clock.advance(step)
            guard.hit("p", u="a")
        guard.set_limit("p", "r", "5 per 120 seconds", u="a")
        seen.append([guard.peek("p", u="a"), guard.hit("p", u="a"), guard.hit("p", 2, u="a")])
    assert all(found == seen[0] for found in seen[1:])


@pytest.mark.parametrize("strategy", [Strategy.SLIDING_LOG, Strategy.ROLLING_WINDOW])
@pytest.mark.parametrize("store", EVERY_STORE[:-1])  # the cluster: the same function
def test_a_state_under_a_tier_keeps_what_the_rule_s_own_rate_needs_on_every_store(
    request: pytest.FixtureRequest, store: str, strategy: Strategy
) -> None:
    """1 per 2 s, 1 a second for plan "pro": a pro hit, a second, then a hit of another
    plan on the same key. Memory kept the state by the rule's base rate under the tier (2 s,
    the keeping a per-key limit gets) and denied it; Redis kept the tier's, as the specs it
    read said, and admitted it (found by the operations model); then a tier's rate was the
    rule's own, every store admitted it: two hits within a second under 1 per 2 s for the
    free plan's caller. Now the specs say what a state keeps (design note 103): under a
    tier, the rule's own window too, on every store, so the free hit finds the pro one."""
    backend = MemoryBackend() if store == "memory" else request.getfixturevalue(f"{store}_backend")
    clock = ManualClock(START)
    tier = TierRates("plan", {"pro": "1/second"})
    rule = Rule("1 per 2 seconds", by="u", strategy=strategy, name="r", rate_for=tier)
    guard = Guard(backend, [Policy("p", rule)], clock=clock)
    assert guard.hit("p", u="a", plan="pro").allowed
    clock.advance(1)
    assert not guard.hit("p", u="a", plan="free").allowed


@pytest.mark.parametrize("strategy", [Strategy.SLIDING_LOG, Strategy.ROLLING_WINDOW])
@pytest.mark.parametrize("store", EVERY_STORE[:-1])  # the cluster: the same function
def test_a_stricter_per_key_limit_never_makes_a_rule_forget_its_own_window(
    request: pytest.FixtureRequest, store: str, strategy: Strategy
) -> None:
    """100 an hour, all taken; then 1 a minute for two minutes, one hit under it; then the
    rule's own rate again: the hour's hits still count. Under the limit each write kept only
    what the limit's window and count need, so once it was cleared the hour began afresh:
    201 admitted in three minutes (review)."""
    backend = MemoryBackend() if store == "memory" else request.getfixturevalue(f"{store}_backend")
    clock = ManualClock(START)
    rule = Rule("100/hour", by="u", strategy=strategy, name="r")
    guard = Guard(backend, [Policy("p", rule)], clock=clock)
    admitted = sum(guard.hit("p", u="a").allowed for _ in range(100))
    clock.advance(60)
    guard.set_limit("p", "r", "1/minute", u="a")
    clock.advance(60)
    admitted += guard.hit("p", u="a").allowed
    clock.advance(60)
    guard.clear_limit("p", "r", u="a")
    admitted += sum(guard.hit("p", u="a").allowed for _ in range(200))
    assert admitted == 101
