"""The rolling window's promises (docs/strategies/rolling-window.md), each against what would
break it: never more than the limit in any window, where a counter that weights the previous
window (``limits``' sliding window counter) admits more; what it gives up, held between two
exact logs of the reference; refunds given back to the hit's own sub-window; limits of any
size, on every store; a ring moved to another window decided alike everywhere."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import (
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rate,
    Rule,
    Strategy,
)
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import RedisBackend
from freqguard.script.strategies.rolling_window import SUB_WINDOWS, grain
from tests.conformance.test_differential import _assert_alike, _unique, ctx, op, rule
from tests.conftest import START, examples, flush
from tests.reference import RefRule, max_in_any_window
from tests.servers import RedisServer

US = 1_000_000


def _ring(limit: int, window_us: int) -> Policy:
    rate = Rate(limit, timedelta(microseconds=window_us))
    return Policy("p", Rule(rate, by="u", strategy="rolling-window"))


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


# -- refunds ---------------------------------------------------------------------------------


def test_a_refund_goes_back_to_the_hit_s_own_sub_window(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """2 per minute (sub-windows of 1 s): A at 0 s, B at 30 s, A refunded, C at 31 s. B and C
    are both in (1 s, 61 s], so D at 61 s must wait for B's sub-window to leave (at 90.999999
    s). Given back to the newest sub-window instead, A's would have kept counting one unit
    until 60.999999 s and then freed it: D admitted, three in one minute."""
    guard = Guard(any_store, [_ring(2, 60 * US)], clock=clock)
    a = guard.hit("p", u="x")
    clock.advance(30)
    assert guard.hit("p", u="x").allowed
    guard.refund(a)
    clock.advance(1)
    assert guard.hit("p", u="x").allowed
    clock.advance(30)
    d = guard.hit("p", u="x")
    assert not d.allowed
    assert d.retry_after == 29.999999


def test_a_refund_gives_back_nothing_once_its_hit_no_longer_counts_there(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """Once the hit's sub-window has left, after a reset, and after the ring moved to
    another window (a per-key limit): another hit's units stay counted."""
    guard = Guard(any_store, [_ring(5, 60 * US)], clock=clock)
    left = guard.hit("p", u="x")
    clock.advance(61)  # the sub-window [0 s, 1 s) left at 60.999999 s
    assert guard.hit("p", u="x").allowed
    assert guard.refund(left).remaining == 4
    clock.advance(61)
    reset = guard.hit("p", u="x")
    guard.reset("p", u="x")
    assert guard.hit("p", u="x").allowed  # the same sub-window, a new ring
    assert guard.refund(reset).remaining == 4
    moved = guard.hit("p", u="x")  # two units now
    guard.set_limit("p", "rw.5.60s", "6 per 120 seconds", u="x")  # sub-windows of 2 s
    assert guard.hit("p", u="x").allowed
    assert guard.refund(moved).remaining == 3  # three units counted: the refund found none


def test_a_refund_after_a_reset_finds_no_ring_of_another_grain(any_store: SyncBackend) -> None:
    """A ring moved to another grain is born at the next µs; a reset on a pinned clock
    judges the next call there too, so the ring after it was born at the same µs at another
    grain: the refund's mark named it, memory gave back the later hit's unit and the Lua
    failed on a sub-window index that was not whole (review). A mark names its grain."""
    clock = ManualClock(1_700_000_000.004)
    guard = Guard(any_store, [_ring(5, 1 * US)], clock=clock)
    guard.hit("p", u="a")
    guard.set_limit("p", "rw.5.1s", "5 per 10 seconds", u="a")
    decision = guard.hit("p", u="a")
    guard.reset("p", u="a")
    guard.clear_limit("p", "rw.5.1s", u="a")
    guard.hit("p", u="a")
    assert guard.refund(decision).remaining == 4  # the later hit's unit stays


# -- a stricter limit, then cleared: the rule's own window still counts ------------------------


def test_a_carry_goes_back_where_it_came_even_under_a_longer_window(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """10 per 100 s; 5 per second, 5 hits, carried once they leave its ring; then 20 per
    1000 s: the carry went back at (its leaving of the *own* window) - 1000 s, 900 s before
    it came, so it left the ring at once, and once cleared the rule admitted 15 in 3 s
    (review). It goes back at its newest unit's time."""
    guard = Guard(any_store, [_ring(10, 100 * US)], clock=clock)
    guard.set_limit("p", "rw.10.100s", "5 per 1 second", u="a")
    assert guard.hit("p", 5, u="a").allowed
    clock.advance(2)
    assert guard.hit("p", u="a").allowed  # the 5 are carried
    guard.set_limit("p", "rw.10.100s", "20 per 1000 seconds", u="a")
    assert guard.hit("p", u="a").allowed
    guard.clear_limit("p", "rw.10.100s", u="a")
    clock.advance(1)
    assert sum(guard.hit("p", u="a").allowed for _ in range(20)) == 3  # 10 in 100 s


def test_a_carry_past_four_bytes_saturates_alike(
    any_store: SyncBackend, clock: ManualClock
) -> None:
    """A carry goes back into one sub-window: past 2^32 - 1 units the Lua packed it 4 bytes
    wide and wrapped (2^32 + 5 read as 5), so Redis admitted where memory denied (review).
    A count saturates at 2^32 - 1, more than any rule's limit and cost: it decides alike."""
    n = 10**9
    guard = Guard(any_store, [_ring(n, 3600 * US)], clock=clock)
    guard.set_limit("p", f"rw.{n}.3600s", f"{n}/minute", u="a")
    for cost in (n, n, n, n, 2**32 - 4 * n + 5, 1):
        assert guard.hit("p", cost, u="a").allowed
        clock.advance(61)
    guard.clear_limit("p", f"rw.{n}.3600s", u="a")
    guard.refund("p", 1, u="a")  # a write
    decision = guard.hit("p", n - 10, u="a")
    assert (decision.allowed, decision.remaining) == (False, 0)


@settings(max_examples=examples(200))
@given(
    own=st.tuples(st.integers(1, 8), st.sampled_from([2, 5, 10])),
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("hit"), st.integers(1, 3)),
            st.tuples(st.just("hit"), st.integers(1, 3)),
            st.tuples(st.just("wait"), st.integers(1, 3000)),  # ms
            # a limit of a shorter window (what leaves its ring is carried), or a longer one
            st.tuples(st.just("limit"), st.tuples(st.integers(1, 12), st.sampled_from([1, 200]))),
            st.tuples(st.just("clear"), st.just(0)),
        ),
        max_size=80,
    ),
)
def test_a_limit_cleared_never_lets_the_rule_admit_more_than_its_own_in_its_window(
    own: tuple[int, int], steps: list[tuple[str, Any]]
) -> None:
    """Against an exact log of every unit admitted: a hit admitted while no limit is in
    force never makes the rule's own window hold more than its limit, whatever limits of
    other windows and counts came and went before (the carry's promise; the review that
    found the carry put back too early under a longer limit checked it so)."""
    limit, window = own
    clock = ManualClock(START)
    guard = Guard(MemoryBackend(clock), [_ring(limit, window * US)], clock=clock)
    rule, admitted, limited = f"rw.{limit}.{window}s", [], False
    for kind, arg in steps:
        if kind == "wait":
            clock.advance(arg / 1000)
        elif kind == "limit":
            guard.set_limit("p", rule, f"{arg[0]} per {arg[1]} seconds", u="a")
            limited = True
        elif kind == "clear":
            guard.clear_limit("p", rule, u="a")
            limited = False
        elif arg <= limit and guard.hit("p", arg, u="a").allowed:
            now = clock.now_us()
            admitted += [now] * arg
            if not limited:
                held = sum(1 for t in admitted if t > now - window * US)
                assert held <= limit, (held, limit)


# -- limits of any size, on every store ------------------------------------------------------


def test_ten_million_in_120_seconds(any_store: SyncBackend, clock: ManualClock) -> None:
    """The issue's limit, and per-key limits beyond it, each unit counted once: sub-windows
    of 2 s, the first hit's [1000 s, 1002 s) counted whole until 1121.999999 s."""
    clock.set(START + 1000)
    policy = Policy(
        "bulk", Rule("10000000 per 120 seconds", by="tenant", strategy="rolling-window")
    )
    guard = Guard(any_store, [policy], clock=clock)
    first = guard.hit("bulk", 9_000_000, tenant="acme")
    assert first.allowed
    assert first.remaining == 1_000_000
    clock.advance(60)
    assert guard.hit("bulk", 1_000_000, tenant="acme").allowed
    denied = guard.hit("bulk", tenant="acme")
    assert not denied.allowed
    assert denied.retry_after == 61.999999
    assert (denied.remaining, denied.reset_after) == (0, 121.999999)
    assert guard.refund(first).remaining == 9_000_000
    guard.set_limit("bulk", "rw.10000000.120s", "1000000000 per 120 seconds", tenant="acme")
    for _ in range(99):
        assert guard.hit("bulk", 10_000_000, tenant="acme").allowed
    assert guard.hit("bulk", 9_000_000, tenant="acme").remaining == 0
    assert not guard.hit("bulk", tenant="acme").allowed
    clock.advance(122)  # the sub-windows of 1060 s and 1061 s have left
    assert guard.peek("bulk", tenant="acme").remaining == 1_000_000_000


# -- hostile numbers ---------------------------------------------------------------------------

NUMBER = st.one_of(
    st.integers(-2, 3),
    st.integers(10**9 - 1, 10**9 + 1),
    st.sampled_from([2**31, 2**53, 10**30]),
    st.floats(allow_nan=True),
    st.none(),
    st.booleans(),
    st.text(max_size=4),
)


@settings(max_examples=examples(150))
@given(
    limit=NUMBER,
    window=NUMBER | st.sampled_from([316_224_000, 316_224_001, 1e-7]),
    burst=NUMBER,
    shadow=NUMBER,
    calendar=st.booleans() | NUMBER,
    cost=NUMBER,
    per_key=st.sampled_from(["0/minute", "1000000001/minute", "5 concurrent", "x", None])
    | st.builds(lambda n, w: f"{n} per {w} seconds", st.integers(-1, 2 * 10**9), NUMBER),
)
def test_hostile_numbers_are_config_errors_naming_them_never_another_error(
    limit: Any, window: Any, burst: Any, shadow: Any, calendar: Any, cost: Any, per_key: Any
) -> None:
    """A rolling-window rule, its hit's cost and a per-key limit from numbers of every kind:
    either it decides, or a ConfigError says what was wrong; never another exception."""
    kwargs = {"shadow": shadow, "calendar": calendar}
    if burst is not None:
        kwargs["burst"] = burst
    said: list[str] = []
    try:
        made = Rule(f"{limit} per {window} seconds", by="u", strategy="rolling-window", **kwargs)
    except ConfigError as exc:
        made, said = None, [str(exc)]
    if made is not None:
        guard = Guard(MemoryBackend(), [Policy("p", made)], clock=ManualClock(START))
        for act in (
            lambda: guard.hit("p", cost, u="x"),
            lambda: guard.set_limit("p", made.id, per_key, u="x"),
            lambda: guard.hit("p", u="x"),
        ):
            try:
                act()
            except ConfigError as exc:
                said.append(str(exc))
    assert all(said)  # each refusal says what


# -- a ring moved to other windows, alike everywhere ---------------------------------------

# per-key limits of other windows (each moves the ring to another grain), cleared, and hits
limit_op = st.tuples(
    st.just("limit"),
    st.tuples(st.integers(0, 2), st.integers(0, 3)),
    st.tuples(st.integers(1, 6), st.integers(1, 30), st.integers(0, 20)),
)
ring_op = st.one_of(op, limit_op, st.tuples(st.just("hit"), st.integers(0, 2), st.just(1)))


@settings(max_examples=examples(40))
@given(
    rules=st.lists(rule([Strategy.ROLLING_WINDOW]), min_size=1, max_size=3),
    pool=st.lists(ctx, min_size=1, max_size=3),
    ops=st.lists(ring_op, min_size=1, max_size=40),
    start=st.sampled_from([1_700_000_000, 0]),
)
def test_rings_carried_to_other_windows_decide_alike_on_every_store(
    redis_backend: RedisBackend,
    binned_backend: RedisBackend,
    cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    rules: list[Rule],
    pool: list[dict[str, str]],
    ops: list[Any],
    start: int,
) -> None:
    flush([redis_server, *redis_cluster])
    backends = [MemoryBackend(), redis_backend, binned_backend, cluster_backend]
    _assert_alike(backends, _unique(rules), pool, ops, start)
