"""An adversarial review of 33ca5c9 (design note 107: options that cannot apply refused
when made; a cost judged by the capacity as decided for its hit), each finding a failing
test. Memory backend, pinned time, no I/O."""

from __future__ import annotations

import pytest

from freqguard import (
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    SystemClock,
    TierRates,
)
from freqguard.policy import Fallback
from tests.conftest import START
from tests.operations.failure_rig import Switch


def _guard(*policies: Policy, **options: object) -> Guard:
    return Guard(MemoryBackend(), list(policies), ManualClock(START), **options)  # type: ignore[arg-type]


# -- the deny cache --------------------------------------------------------------------------


def test_the_deny_cache_answers_a_cost_no_hit_could_ever_be_granted_with_a_denial() -> None:
    """``Guard(..., deny_cache=100)``, a 10/minute rule. ``hit("api", cost=50, u="a")`` on a
    fresh key raises the ConfigError "cost 50 exceeds the capacity 10 of rule 'r'" (the
    store denies it, ``check_fits`` raises). Once that key has one ordinary denial (ten
    hits of 1, an eleventh denied and remembered), the same ``hit(cost=50)`` is answered
    from the deny cache: ``Decision(allowed=False, retry_after=60.0,
    source='deny-cache')``, a denial whose ``retry_after`` is a lie (no hit of 50 ever
    passes a 10/minute rule). Before 33ca5c9 the check before the call raised whatever the
    cache held. Expected: the ConfigError, as without the cache (docs/concepts.md: "an
    error, not a silent permanent denial")."""
    guard = _guard(Policy("api", Rule("10/minute", by="u", name="r")), deny_cache=100)
    for _ in range(10):
        assert guard.hit("api", u="a").allowed
    assert not guard.hit("api", u="a").allowed  # remembered by the deny cache
    with pytest.raises(ConfigError, match="capacity 10"):
        guard.hit("api", cost=50, u="a")


# -- Fallback(..., workers=N): Failover.on_failure reads PolicyPlan.fits ------------------------


def _down(policy: Policy) -> tuple[Guard, Switch]:
    clock = ManualClock(START)
    store = Switch(clock)
    guard = Guard(store, [policy], clock, breaker=None)
    return guard, store


def test_a_shared_out_fallback_is_bounded_by_a_rule_for_other_priorities_only() -> None:
    """``Policy("api", Rule("10/minute", by="u", name="all"), Rule("2/minute", by="u",
    name="low-only", only=["low"]), priorities=("low", "high"),
    on_error=Fallback(MemoryBackend(clock), workers=1))``. With the store up, ``hit("api",
    cost=5, u="c", priority="high")`` is allowed (33ca5c9 fixed exactly this: "a rule for
    other priorities only bounded every hit's cost"). With the store down, the same hit is
    ``allowed=False, source='fail-closed'``, denied by both rules, 'low-only' included:
    ``Failover.on_failure`` still asks ``PolicyPlan.fits``, which compares the cost with
    ``_narrow``, the least capacity of every enforcing rule as written, ``only=`` rules
    included. (A plain ``on_error=MemoryBackend()`` admits it.) Expected: decided on the
    fallback, allowed (a high hit of 5 fits the 10/minute rule; 'low-only' does not apply
    to it)."""
    clock = ManualClock(START)
    policy = Policy(
        "api",
        Rule("10/minute", by="u", name="all"),
        Rule("2/minute", by="u", name="low-only", only=["low"]),
        priorities=("low", "high"),
        on_error=Fallback(MemoryBackend(clock), workers=1),
    )
    guard, store = _down(policy)
    assert guard.hit("api", cost=5, u="c", priority="high").allowed  # the store's answer
    store.down = True
    decision = guard.hit("api", cost=5, u="d", priority="high")
    assert (decision.allowed, decision.source) == (True, "fallback")


def test_a_shared_out_fallback_is_bounded_by_the_rule_s_own_rate_not_the_tier_s() -> None:
    """``Rule("10/minute", by="u", name="api", rate_for=TierRates("plan", {"pro":
    "100/minute"}))`` with ``on_error=Fallback(MemoryBackend(clock), workers=2)``: a pro
    hit of cost 40 is allowed by the store (its tier takes 100). With the store down, the
    fallback's limits are shared out between 2 workers, the pro tier's as well (50/minute,
    ``shared._shared_tier``), which holds 40; yet the hit is ``allowed=False,
    source='fail-closed'``: ``PolicyPlan.fits`` compares 40 with the shared-out base rule's
    capacity (5), the capacity as written, which 33ca5c9 stopped using before the call.
    Expected: decided on the fallback, allowed."""
    clock = ManualClock(START)
    rule = Rule("10/minute", by="u", name="api", rate_for=TierRates("plan", {"pro": "100/minute"}))
    policy = Policy("t", rule, on_error=Fallback(MemoryBackend(clock), workers=2))
    guard, store = _down(policy)
    assert guard.hit("t", cost=40, u="a", plan="pro").allowed  # the store's answer
    store.down = True
    decision = guard.hit("t", cost=40, u="b", plan="pro")
    assert (decision.allowed, decision.source) == (True, "fallback")


# -- clocks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [SystemClock, ManualClock], ids=lambda k: k.__name__)
def test_a_clock_class_given_for_a_clock_is_refused_at_construction(kind: type) -> None:
    """``Guard(policies=[p], clock=SystemClock)`` (the class: the parentheses left out):
    accepted, as ``clock.check_clock`` only asks whether ``now_us`` is callable, and an
    unbound method is; the first ``hit`` raises the raw ``TypeError:
    SystemClock.now_us() missing 1 required positional argument: 'self'``, far from the
    mistake, which 33ca5c9 set out to refuse where it is given ("a clock that is none").
    ``MemoryBackend(clock=SystemClock)`` alike. Expected: a ConfigError (or TypeError) at
    construction naming ``clock``."""
    policy = Policy("p", Rule("5/minute", by="u"))
    with pytest.raises((ConfigError, TypeError), match="clock"):
        Guard(MemoryBackend(), [policy], clock=kind)  # type: ignore[arg-type]


def test_a_memory_backend_clock_class_is_refused_at_construction() -> None:
    """``MemoryBackend(clock=SystemClock)``: accepted (``check_clock``), then ``Guard(backend,
    [p]).hit(...)`` raises ``TypeError: SystemClock.now_us() missing 1 required positional
    argument: 'self'``. Expected: refused by ``MemoryBackend`` naming ``clock``."""
    with pytest.raises((ConfigError, TypeError), match="clock"):
        MemoryBackend(clock=SystemClock)  # type: ignore[arg-type]


# -- a priority's reserve under a per-key limit ---------------------------------------------------


def test_a_priority_reserve_past_a_per_key_limit_is_not_a_negative_capacity() -> None:
    """docs/messaging.md's policy: ``Rule("50/day", by="recipient", name="daily",
    caps={"marketing": 40})`` (10 reserved for transactional) beside a marketing-only
    hourly rule. An operator sets dana's limit, ``set_limit("sms-prio", "daily", "5/day",
    recipient="dana")`` ("a per-key limit ... keeps the same 10 in reserve"). Then the
    application's ordinary ``hit("sms-prio", recipient="dana", priority="marketing")``
    (cost 1) raises ``ConfigError: cost 1 exceeds the capacity -5 of rule 'daily' ...``,
    blaming ``cost`` (``argument="cost"``: a 422 naming ``cost`` in the service) with a
    negative capacity: ``check_fits`` reports ``capacity - reserve`` unclamped. No cost
    the caller could pass is at fault: the reserve leaves marketing nothing for dana.
    Expected: not a negative capacity (a denial, as the reserve's documented meaning, or
    an error that says the priority's reserve leaves it nothing)."""
    policy = Policy(
        "sms-prio",
        Rule("50/day", by="recipient", name="daily", caps={"marketing": 40}),
        Rule("1/hour", by="recipient", name="promo-hourly", only=("marketing",)),
        priorities=("transactional", "marketing"),
    )
    guard = _guard(policy)
    guard.set_limit("sms-prio", "daily", "5/day", recipient="dana")
    said = ""
    try:
        guard.hit("sms-prio", recipient="dana", priority="marketing")
    except ConfigError as exc:
        said = str(exc)
    assert "capacity -" not in said, said


# -- hit_many of a policy on several parts ----------------------------------------------------


def test_a_batch_on_several_parts_denies_a_hopeless_context_as_one_part_does() -> None:
    """``Policy("m", Rule("10/minute", by="u", name="per-user"), Rule("100/minute",
    name="global"))`` (two parts: the rules are keyed by different dimensions), a per-key
    limit of 2/minute for u=b, then ``hit_many("m", [{"u": "a"}, {"u": "b"}], cost=5)``:
    raises ``ConfigError: cost 5 exceeds the capacity 2 of rule 'per-user'``, and a's
    admitted hit is given back (a peek after reads 10 remaining). ``many_op`` runs a
    multi-part batch through ``decide_op``, whose denial calls ``plan.decide(..., texts,
    cost)`` without ``batch=True``, so ``check_fits`` raises. The same batch on a policy of
    one part (``by="u"`` for both rules) answers ``[allowed, denied by 'per-user']``.
    docs/concepts.md (and design note 107): "In a batch (hit_many) such a context is
    denied". Expected: a allowed, b denied, no error, as on one part."""
    policy = Policy(
        "m", Rule("10/minute", by="u", name="per-user"), Rule("100/minute", name="global")
    )
    guard = _guard(policy)
    guard.set_limit("m", "per-user", "2/minute", u="b")
    decisions = guard.hit_many("m", [{"u": "a"}, {"u": "b"}], cost=5)
    assert [d.allowed for d in decisions] == [True, False]
    assert [r.id for r in decisions[1].denied_by] == ["per-user"]
