"""The store's denial made by ``ops._denial`` (a later part denied a hit, the give-back of
the earlier parts then failed) against the rules as the store decided them: a shadow rule,
a rule the hit's priority skips (``only``), a rule exempt or at another rate for one key
(``set_limit``), a tier (``rate_for``).

``PolicyPlan.decide`` (the same hit, its give-back done) reads the rules as the replies
decided them (``PolicyPlan._rules``) and takes the longest wait of the rules that deny;
``_denial`` reads ``plan.policy.rules`` as written and takes the longest wait of every
rule, shadow ones too. Each test compares the two answers to one hit (``_twice``): the
give-back done, and failed.

The store is a real MemoryBackend on an injected clock that fails once, the step after a
call of it denied (the give-back), then answers again: a blip, not an outage."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    Clock,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.script.calls import Reply, ScriptCall
from tests.operations.failure_rig import AsyncSide
from tests.operations.test_denied_give_back import _run
from tests.operations.test_failure_nodes import _hung


class Blip(AsyncSide):
    """A MemoryBackend that, once ``armed``, fails the one batch after a call it ran denied
    (the give-back of the earlier parts, with the checks of the later ones)."""

    def __init__(self, clock: ManualClock) -> None:
        self.inner = MemoryBackend(clock)
        self.clock: Clock = clock
        self.armed = False
        self.failing = False
        self.failed = 0

    def execute(self, call: ScriptCall) -> Reply:
        return self.execute_many([call])[0]

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        if self.failing:
            self.failing, self.armed = False, False
            self.failed += 1
            raise _hung("store")
        replies = self.inner.execute_many(calls)
        if self.armed and not all(r.allowed for r in replies):
            self.failing = True
        return replies


def _guard(policy: Policy, asynchronous: bool, **options: Any) -> tuple[Any, Blip, ManualClock]:
    clock = ManualClock()
    store = Blip(clock)
    make = AsyncGuard if asynchronous else Guard
    return make(store, [policy], clock, on_error="allow", breaker=None, **options), store, clock


def _twice(
    policy: Policy, asynchronous: bool, before: Callable[[Any], None], **ctx: object
) -> tuple[Decision, Decision]:
    """The hit of ``ctx`` after ``before(guard)``, its give-back done, then failed."""
    got = []
    for fails in (False, True):
        guard, store, _ = _guard(policy, asynchronous)
        before(guard)
        store.armed = fails
        got.append(_run(guard, "hit", policy.name, **ctx))
        assert store.failed == (1 if fails else 0)  # the path under test was taken
    return got[0], got[1]


def _ids(decision: Decision) -> list[str]:
    return [rule.id for rule in decision.denied_by]


#: per-r (with a shadow rule beside it, which reports a day's wait once r=R was hit) on
#: one part, per-c (2 a minute) on another.
WATCHED = Policy(
    "watched",
    Rule("1/day", by="r", name="watch", shadow=True),
    Rule("100/day", by="r", name="per-r"),
    Rule("2/minute", by="c", name="per-c"),
)


def _watched(guard: Any) -> None:
    """r=R seen once (its shadow rule now waits a day); c=C's minute spent by others."""
    assert _run(guard, "hit", "watched", r="R", c="X").allowed
    for r in ("Q1", "Q2"):
        assert _run(guard, "hit", "watched", r=r, c="C").allowed


def test_a_shadow_rules_wait_is_not_the_denials_retry_after(asynchronous: bool) -> None:
    """per-c denies for a minute; the shadow rule "watch" waits a day, and a shadow rule
    never denies (``decide`` leaves its wait out). ``_denial`` takes the longest wait of
    every rule: retry_after and Retry-After say a day (86400 s), not the minute the store
    said."""
    done, failed = _twice(WATCHED, asynchronous, _watched, r="R", c="C")
    assert (done.retry_after, _ids(done)) == (60.0, ["per-c"])
    assert _ids(failed) == ["per-c"]
    assert failed.retry_after == pytest.approx(60)  # got: 86400.0
    assert failed.headers()["Retry-After"] == "60"  # got: '86400'


def test_an_acquire_denied_by_a_minute_waits_it_though_a_shadow_rule_waits_a_day(
    asynchronous: bool,
) -> None:
    """``acquire(timeout=120)``: per-c's turn is a minute away, within the timeout, and the
    store is back after its blip. It sleeps the minute and is admitted by the store; the
    shadow rule's day in the denial's retry_after makes it give up at once instead
    (CapExceeded)."""
    guard, store, clock = _guard(WATCHED, asynchronous)
    _watched(guard)
    store.armed = True
    start = clock.now()
    got = _run(guard, "acquire", "watched", timeout=120, r="R", c="C")  # got: CapExceeded
    assert store.failed == 1
    assert (got.allowed, got.source) == (True, "backend")
    assert clock.now() - start == pytest.approx(60)


def test_the_deny_cache_does_not_keep_a_shadow_rules_day(asynchronous: bool) -> None:
    """With a deny cache, the denial is remembered for its retry_after: the shadow rule's
    day, not per-c's minute. Past the minute the store would admit the hit, but the cache
    answers it (denied, "deny-cache") without asking, for the rest of the day."""
    guard, store, clock = _guard(WATCHED, asynchronous, deny_cache=100)
    _watched(guard)
    store.armed = True
    assert not _run(guard, "hit", "watched", r="R", c="C").allowed
    assert store.failed == 1
    clock.advance(61)
    again = _run(guard, "hit", "watched", r="R", c="C")
    assert again.source == "backend"  # got: 'deny-cache'
    assert again.allowed


#: promo applies to marketing hits only; a transactional hit skips it (SKIP: the twins
#: report a wait of 1 µs for it, which only the plan's _skipped knows to ignore).
PRIORITIZED = Policy(
    "prioritized",
    Rule("100/day", by="r", name="per-r"),
    Rule("5/day", by="r", name="promo", only=("marketing",)),
    Rule("2/minute", by="c", name="per-c"),
    priorities=("transactional", "marketing"),
)


def _prioritized(guard: Any) -> None:
    for r in ("Q1", "Q2"):  # c=C's minute spent by others
        assert _run(guard, "hit", "prioritized", r=r, c="C", priority="transactional").allowed


def test_a_rule_the_hits_priority_skips_does_not_deny_it(asynchronous: bool) -> None:
    """A transactional hit, denied by per-c. promo does not apply to it (``only``): neither
    denies nor counts it. ``_denial`` reads promo's SKIP wait (1 µs) as a denial, so
    denied_by names promo: a metric counts a denial by a rule that never applied, a 429
    names it, and the headers' RateLimit-Policy lists it (a shadow rule's is left out)."""
    done, failed = _twice(
        PRIORITIZED, asynchronous, _prioritized, r="R", c="C", priority="transactional"
    )
    assert _ids(done) == ["per-c"]
    assert _ids(failed) == ["per-c"]  # got: ['promo', 'per-c']
    assert failed.headers()["RateLimit-Policy"] == done.headers()["RateLimit-Policy"]


#: per-r (1 a day) on one part, per-c (2 a minute) on another.
EXEMPTED = Policy(
    "exempted",
    Rule("1/day", by="r", name="per-r"),
    Rule("2/minute", by="c", name="per-c"),
)


def _exempted(guard: Any) -> None:
    """r=R exempt from per-r (counted, never denying), and over its one a day; c=C's
    minute spent by others."""
    _run(guard, "set_limit", "exempted", "per-r", None, r="R")
    assert _run(guard, "hit", "exempted", r="R", c="X").allowed
    for r in ("Q1", "Q2"):
        assert _run(guard, "hit", "exempted", r=r, c="C").allowed


def test_a_rule_exempt_for_the_key_does_not_deny_it(asynchronous: bool) -> None:
    """per-c denies for a minute. r=R is exempt from per-r (``set_limit(..., None)``), so
    per-r's wait (a day: r=R is over its 1 a day) denies nothing. ``_denial`` reads per-r
    as written (not shadow): denied_by names per-r, and retry_after is per-r's day."""
    done, failed = _twice(EXEMPTED, asynchronous, _exempted, r="R", c="C")
    assert (_ids(done), done.retry_after) == (["per-c"], 60.0)
    assert _ids(failed) == ["per-c"]  # got: ['per-r', 'per-c']
    assert failed.retry_after == pytest.approx(60)  # got: 86400.0


def _limited(guard: Any) -> None:
    """c=C limited to 2 a minute (per-key limit); its minute spent by others."""
    _run(guard, "set_limit", "rated", "per-c", "2/minute", c="C")
    for r in ("Q1", "Q2"):
        assert _run(guard, "hit", "rated", r=r, c="C").allowed


def _tiered(guard: Any) -> None:
    """c=C's tier is 2 a minute (``rate_for``); its minute spent by others."""
    for r in ("Q1", "Q2"):
        assert _run(guard, "hit", "rated", r=r, c="C").allowed


@pytest.mark.parametrize(
    ("policy", "before"),
    [
        (
            Policy(
                "rated",
                Rule("100/day", by="r", name="per-r"),
                Rule("100/day", by="c", name="per-c"),
            ),
            _limited,
        ),
        (
            Policy(
                "rated",
                Rule("100/day", by="r", name="per-r"),
                Rule(
                    "100/day",
                    by="c",
                    name="per-c",
                    rate_for=lambda texts: "2/minute" if texts["c"] == "C" else None,
                ),
            ),
            _tiered,
        ),
    ],
    ids=["per-key-limit", "tier"],
)
def test_a_rule_at_another_rate_for_the_key_is_reported_at_that_rate(
    asynchronous: bool, policy: Policy, before: Callable[[Any], None]
) -> None:
    """per-c decides c=C at 2 a minute (a per-key limit, or its tier) and denies. The
    store's decision reports per-c at that rate (``_rules``: capacity 2, the headers'
    q=2;w=60); ``_denial`` reports it at the rule's own 100 a day: capacity, limit, the
    RateLimit-Policy header and the rule in denied_by are of a rate that was not
    decided."""
    done, failed = _twice(policy, asynchronous, before, r="R", c="C")
    assert (done.capacity, done.denied_by[0].capacity) == (2, 2)
    assert failed.capacity == 2  # got: 100
    assert failed.denied_by == done.denied_by  # got: per-c at 100 per 86400 seconds
    assert failed.headers()["RateLimit-Policy"] == done.headers()["RateLimit-Policy"]
