"""An adversarial review of the cost semantics of 33ca5c9 and 92ec053 (design note 107: a
cost bounded before the call only by ``Strategy.max_limit``, judged after a denial by the
capacity as decided for its hit) at the guard's own entry points: a shared-out fallback
(``Fallback(..., workers=N)``) and the deny cache. Each finding a failing test. Memory
backend, pinned time, no I/O."""

from __future__ import annotations

import pytest

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule, TierRates
from freqguard.policy import Fallback
from tests.conftest import START
from tests.operations.failure_rig import Switch


def _down(policy: Policy) -> tuple[Guard, Switch]:
    clock = ManualClock(START)
    store = Switch(clock)
    return Guard(store, [policy], clock, breaker=None), store


def _outcome(guard: Guard, policy: str, cost: int, **ctx: object) -> tuple[bool, str] | str:
    """The decision's (allowed, source), or the error the hit raised, as text."""
    try:
        decision = guard.hit(policy, cost, **ctx)
    except ConfigError as exc:
        return f"ConfigError: {exc}"
    return decision.allowed, decision.source


# -- Fallback(..., workers=N): a cost past the shared-out capacity --------------------------------


@pytest.mark.parametrize(
    ("plan", "cost"),
    [("free", 8), ("pro", 51)],
    ids=["free-8-of-10-shared-5", "pro-51-of-100-shared-50"],
)
def test_a_tier_s_cost_past_its_shared_out_capacity_fails_closed_not_raises(
    plan: str, cost: int
) -> None:
    """``Rule("10/minute", by="u", name="r", rate_for=TierRates("plan", {"pro":
    "100/minute"}))``, ``on_error=Fallback(MemoryBackend(clock), workers=2)``. With the
    store up a free hit of 8 (a pro hit of 51) is allowed. With the store down, the same
    hit raises ``ConfigError: cost 8 exceeds the capacity 5 of rule 'r' ... no hit of that
    cost could ever be allowed`` (``argument='cost'``: a 422 naming ``cost`` in the
    service): ``Failover.on_failure`` asks ``there.fits(cost)``, which since 92ec053 skips
    a rule with ``rate_for`` (``_narrow`` reads only rules "at their own rate"), so the hit
    goes to the fallback, which denies it, and ``check_fits`` raises. The cost is not at
    fault (the store takes it; only the outage's share does not), and the same cost past
    a plain rule's share fails closed (``Rule("10/minute")``, workers=2, ``hit(cost=6)``:
    ``(False, 'fail-closed')``, asserted first). Expected: ``(False, 'fail-closed')``."""
    clock = ManualClock(START)
    plain = Policy("p", Rule("10/minute", by="u"), on_error=Fallback(MemoryBackend(), workers=2))
    reference, down = _down(plain)
    down.down = True
    assert _outcome(reference, "p", 6, u="a") == (False, "fail-closed")
    rule = Rule("10/minute", by="u", name="r", rate_for=TierRates("plan", {"pro": "100/minute"}))
    policy = Policy("t", rule, on_error=Fallback(MemoryBackend(clock), workers=2))
    guard, store = _down(policy)
    assert guard.hit("t", cost, u="up", plan=plan).allowed  # the store's answer
    store.down = True
    assert _outcome(guard, "t", cost, u="down", plan=plan) == (False, "fail-closed")


def test_a_priority_cap_s_cost_past_its_shared_out_cap_fails_closed_not_raises() -> None:
    """``Rule("10/minute", by="u", name="r", caps={"low": 8})``, ``priorities=("high",
    "low")``, ``on_error=Fallback(..., workers=2)``: the store admits a low hit of 8. Store
    down: a low hit of 5 raises ``ConfigError: cost 5 exceeds the capacity 4 of rule 'r'``
    (the shared-out cap, ``shared._shared_caps``: 4 of 5); ``fits(5)`` read only the
    shared-out rule's capacity (5), not the priority's cap. Expected: ``(False,
    'fail-closed')``, as for a cost past a plain rule's share."""
    clock = ManualClock(START)
    policy = Policy(
        "c",
        Rule("10/minute", by="u", name="r", caps={"low": 8}),
        priorities=("high", "low"),
        on_error=Fallback(MemoryBackend(clock), workers=2),
    )
    guard, store = _down(policy)
    assert guard.hit("c", 8, u="up", priority="low").allowed  # the store's answer
    store.down = True
    assert _outcome(guard, "c", 5, u="down", priority="low") == (False, "fail-closed")


def test_a_priority_only_rule_s_cost_past_its_shared_out_capacity_fails_closed() -> None:
    """``Rule("10/minute", by="u", name="all")`` and ``Rule("4/minute", by="u",
    name="low-only", only=["low"])``, ``on_error=Fallback(..., workers=2)``: the store
    admits a low hit of 4. Store down: a low hit of 3 raises ``ConfigError: cost 3 exceeds
    the capacity 2 of rule 'low-only'``: since 92ec053 ``_narrow`` skips ``only=`` rules, so
    ``fits(3)`` holds (3 <= 5) and the fallback's denial raises. Expected: ``(False,
    'fail-closed')``."""
    clock = ManualClock(START)
    policy = Policy(
        "o",
        Rule("10/minute", by="u", name="all"),
        Rule("4/minute", by="u", name="low-only", only=["low"]),
        priorities=("high", "low"),
        on_error=Fallback(MemoryBackend(clock), workers=2),
    )
    guard, store = _down(policy)
    assert guard.hit("o", 4, u="up", priority="low").allowed  # the store's answer
    store.down = True
    assert _outcome(guard, "o", 3, u="down", priority="low") == (False, "fail-closed")


# -- the deny cache and a per-key limit's ttl ----------------------------------------------------


def _limited(deny_cache: int, rate: str) -> tuple[Guard, ManualClock]:
    clock = ManualClock(START)
    policy = Policy("k", Rule("10/minute", by="u", name="r"))
    guard = Guard(MemoryBackend(), [policy], clock, deny_cache=deny_cache)
    guard.set_limit("k", "r", rate, ttl=30, u="a")
    return guard, clock


def test_the_deny_cache_answers_a_cost_a_lapsed_raised_limit_made_hopeless() -> None:
    """``Rule("10/minute", by="u", name="r")``, ``deny_cache=100``, ``set_limit("k", "r",
    "100/minute", ttl=30, u="a")``. Hits of 50, 50 are allowed; a third of 50 is denied
    (retry_after 60) and remembered. 31 s later the limit has lapsed (``limits_for``:
    10/minute), and ``hit("k", 50, u="a")`` is answered from the cache: ``allowed=False,
    source='deny-cache', retry_after=29.0, capacity=100``, a denial whose wait is a lie
    (no hit of 50 passes a 10/minute rule). Without the cache the same call raises
    ``ConfigError: cost 50 exceeds the capacity 10 of rule 'r'`` (92ec053 made the cache
    answer only the cost it remembered for this reason; a per-key limit's ttl changes the
    capacity without a forget). Expected: the ConfigError, as without the cache."""
    plain, clock = _limited(0, "100/minute")
    assert [plain.hit("k", 50, u="a").allowed for _ in range(3)] == [True, True, False]
    clock.advance(31)
    with pytest.raises(ConfigError, match="capacity 10"):
        plain.hit("k", 50, u="a")  # the reference: no cache
    cached, clock = _limited(100, "100/minute")
    assert [cached.hit("k", 50, u="a").allowed for _ in range(3)] == [True, True, False]
    clock.advance(31)
    with pytest.raises(ConfigError, match="capacity 10"):
        cached.hit("k", 50, u="a")


def test_the_deny_cache_denies_a_hit_a_lapsed_lowered_limit_now_admits() -> None:
    """``Rule("10/minute", by="u", name="r")``, ``deny_cache=100``, ``set_limit("k", "r",
    "3/minute", ttl=30, u="a")``. A hit of 2 is allowed, a second of 2 denied (retry_after
    60) and remembered. 31 s later the limit has lapsed (10/minute, 2 used): the store
    admits a hit of 2 (a guard without the cache answers ``allowed=True, remaining=6``),
    but the cached guard answers ``allowed=False, source='deny-cache', retry_after=29.0,
    capacity=3``: a denial the store would not make (the cache's docstring names a refund
    or reset through another guard as the only such case). Expected: allowed."""
    plain, clock = _limited(0, "3/minute")
    assert [plain.hit("k", 2, u="a").allowed for _ in range(2)] == [True, False]
    clock.advance(31)
    assert plain.hit("k", 2, u="a").allowed  # the reference: no cache
    cached, clock = _limited(100, "3/minute")
    assert [cached.hit("k", 2, u="a").allowed for _ in range(2)] == [True, False]
    clock.advance(31)
    decision = cached.hit("k", 2, u="a")
    assert (decision.allowed, decision.source) == (True, "backend")
