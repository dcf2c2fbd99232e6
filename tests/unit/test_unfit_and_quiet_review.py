"""An adversarial review of e0cdb82 (costs at every entry point: ``Unfit``, the deny cache
leaving a per-key limit's denials to the store) and 29d1a61 (quiet hours shown without a
quota of a billion). Each finding a failing test; memory backend, pinned time, no I/O."""

from __future__ import annotations

import pickle
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction

import pytest

from freqguard import (
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    QuietHours,
    Rule,
    TierRates,
)
from freqguard.headers import rate_limit_headers
from tests.conftest import START

#: noon UTC on a Monday: outside quiet hours of 21:00 to 08:00
_NOON = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc).timestamp()


# -- the deny cache: a tier is no per-key limit ------------------------------------------------


def test_the_deny_cache_still_remembers_a_denial_made_at_a_tier_s_rate() -> None:
    """``Policy("t", Rule("2/minute", by="u", name="r", rate_for=TierRates("plan",
    {"pro": "5/minute"})))``, ``Guard(..., deny_cache=100)``, the clock pinned. A free
    caller's third hit is denied by the store and its fourth is answered by the deny cache
    (``source == "deny-cache"``, asserted first). A pro caller's sixth hit is denied by the
    store, and every later one goes to the store again (``source == "backend"``): e0cdb82's
    ``Denials.remember`` keeps a denial only if each ``denied_by`` rule ``is`` one of the
    policy's rules, and a tier's rate is carried as ``Part.limits`` (``engine/tiers.py``),
    so ``PolicyPlan._rules`` reports the rule as a ``limited_rule`` copy: every denial at a
    tier other than the base is left uncached, as if it were a per-key limit that may lapse
    (a tier does not lapse; the cache's whole point, sparing the store a denied caller's
    retries, is lost for the paying tiers). Expected: the pro caller's seventh hit answered
    by the deny cache, as the free caller's fourth is."""
    clock = ManualClock(START)
    rule = Rule("2/minute", by="u", name="r", rate_for=TierRates("plan", {"pro": "5/minute"}))
    guard = Guard(MemoryBackend(), [Policy("t", rule)], clock, deny_cache=100)
    free = [guard.hit("t", u="f", plan="free") for _ in range(4)]
    assert [(d.allowed, d.source) for d in free[2:]] == [
        (False, "backend"),
        (False, "deny-cache"),
    ]
    pro = [guard.hit("t", u="p", plan="pro") for _ in range(7)]
    assert [d.allowed for d in pro] == [True] * 5 + [False, False]
    assert pro[6].source == "deny-cache", [d.source for d in pro]


# -- quiet hours in the headers: no quota of a billion -------------------------------------------


def test_quiet_hours_beside_shadow_rules_are_no_quota_of_a_billion_in_the_headers() -> None:
    """29d1a61: "quiet hours are no quota of a billion in headers" (``_policy_field`` leaves
    the pseudo-rule out; ``binding_rule`` shows a quiet denial by the narrowest real rule).
    A policy trying its limits in shadow while its quiet hours enforce:
    ``Policy("q", Rule("10/minute", by="u", name="r", shadow=True),
    quiet=QuietHours("21:00", "08:00", tz="UTC"))``, at noon UTC. The hit is admitted and
    its ``draft6`` headers are ``RateLimit-Limit: 1000000000``, ``RateLimit-Remaining:
    1000000000`` (``x-ratelimit`` alike), the ``ietf`` ones ``RateLimit-Policy: ""`` and
    ``RateLimit: "quiet-hours";r=1000000000;t=0``: the pseudo-rule is the only non-shadow
    entry, so ``binding_rule`` picks it, and no real rule stands in. Expected: no header
    value of 1000000000 in any profile."""
    clock = ManualClock(_NOON)
    policy = Policy(
        "q",
        Rule("10/minute", by="u", name="r", shadow=True),
        quiet=QuietHours("21:00", "08:00", tz="UTC"),
    )
    decision = Guard(MemoryBackend(), [policy], clock).hit("q", u="a")
    assert decision.allowed
    shown = {
        profile: rate_limit_headers(decision, profile)
        for profile in ("ietf", "draft6", "x-ratelimit")
    }
    billion = {p: h for p, h in shown.items() if any("1000000000" in v for v in h.values())}
    assert not billion, billion


# -- Unfit across a process pool -------------------------------------------------------------------


def test_the_error_a_cost_past_a_per_key_limit_raises_survives_a_pickle() -> None:
    """freqguard's errors are "picklable, e.g. across process pools" (``errors.py``: each
    its ``__reduce__``; ``CapExceeded`` carries its decision across). e0cdb82 makes the
    error of a cost past the capacity as decided ``Unfit(message, decision)``, a
    ``ConfigError`` subclass that keeps ``ConfigError.__reduce__``: ``(type(self),
    self.args, state)``, ``args`` being the message alone. ``Guard.hit("p", 5, u="a")``
    under ``set_limit("p", "r", "3/minute", u="a")`` on ``Rule("10/minute", by="u",
    name="r")`` raises it; ``pickle.loads(pickle.dumps(error))`` raises ``TypeError:
    Unfit.__init__() missing 1 required positional argument: 'decision'`` (a
    ``ProcessPoolExecutor`` worker's hit, a Celery task's result: the caller gets a
    broken pool or an unpickling error instead); the same error was a picklable
    ``ConfigError`` before. Expected: it round-trips, message, ``argument`` and the
    denial kept."""
    guard = Guard(MemoryBackend(), [Policy("p", Rule("10/minute", by="u", name="r"))])
    guard.set_limit("p", "r", "3/minute", u="a")
    with pytest.raises(ConfigError) as caught:
        guard.hit("p", 5, u="a")
    error = caught.value
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.argument) == (type(error), str(error), "cost")
    assert copy.decision.allowed is False


# -- ManualClock.advance -------------------------------------------------------------------------


def test_manual_clock_advance_takes_the_numbers_of_seconds_the_clock_itself_takes() -> None:
    """29d1a61 lets ``ManualClock.advance`` take a ``timedelta``, and refuses anything
    neither ``int`` nor ``float`` ("no number of seconds"). ``ManualClock(0).advance(
    Fraction(1, 2))`` and ``advance(Decimal("1.5"))`` now raise ``ConfigError:
    ManualClock.advance takes seconds >= 0 (or a timedelta), got Fraction(1, 2)``; before
    the commit both moved the clock (``seconds_to_us`` multiplies them), and the same
    clock's constructor and ``set()`` still take them (``ManualClock(Fraction(1, 2))``:
    ``now() == 0.5``, asserted first). Expected: ``advance`` moves the clock by them, as
    before: 0.5 s and 1.5 s."""
    assert ManualClock(Fraction(1, 2)).now() == 0.5  # type: ignore[arg-type]
    set_clock = ManualClock(0)
    set_clock.set(Decimal("1.5"))  # type: ignore[arg-type]
    assert set_clock.now() == 1.5
    moved: list[object] = []
    for seconds in (Fraction(1, 2), Decimal("1.5")):
        clock = ManualClock(0)
        try:
            clock.advance(seconds)  # type: ignore[arg-type]
        except ConfigError as error:
            moved.append(f"ConfigError: {error}")
        else:
            moved.append(clock.now())
    assert moved == [0.5, 1.5]
