"""An adversarial pass on a state's *keep* (design note 118): what a ``rate_for`` function's
tier kept past the rule's own rate, remembered in the state. Each claim is checked on every
store against an exact list of the admitted units (``max_in_any_window``), as
``test_rolling_window_seams.py`` does: no window of a rate a hit was decided at holds more
than its count, and memory and the Lua decide alike."""

from __future__ import annotations

import pytest

from freqguard import Guard, ManualClock, Policy, Rule
from freqguard.backends.base import SyncBackend
from tests.conformance.rolling_rig import US
from tests.conformance.rolling_rig import units_of as _units
from tests.reference import max_in_any_window

HOUR = 3600 * US
PLANS = {"pro": "100/hour"}


def _policy(strategy: str, own: str = "10/minute", plans: dict[str, str] = PLANS) -> Policy:
    """``own`` a rule's rate, a ``rate_for`` function giving a plan's rate by the context."""
    rule = Rule(
        own,
        by="u",
        name="r",
        strategy=strategy,
        rate_for=lambda context: plans.get(context.get("plan", "")),
        reads="plan",
    )
    return Policy("p", rule)


# -- a tier met under a per-key limit that covers its numbers -----------------------------


@pytest.mark.parametrize(
    ("strategy", "limit", "lapses"),
    [
        ("sliding-log", "500/day", False),  # the limit's window covers the tier's
        ("sliding-log", "500/day", True),
        ("sliding-log", "200 per 10 minutes", False),  # its count covers the tier's
        ("sliding-log", "100/hour", True),  # the tier's very numbers
        ("rolling-window", "500/day", False),
        ("rolling-window", "500/day", True),
    ],
)
def test_a_tier_met_under_a_limit_that_covers_it_is_remembered_once_the_limit_goes(
    any_store: SyncBackend, clock: ManualClock, strategy: str, limit: str, lapses: bool
) -> None:
    """10 a minute, 100 an hour for plan "pro" (a function); a per-key limit of 500 a day
    for the caller (a boost, cleared or lapsing by its ttl). 100 pro hits under it, then,
    the limit gone, one hit at the rule's own rate half an hour later: a keep was written
    only for what a call kept past its base, and a living limit's numbers count in the
    base (design note 118), so a tier whose window and count the limit covers was never
    remembered, and the own rate's write forgot the hour: 100 more pro hits admitted within
    the hour (200 under 100 an hour; a ``TierRates`` table's rates, kept ahead, admit none).
    A limit of a shorter window but a larger count hides the tier's count alike (90 more)."""
    guard = Guard(any_store, [_policy(strategy)], clock=clock)
    guard.set_limit("p", "r", limit, ttl=60 if lapses else None, u="a")
    pro = [guard.hit("p", u="a", plan="pro") for _ in range(100)]
    assert all(d.allowed for d in pro)
    clock.advance(60)
    if not lapses:
        guard.clear_limit("p", "r", u="a")
    clock.advance(30 * 60)
    assert guard.hit("p", u="a").allowed  # the own rate: one in its minute
    clock.advance(60)
    later = [guard.hit("p", u="a", plan="pro") for _ in range(100)]
    assert max_in_any_window(_units(pro + later), HOUR) <= 100
    assert not any(d.allowed for d in later)
