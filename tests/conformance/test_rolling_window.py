"""The rolling window's promises (docs/strategies/rolling-window.md), each against what would
break it: never more than the limit in any window, where a counter that weights the previous
window (``limits``' sliding window counter) admits more; what it gives up, held between two
exact logs of the reference. Refunds are in ``test_rolling_window_refunds.py``; per-key
limits (carries, limits of any size, hostile numbers, a ring moved to another window decided
alike on every store) in ``test_rolling_window_limits.py``; the rig is ``rolling_rig.py``."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rate, Rule
from freqguard.script.strategies.rolling_window import SUB_WINDOWS, grain
from tests.conformance.rolling_rig import US, _ring
from tests.conftest import START, examples
from tests.reference import RefRule, max_in_any_window

# -- never over, where a weighted counter is -------------------------------------------------


def _limits_counter(monkeypatch: pytest.MonkeyPatch, now: list[float]) -> Any:
    """``limits``' sliding window counter on its memory storage, on the clock ``now[0]``
    (the storage reads ``time.time()`` through its module's ``time``: given ours)."""
    strategies = pytest.importorskip("limits.strategies")
    counter = getattr(strategies, "SlidingWindowCounterRateLimiter", None)
    if counter is None:
        pytest.skip("limits < 4.1 has no sliding window counter")
    from limits.storage import memory

    monkeypatch.setattr(memory, "time", SimpleNamespace(time=lambda: now[0]))
    return counter(memory.MemoryStorage())


def test_a_counter_weighting_the_previous_window_admits_more_than_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """10 per minute: ten hits late in one fixed window, then one a second. ``limits``'
    counter weights the previous window's ten by the part of it still inside the rolling
    window, as if they had come evenly, and admits 20 within one minute, twice the limit;
    the rolling window (and the exact log) admit 10."""
    import limits

    base = 1_700_000_040  # a multiple of 60: the start of one of limits' windows
    stream = [base + 59.9] * 10 + [base + 60 + s for s in range(60)]
    now = [0.0]
    counter = _limits_counter(monkeypatch, now)
    item = limits.parse("10/minute")
    theirs = []
    for at in stream:
        now[0] = at
        if counter.hit(item, "u"):
            theirs.append(round(at * US))
    ours: dict[str, list[int]] = {}
    for strategy in ("rolling-window", "sliding-log"):
        clock = ManualClock(base)
        guard = Guard(MemoryBackend(), [Policy("p", Rule("10/minute", strategy=strategy))], clock)
        ours[strategy] = []
        for at in stream:
            clock.set(at)
            if guard.hit("p").allowed:
                ours[strategy].append(clock.now_us())
    assert max_in_any_window(theirs, 60 * US) == 20
    assert max_in_any_window(ours["rolling-window"], 60 * US) == 10
    assert max_in_any_window(ours["sliding-log"], 60 * US) == 10
    assert len(ours["rolling-window"]) == len(ours["sliding-log"])  # nothing given up here


# -- what it gives up, held between two exact logs -------------------------------------------


@st.composite
def streams(draw: st.DrawFn) -> tuple[int, int, list[tuple[int, int]]]:
    """A limit, a window (µs: a few µs, around a multiple of the sub-windows, or long), and
    hits as (µs since the last, cost): most closer than the limit's pace, some a sub-window
    or a window apart, give or take 1 µs."""
    limit = draw(st.integers(1, 8))
    window = draw(
        st.integers(1, 3 * SUB_WINDOWS)
        | st.sampled_from([SUB_WINDOWS * 1000 - 1, SUB_WINDOWS * 1000, SUB_WINDOWS * 1000 + 1])
        | st.integers(1, 3 * US)
    )
    pace, g = max(1, window // limit), grain(window)
    edges = sorted({0, 1, g - 1, g, g + 1, window - g, window - 1, window, window + 1} - {-1})
    gap = st.integers(0, pace) | st.integers(0, 3 * pace) | st.sampled_from(edges)
    hits = draw(st.lists(st.tuples(gap, st.integers(1, limit)), min_size=1, max_size=80))
    return limit, window, hits


def _decide(limit: int, window: int, hits: list[tuple[int, int]]) -> list[tuple[int, int, bool]]:
    """Each hit's (time µs, cost, allowed) on the rolling window, in memory."""
    clock = ManualClock(START)
    guard = Guard(MemoryBackend(), [_ring(limit, window)], clock=clock)
    out = []
    for gap, cost in hits:
        clock.advance(gap / US)
        out.append((clock.now_us(), cost, guard.hit("p", cost, u="x").allowed))
    return out


@settings(max_examples=examples(100))
@given(stream=streams())
def test_never_over_in_any_window_and_denied_only_when_a_grain_longer_window_is_full(
    stream: tuple[int, int, list[tuple[int, int]]],
) -> None:
    """Every interval of the window's length holds at most the limit; a hit is denied only
    if the units admitted in the last ``window + grain - 1`` µs leave no room for it."""
    limit, window, hits = stream
    longer = window + grain(window) - 1
    decided = _decide(limit, window, hits)
    units = [t for t, cost, allowed in decided if allowed for _ in range(cost)]
    assert max_in_any_window(units, window) <= limit
    for t, cost, allowed in decided:
        if not allowed:
            assert sum(t - longer < u <= t for u in units) + cost > limit


@settings(max_examples=examples(100))
@given(stream=streams())
def test_it_admits_between_an_exact_log_of_its_window_and_one_a_grain_longer(
    stream: tuple[int, int, list[tuple[int, int]]],
) -> None:
    """With hits of cost 1, at every moment the rolling window has admitted at most what
    the reference's exact log of its window has, and at least what one of ``window + grain
    - 1`` µs has: so on a stream that saturates the limit, at least ``window / (window +
    grain - 1)`` of what the exact log admits (docs/strategies/rolling-window.md)."""
    limit, window, hits = stream
    hits = [(gap, 1) for gap, _ in hits]
    exact, longer = (
        RefRule(Rule(Rate(limit, timedelta(microseconds=w)), strategy="sliding-log"))
        for w in (window, window + grain(window) - 1)
    )
    counts = [0, 0, 0]  # admitted so far: the exact log, the ring, the longer log
    for t, _, allowed in _decide(limit, window, hits):
        for i, log in ((0, exact), (2, longer)):
            if log.check(t, 1) == 0:
                log.consume(t, 1)
                counts[i] += 1
        counts[1] += allowed
        assert counts[0] >= counts[1] >= counts[2], t


def _admitted(strategy: str, limit: int, window: int, windows: int, burst: int) -> int:
    """A client that always has ``burst`` more to send, in hits of cost 1 at once, and
    waits what ``retry_after`` says when denied: how many are admitted in ``windows``
    windows."""
    clock = ManualClock(START)
    rate = Rate(limit, timedelta(microseconds=window))
    guard = Guard(MemoryBackend(), [Policy("p", Rule(rate, strategy=strategy))], clock=clock)
    end, admitted = clock.now_us() + windows * window, 0
    while clock.now_us() < end:
        decision = guard.hit("p", burst)
        admitted += burst if decision.allowed else 0
        clock.advance(decision.retry_after)
    return admitted


def test_a_client_that_always_has_more_is_admitted_as_by_the_exact_log() -> None:
    """A stream that saturates the limit: each unit is taken again the moment the window
    lets it go. The ring lets a unit go up to a grain late once, then at the end of its
    sub-window, exactly a window after: it admits what the exact log does, less at most
    one limit."""
    for window in (60 * US, 60 * US + 7, 1_000):
        ring = _admitted("rolling-window", 20, window, 50, 1)
        exact = _admitted("sliding-log", 20, window, 50, 1)
        assert exact - 20 <= ring <= exact, (window, ring, exact)


def test_bursts_at_each_sub_window_s_start_are_its_worst_pace() -> None:
    """A burst of the limit at the start of every sub-window: each admitted burst counts a
    whole grain longer than in the exact log (until the end of its sub-window), so the ring
    admits 60 where the reference's exact log admits 61: ``SUB_WINDOWS / (SUB_WINDOWS +
    1)``, the fraction docs/strategies/rolling-window.md states."""
    limit, window = 5, 60 * US
    g = grain(window)
    exact = RefRule(Rule(Rate(limit, timedelta(microseconds=window)), strategy="sliding-log"))
    decided = _decide(limit, window, [(0, limit)] + [(g, limit)] * (61 * SUB_WINDOWS - 1))
    for t, cost, _ in decided:
        if exact.check(t, cost) == 0:
            exact.consume(t, cost)
    ring = sum(allowed for _, _, allowed in decided)
    assert (ring, len(exact.admitted)) == (SUB_WINDOWS, SUB_WINDOWS + 1)


def test_bursts_of_the_limit_one_window_apart_wait_one_sub_window() -> None:
    """The exact log admits a burst of the limit each window, the previous one leaving as
    the next comes; in the ring the previous one's sub-window still counts for a grain
    less 1 µs, so every other burst is denied and told to wait that long (docs: what it
    gives up)."""
    limit, window = 10, 60 * US
    g = grain(window)
    decided = _decide(limit, window, [(0, limit)] + [(window, limit)] * 9)
    assert [allowed for _, _, allowed in decided] == [True, False] * 5
    clock = ManualClock(START)
    guard = Guard(MemoryBackend(), [_ring(limit, window)], clock=clock)
    assert guard.hit("p", limit, u="x").allowed
    clock.advance(60)
    denied = guard.hit("p", limit, u="x")
    assert denied.retry_after == (g - 1) / US
    clock.advance(denied.retry_after)
    assert guard.hit("p", limit, u="x").allowed
