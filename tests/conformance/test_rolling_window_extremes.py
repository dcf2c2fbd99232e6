"""The rolling window at the edges of every encoding (docs/strategies/rolling-window.md):
limits where a count's width changes (255/256, 65,535/65,536, 2^24, the largest limit),
windows of 1 µs, around 60 µs (a grain of 1 or 2 µs) and of ten years, costs of the whole
limit, steps of a grain or a window give or take 1 µs, clocks that step back, refunds by
receipt and by cost, per-key limits of other windows with a ttl that lapses, deploys of
another rate: memory, Redis, binned Redis and Redis Cluster decide exactly alike, and on
memory no window of the rate in force ever holds more than its limit (an exact list of
the admitted units). The rig is ``rolling_rig.py``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rate, Rule
from freqguard.backends.redis import RedisBackend
from freqguard.bounds import MAX_LIMIT, MAX_WINDOW_US
from freqguard.script.strategies.rolling_window import grain
from tests.conftest import examples, flush
from tests.reference import RefRule, max_in_any_window
from tests.servers import RedisServer

US = 1_000_000
LIMITS = [1, 2, 255, 256, 65_535, 65_536, 2**24 - 1, 2**24, 10_000_000, MAX_LIMIT]
WINDOWS = [1, 2, 59, 60, 61, 119, 121, US, 120 * US, 3600 * US, MAX_WINDOW_US]
rate = st.tuples(st.sampled_from(LIMITS), st.sampled_from(WINDOWS) | st.integers(1, 10 * US))
step = st.one_of(
    # a cost: 1, the whole capacity, one less or more, a width's edge, a share of the limit
    st.tuples(st.just("hit"), st.sampled_from([1, 1, 0, -1, 255, 256, 65_536, 2**24]), st.just(0)),
    st.tuples(st.just("share"), st.integers(1, 64), st.just(0)),
    st.tuples(st.just("peek"), st.sampled_from([1, -1]), st.just(0)),
    st.tuples(st.just("undo"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("refund"), st.sampled_from([1, 256, 2**24, MAX_LIMIT]), st.just(0)),
    # a grain or a window of the rate in force, give or take 1 µs, or some µs
    st.tuples(st.just("grain"), st.integers(1, 3), st.integers(-1, 1)),
    st.tuples(st.just("window"), st.just(1), st.integers(-1, 1)),
    st.tuples(st.just("advance"), st.integers(0, 5 * US), st.just(0)),
    st.tuples(st.just("back"), st.integers(1, 250_000), st.just(0)),
    st.tuples(st.just("limit"), rate, st.integers(0, 30)),  # ttl in 100 ms, 0: for ever
    st.tuples(st.just("clear"), st.just(0), st.just(0)),
    st.tuples(st.just("deploy"), rate, st.just(0)),
)


def _policy(limit: int, window: int) -> Policy:
    rule = Rate(limit, timedelta(microseconds=window))
    return Policy("p", Rule(rule, by="u", name="r", strategy="rolling-window"))


def _given_back(units: list[list[Any]], cost: int) -> None:
    """``cost`` units taken out of the exact list, the newest first: the most lenient
    reading of a refund that names no hit (or of one whose units a refund of a cost took)."""
    units.sort(key=lambda u: u[0])
    while cost and units:
        took = min(cost, units[-1][1])
        units[-1][1] -= took
        cost -= took
        if not units[-1][1]:
            units.pop()


def _replay(backend: Any, own: tuple[int, int], steps: list[Any], start: int) -> list[object]:
    """Each step's outcome; asserting, on the admitted units ``[time, cost, decision]``,
    at each admission, that the window of the rate it was decided by holds at most its
    limit (refunds take their units out: by receipt exactly, by cost the newest). A unit
    counts while the state keeps it (docs, Another window): until it leaves the window the
    state keeps (the longer of the rule's own and the rate in force), and while the state
    lives (a write keeps it for that window: expired, it may be gone)."""
    clock = ManualClock(start)
    guard = Guard(backend, [_policy(*own)], clock=clock)
    out: list[object] = []
    units: list[list[Any]] = []
    capacity, window, latest = own[0], own[1], clock.now()
    kept = (0, 0)  # the last write's time and the window its state keeps
    for kind, arg, more in steps:
        latest = max(latest, clock.now())
        if kind in ("hit", "share", "peek"):
            cost = capacity // arg if kind == "share" else arg
            cost = capacity + cost if cost <= 0 else cost  # 0: the capacity, -1: one less
            try:
                decision = (guard.peek if kind == "peek" else guard.hit)("p", cost, u="x")
            except ConfigError as exc:  # a cost past the capacity as decided
                out.append(str(exc))
                continue
            out.append(decision)
            ruled = decision.rules[0]
            capacity, window = ruled.capacity, ruled.rule.rate.window_us
            if kind != "peek" and decision.allowed and decision.receipt is not None:
                at = decision.receipt.times_us[0]
                keeps = max(window, own[1])
                gone = kept[0] if at >= kept[0] + kept[1] else at - keeps
                units[:] = [u for u in units if u[0] > max(gone, at - keeps)]
                kept = (at, keeps)
                units.append([at, cost, decision])
                held = sum(n for t, n, _ in units if at - window < t <= at)
                assert held <= capacity, (at - start * US, held, capacity, window)
        elif kind == "undo":
            fresh = [u for u in units if u[2].receipt is not None and not u[2].receipt.spent]
            if fresh:
                unit = fresh[arg % len(fresh)]
                try:  # refused after a deploy: the receipt names the policy as it was
                    out.append(guard.refund(unit[2]))
                except ConfigError as exc:
                    out.append(str(exc))
                    continue
                units.remove(unit)
                _given_back(units, unit[2].receipt.cost - unit[1])
        elif kind == "refund":
            out.append(guard.refund("p", arg, u="x"))
            _given_back(units, arg)
        elif kind == "grain":
            clock.advance(max(0, arg * grain(window) + more) / US)
        elif kind == "window":
            clock.advance(max(0, window + more) / US)
        elif kind == "advance":
            clock.advance(arg / US)
        elif kind == "back":  # below the stale grace: every store keeps what it read
            clock.set(max(clock.now() - arg / US, latest - 0.3, 0), backwards=True)
        elif kind == "limit":
            limit = Rate(arg[0], timedelta(microseconds=arg[1]))
            guard.set_limit("p", "r", limit, ttl=more / 10 or None, u="x")
        elif kind == "clear":
            guard.clear_limit("p", "r", u="x")
        else:
            guard.add_policy(_policy(*arg), replace=True)
            own = arg
        out.append(clock.now_us())
    return out


@settings(max_examples=examples(30))
@given(
    own=rate,
    steps=st.lists(step, min_size=1, max_size=40),
    start=st.sampled_from([1_700_000_000, 0, 7_000_000_000]),
)
def test_numbers_at_every_edge_decide_alike_and_never_over(
    redis_backend: RedisBackend,
    binned_backend: RedisBackend,
    cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    own: tuple[int, int],
    steps: list[Any],
    start: int,
) -> None:
    flush([redis_server, *redis_cluster])
    seen = [
        _replay(backend, own, steps, start)
        for backend in (MemoryBackend(), redis_backend, binned_backend, cluster_backend)
    ]
    for found in seen[1:]:
        assert found == seen[0]


@st.composite
def saturating(draw: st.DrawFn) -> tuple[int, int, list[int]]:
    """A limit, a window, and the gaps (µs) between bursts of the limit in hits of cost 1:
    most gaps at an edge where the ring and the exact log part (a grain, a window, a window
    and a grain, each give or take 1 µs), so every burst meets the limit the last left."""
    limit = draw(st.integers(1, 6))
    window = draw(st.sampled_from([61, 119, 60_000, 60_001, US]) | st.integers(61, 10_000))
    g = grain(window)
    edges = [g, window - g, window, window + g - 1, window + g, 2 * window]
    gap = st.sampled_from(edges).flatmap(lambda e: st.integers(max(0, e - 1), e + 1))
    gaps = st.one_of(gap, gap, gap, st.integers(0, window))
    return limit, window, draw(st.lists(gaps, min_size=1, max_size=30))


@settings(max_examples=examples(100))
@given(stream=saturating())
def test_bursts_that_saturate_the_limit_stay_between_the_two_exact_logs(
    stream: tuple[int, int, list[int]],
) -> None:
    """The bound docs/strategies/rolling-window.md states for hits of cost 1, on the
    streams where it is tight: at every moment the ring has admitted at most what the
    reference's exact log of its window has, and at least what one of ``window + grain -
    1`` µs has; and never more than the limit in any window."""
    limit, window, gaps = stream
    exact, longer = (
        RefRule(Rule(Rate(limit, timedelta(microseconds=w)), strategy="sliding-log"))
        for w in (window, window + grain(window) - 1)
    )
    clock = ManualClock(1_700_000_000)
    guard = Guard(MemoryBackend(), [_policy(limit, window)], clock=clock)
    counts, units = [0, 0, 0], []
    for gap in gaps:
        clock.advance(gap / US)
        for _ in range(limit):
            now = clock.now_us()
            for i, log in ((0, exact), (2, longer)):
                if log.check(now, 1) == 0:
                    log.consume(now, 1)
                    counts[i] += 1
            if guard.hit("p", u="x").allowed:
                counts[1] += 1
                units.append(now)
            assert counts[0] >= counts[1] >= counts[2], now
    assert max_in_any_window(units, window) <= limit
