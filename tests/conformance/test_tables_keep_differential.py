"""A state under a ``TierRates`` table keeps what each tier needs (design note 115), drawn
at random on every store: two tiers and the rule's own rate (a plan not in the table) in
any order, against an exact list of admitted units. A sliding log admits a hit at rate r
exactly when the units admitted in the r.window ending at it, plus its cost, are at most
r.limit; a rolling window never admits past that (its promise, docs/strategies)."""

from __future__ import annotations

import random

import pytest

from freqguard import Guard, ManualClock, Policy, Rule, TierRates
from freqguard.backends.base import SyncBackend

RATES = {"free": None, "pro": (20, 3600), "team": (7, 600)}
OWN = (5, 60)


@pytest.mark.parametrize("strategy", ["sliding_log", "rolling_window"])
@pytest.mark.parametrize("seed", range(6))
def test_a_log_under_a_table_decides_as_the_exact_list(
    any_store: SyncBackend, clock: ManualClock, seed: int, strategy: str
) -> None:
    """300 hits of each seed: gaps at and around each window's edge, costs 1 to 3."""
    draw = random.Random(seed)
    table = TierRates("plan", {"pro": "20/hour", "team": "7 per 10 minutes"})
    policy = Policy("p", Rule("5/minute", by="user", name="r", strategy=strategy, rate_for=table))
    guard = Guard(any_store, [policy], clock=clock)
    admitted: list[tuple[int, int]] = []  # (µs, units)
    now = 0
    for step in range(300):
        gap = draw.choice([0, 1, 7, 30, 59, 60, 61, 200, 599, 600, 601, 1800])
        clock.advance(gap)
        now += gap * 1_000_000
        plan = draw.choice(list(RATES))
        cost = draw.choice([1, 1, 1, 2, 3])
        limit, window = RATES[plan] or OWN
        used = sum(n for t, n in admitted if t > now - window * 1_000_000)
        expected = used + cost <= limit
        got = guard.hit("p", cost, user="u", plan=plan)
        if strategy == "sliding_log":
            assert got.allowed == expected, (seed, step, plan, cost, used, limit)
        else:  # the rolling window's promise: never more than the limit in its window
            assert not got.allowed or expected, (seed, step, plan, cost, used, limit)
        if got.allowed:
            admitted.append((now, cost))


@pytest.mark.parametrize("strategy", ["sliding_log", "rolling_window"])
@pytest.mark.parametrize("seed", range(6))
def test_a_log_under_a_function_s_tiers_decides_as_the_exact_list_once_it_met_them(
    any_store: SyncBackend, clock: ManualClock, seed: int, strategy: str
) -> None:
    """The same draws with ``rate_for`` a function (design note 118): its rates are known
    only as hits meet them, so a state keeps what a tier needs from the first write at that
    tier on, until it expires. Held to the exact list while the state has met the longest
    tier (an admitted "pro" hit since it last expired) and every unit in that tier's window
    came after it; before that, what the rates it met need is all it can keep."""
    draw = random.Random(seed)
    rates = {"pro": "20/hour", "team": "7 per 10 minutes"}
    rule = Rule(
        "5/minute",
        by="user",
        name="r",
        strategy=strategy,
        rate_for=lambda context: rates.get(context.get("plan", "")),
        reads="plan",
    )
    guard = Guard(any_store, [Policy("p", rule)], clock=clock)
    admitted: list[tuple[int, int]] = []  # (µs, units)
    now, met, checked = 0, None, 0  # met: when an admitted pro hit last began the memory
    hour = 3600 * 1_000_000
    for step in range(300):
        gap = draw.choice([0, 1, 7, 30, 59, 60, 61, 200, 599, 600, 601, 1800])
        clock.advance(gap)
        now += gap * 1_000_000
        if admitted and admitted[-1][0] <= now - hour:
            met = None  # the state expired: what it remembered went with it
        plan = draw.choice(list(RATES))
        cost = draw.choice([1, 1, 1, 2, 3])
        limit, window = RATES[plan] or OWN
        used = sum(n for t, n in admitted if t > now - window * 1_000_000)
        expected = used + cost <= limit
        got = guard.hit("p", cost, user="u", plan=plan)
        known = met is not None and all(t >= met for t, _ in admitted if t > now - hour)
        if known:
            checked += 1
            if strategy == "sliding_log":
                assert got.allowed == expected, (seed, step, plan, cost, used, limit)
            else:
                assert not got.allowed or expected, (seed, step, plan, cost, used, limit)
        if got.allowed:
            admitted.append((now, cost))
            if plan == "pro" and met is None:
                met = now
    assert checked > 100
