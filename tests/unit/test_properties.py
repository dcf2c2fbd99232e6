"""Every strategy against its brute-force reference model, and its stated guarantee."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule, Strategy
from tests.reference import RATE_STRATEGIES, RefPolicy, max_in_any_window

STEP_US = 50_000


@st.composite
def rules(draw: st.DrawFn, strategy: Strategy | None = None) -> Rule:
    chosen = strategy or draw(st.sampled_from(RATE_STRATEGIES))
    limit = draw(st.integers(1, 6))
    window = draw(st.integers(1, 40)) * 100_000
    from datetime import timedelta

    from freqguard import Rate

    burst = draw(st.none() | st.integers(1, 8)) if chosen.uses_burst else None
    shadow = draw(st.booleans()) if strategy is None else False
    by = draw(st.sampled_from([("a",), ("a", "b")]))
    return Rule(Rate(limit, timedelta(microseconds=window)), by, chosen, burst=burst, shadow=shadow)


def steps() -> st.SearchStrategy[list[tuple[int, int]]]:
    """(µs to advance, cost): coarse steps reach window edges, 1 µs steps probe them; -1 and
    -2 advance to 1 µs before, and exactly to, the last denial's retry_after."""
    advance = st.integers(0, 30).map(lambda n: n * STEP_US) | st.integers(-2, 2)
    return st.lists(st.tuples(advance, st.integers(0, 3)), min_size=1, max_size=60)


def _unique(rule_list: list[Rule]) -> tuple[Rule, ...]:
    return tuple(
        Rule(r.rate, r.by, r.strategy, name=f"r{i}", burst=r.burst, shadow=r.shadow)
        for i, r in enumerate(rule_list)
    )


def _run(policy_rules: tuple[Rule, ...], plan: list[tuple[int, int]]) -> list[list[int]]:
    clock = ManualClock(1_700_000_000)
    policy = Policy("p", *policy_rules)
    guard = Guard(MemoryBackend(), [policy], clock=clock)
    ctx = {d: {"a": "x", "b": "y"}[d] for d in policy.dimensions}
    ref = RefPolicy(policy_rules)
    smallest = min((r.capacity for r in policy_rules if not r.shadow), default=10**9)
    admitted_at: list[list[int]] = [[] for _ in policy_rules]
    retry_us = 0
    for advance_us, cost in plan:
        if advance_us < 0:
            advance_us = max(0, retry_us + advance_us + 1)
        clock.advance(advance_us / 1_000_000)
        cost = min(cost, smallest)
        now = clock.now_us()
        decision = guard.hit("p", cost, **ctx)
        expected_allowed, expected = ref.hit(now, cost)
        got = [
            (s.remaining, round(s.reset_after * 1e6), round(s.retry_after * 1e6))
            for s in decision.rules
        ]
        assert (decision.allowed, got) == (expected_allowed, expected), (now, cost)
        retry_us = round(decision.retry_after * 1e6)
        if decision.allowed:
            for i, state in enumerate(decision.rules):
                if state.allowed:
                    admitted_at[i] += [now] * cost
    return admitted_at


@given(st.lists(rules(Strategy.SLIDING_LOG), min_size=1, max_size=3), steps())
def test_sliding_log_matches_reference_and_is_exact(
    rule_list: list[Rule], plan: list[tuple[int, int]]
) -> None:
    policy_rules = _unique(rule_list)
    admitted = _run(policy_rules, plan)
    for rule, times in zip(policy_rules, admitted, strict=True):
        assert max_in_any_window(times, rule.rate.window_us) <= rule.limit


@given(st.lists(rules(Strategy.ROLLING_WINDOW), min_size=1, max_size=3), steps())
def test_rolling_window_matches_reference_and_is_never_over(
    rule_list: list[Rule], plan: list[tuple[int, int]]
) -> None:
    policy_rules = _unique(rule_list)
    admitted = _run(policy_rules, plan)
    for rule, times in zip(policy_rules, admitted, strict=True):
        assert max_in_any_window(times, rule.rate.window_us) <= rule.limit


@given(st.lists(rules(Strategy.FIXED_WINDOW), min_size=1, max_size=3), steps())
def test_fixed_window_matches_reference(rule_list: list[Rule], plan: list[tuple[int, int]]) -> None:
    policy_rules = _unique(rule_list)
    admitted = _run(policy_rules, plan)
    for rule, times in zip(policy_rules, admitted, strict=True):
        w = rule.rate.window_us
        per_window: dict[int, int] = {}
        for t in times:
            per_window[t // w] = per_window.get(t // w, 0) + 1
        assert max(per_window.values(), default=0) <= rule.limit
        assert max_in_any_window(times, w) <= 2 * rule.limit


@given(
    st.sampled_from([Strategy.TOKEN_BUCKET, Strategy.GCRA]).flatmap(
        lambda s: st.lists(rules(s), min_size=1, max_size=3)
    ),
    steps(),
)
def test_buckets_match_reference(rule_list: list[Rule], plan: list[tuple[int, int]]) -> None:
    policy_rules = _unique(rule_list)
    admitted = _run(policy_rules, plan)
    for rule, times in zip(policy_rules, admitted, strict=True):
        interval = -(-rule.rate.window_us // rule.limit)
        times.sort()
        for i, start in enumerate(times):
            for j in range(i, len(times)):
                # hits admitted within [start, times[j]] never exceed burst + elapsed / interval
                assert j - i + 1 <= rule.capacity + (times[j] - start) // interval


@given(st.lists(rules(), min_size=1, max_size=4), steps())
def test_mixed_policies_are_all_or_nothing(
    rule_list: list[Rule], plan: list[tuple[int, int]]
) -> None:
    _run(_unique(rule_list), plan)


@given(st.lists(rules(Strategy.TOKEN_BUCKET), min_size=1, max_size=2), steps())
def test_token_bucket_and_gcra_admit_the_same_hits(
    rule_list: list[Rule], plan: list[tuple[int, int]]
) -> None:
    tb = _unique(rule_list)
    gc = tuple(Rule(r.rate, r.by, Strategy.GCRA, name=r.name, burst=r.burst) for r in tb)
    assert _run(tb, plan) == _run(gc, plan)
