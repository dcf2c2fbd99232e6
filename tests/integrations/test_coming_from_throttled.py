"""docs/coming-from/throttled-py.md, row by row: throttled-py (installed with the dev extra:
freqguard does not depend on it) and freqguard side by side on one pinned clock, the
outcomes equal, or different as the page says."""

from __future__ import annotations

import types
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import (
    AsyncGuard,
    CapExceeded,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    capped,
)
from freqguard.backends.urls import parse_url
from tests.conftest import START, examples

throttled = pytest.importorskip("throttled", reason="throttled-py is a dev dependency")
from throttled import MemoryStore, Throttled, per_min  # noqa: E402
from throttled.exceptions import LimitedError  # noqa: E402

#: throttled-py's names for the strategies freqguard shares with it.
SAME = {"gcra": "gcra", "fixed_window": "fixed-window"}


def _pin(patch: pytest.MonkeyPatch) -> ManualClock:
    """One pinned clock for both: throttled-py reads its time through ``throttled.utils``
    and waits with its module's ``time.sleep``, each given this clock."""
    manual = ManualClock(START)
    utils = throttled.utils
    patch.setattr(utils, "now_sec", lambda: int(manual.now()))
    patch.setattr(utils, "now_ms", lambda: int(manual.now() * 1000))
    patch.setattr(utils, "now_mono_f", manual.now)
    waits = types.SimpleNamespace(sleep=manual.advance, time=manual.now)
    patch.setattr(throttled.throttled, "time", waits)
    return manual


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    return _pin(monkeypatch)


def _theirs(using: str, limit: int = 5) -> Any:
    return Throttled(key="u", using=using, quota=per_min(limit), store=MemoryStore())


def _ours(clock: ManualClock, strategy: str, limit: int = 5) -> Guard:
    rule = Rule(f"{limit}/minute", by="user", strategy=strategy)
    return Guard(MemoryBackend(clock), [Policy("api", rule)], clock=clock)


def _run(
    clock: ManualClock, using: str, strategy: str, stream: list[tuple[float, int]]
) -> list[tuple[tuple[bool, int, float], tuple[bool, int, float]]]:
    """Each hit of ``stream`` (seconds from the start, cost) on both: allowed, remaining and
    retry_after (s)."""
    theirs, ours = _theirs(using), _ours(clock, strategy)
    seen = []
    for at, cost in stream:
        clock.advance(START + at - clock.now())
        result = theirs.limit("u", cost=cost)
        decision = ours.hit("api", cost, user="u")
        seen.append(
            (
                (not result.limited, result.state.remaining, round(result.state.retry_after, 6)),
                (decision.allowed, decision.remaining, round(decision.retry_after, 6)),
            )
        )
    return seen


#: a burst, then hits while limited, across a minute's edge
STREAM = [(0.0, 1)] * 6 + [(1.0, 1), (5.0, 1), (12.0, 1), (12.0, 1), (30.0, 2), (59.0, 1)]
STREAM += [(60.0, 1), (61.0, 1)]


@pytest.mark.parametrize("using", sorted(SAME))
def test_the_same_strategies_answer_alike(clock: ManualClock, using: str) -> None:
    """GCRA, and the fixed window (epoch-aligned windows, as here) on hits that fit:
    allowed, remaining and retry_after, hit for hit."""
    for theirs, ours in _run(clock, using, SAME[using], STREAM):
        assert theirs == ours


@settings(max_examples=examples(100))
@given(steps=st.lists(st.tuples(st.integers(0, 20_000), st.integers(1, 5)), max_size=40))
def test_gcra_answers_alike_on_any_stream(steps: list[tuple[int, int]]) -> None:
    """GCRA, any stream of hits and costs: the same answers (their retry_after a float of
    seconds, ours of µs)."""
    with pytest.MonkeyPatch.context() as patch:
        clock = _pin(patch)
        at, stream = 0.0, []
        for ms, cost in steps:
            at += ms / 1000
            stream.append((at, cost))
        for theirs, ours in _run(clock, "gcra", "gcra", stream):
            assert theirs[0] == ours[0]  # allowed
            assert theirs[1] == ours[1]  # remaining
            assert abs(theirs[2] - ours[2]) < 1e-3  # retry_after (their floats)


@pytest.mark.parametrize("using", ["token_bucket", "leaking_bucket"])
def test_a_bucket_admits_alike_and_says_when_to_the_microsecond(
    clock: ManualClock, using: str
) -> None:
    """Their token bucket (the default) and leaking bucket admit what freqguard's token
    bucket admits on hits that line up with whole refills; their retry_after is the whole
    refill interval (12 s at 5 a minute), freqguard's the time until the token this hit
    needs (11 s one second later)."""
    seen = _run(clock, using, "token-bucket", STREAM)
    assert [t[0] for t, _ in seen] == [o[0] for _, o in seen]
    assert seen[6] == ((False, 0, 12.0), (False, 0, 11.0))  # at 1 s
    assert all(o[2] <= t[2] for t, o in seen)


def test_their_fixed_window_counts_a_denied_hit(clock: ManualClock) -> None:
    """A hit their fixed window denies still adds to its counter (as limits' does): a
    costly denied hit leaves a later small one denied; freqguard counts what it admits."""
    seen = _run(clock, "fixed_window", "fixed-window", [(0.0, 1), (0.0, 1), (0.0, 4), (0.0, 1)])
    assert [t[0] for t, _ in seen] == [True, True, False, False]
    assert [o[0] for _, o in seen] == [True, True, False, True]


@pytest.mark.parametrize("strategy", ["rolling-window", "sliding-log"])
def test_their_sliding_window_is_a_counter(clock: ManualClock, strategy: str) -> None:
    """Their sliding window weighs the previous fixed window, as limits' counter does: at
    59 s it admits a sixth hit inside one minute; the rolling window (the translation: a
    fixed state at any limit, as theirs) never does, nor the sliding log (exact, to 10,000).
    The page said the sliding log while the error said the rolling window (a new user)."""
    seen = _run(clock, "sliding_window", strategy, STREAM)
    assert seen[11][0][0] is True  # theirs, at 59 s: six in (-1 s, 59 s]
    assert seen[11][1][0] is False
    assert Rule("100000/minute", strategy="rolling-window")  # a counter's size, as theirs
    with pytest.raises(ConfigError, match="at most 10000"):
        Rule("100000/minute", strategy="sliding-log")


def test_a_cost(clock: ManualClock) -> None:
    theirs, ours = _theirs("gcra"), _ours(clock, "gcra")
    got = [
        (not theirs.limit("u", cost=c).limited, ours.hit("api", c, user="u").allowed)
        for c in (3, 3, 2)
    ]
    assert got == [(True, True), (False, False), (True, True)]


def test_peek(clock: ManualClock) -> None:
    theirs, ours = _theirs("gcra"), _ours(clock, "gcra")
    theirs.limit("u", cost=2)
    ours.hit("api", 2, user="u")
    state, decision = theirs.peek("u"), ours.peek("api", user="u")
    assert (state.remaining, state.retry_after) == (decision.remaining, decision.retry_after)
    assert theirs.peek("u").remaining == ours.peek("api", user="u").remaining == 3  # none


def test_a_timeout_waits_for_the_turn(clock: ManualClock) -> None:
    """``Throttled(timeout=...)`` and ``acquire(timeout=...)`` wait for the hit's turn, on
    the clock, within the timeout; past it neither waits: theirs answers limited, acquire
    raises CapExceeded (its decision on it)."""
    mine = ManualClock(START)  # freqguard's own, so that each side's wait shows
    theirs, ours = _theirs("gcra", 1), _ours(mine, "gcra", 1)
    assert not theirs.limit("u").limited
    assert ours.hit("api", user="u").allowed
    assert not theirs.limit("u", timeout=120).limited
    assert ours.acquire("api", timeout=120, user="u").allowed
    assert clock.now() - START == pytest.approx(60)
    assert mine.now() - START == pytest.approx(60, abs=1e-3)
    assert theirs.limit("u", timeout=10).limited  # 60 s away: no wait, limited
    with pytest.raises(CapExceeded, match="later than the timeout of 10s allows"):
        ours.acquire("api", timeout=10, user="u")  # no wait, raised
    assert (clock.now(), mine.now()) == pytest.approx((START + 60, START + 60), abs=1e-3)


def test_a_decorator(clock: ManualClock) -> None:
    """``@Throttled(key=..., quota=...)`` raises LimitedError when limited; ``@capped``
    raises CapExceeded, a decision on it."""

    @Throttled(key="send", quota=per_min(1), store=MemoryStore())
    def theirs() -> str:
        return "sent"

    guard = Guard(MemoryBackend(clock), [Policy("send", Rule("1/minute"))], clock=clock)

    @capped("send", guard=guard)
    def ours() -> str:
        return "sent"

    assert theirs() == ours() == "sent"
    with pytest.raises(LimitedError):
        theirs()
    with pytest.raises(CapExceeded) as refused:
        ours()
    assert refused.value.decision.retry_after == 60


def test_a_decorator_that_waits(clock: ManualClock) -> None:
    """``@Throttled(..., timeout=120)`` runs the call once its turn comes; ``@capped(...,
    on_exceeded="wait", timeout=120)`` alike. ``timeout=`` alone would wait for nothing
    here: a ConfigError naming ``on_exceeded="wait"`` (it was taken and ignored: the call
    raised at once; a review that ran throttled-py beside freqguard)."""

    @Throttled(key="send", using="gcra", quota=per_min(1), store=MemoryStore(), timeout=120)
    def theirs() -> str:
        return "sent"

    mine = ManualClock(START)  # freqguard's own, so that each side's wait shows
    guard = Guard(MemoryBackend(mine), [Policy("send", Rule("1/minute"))], clock=mine)

    @capped("send", guard=guard, on_exceeded="wait", timeout=120)
    def ours() -> str:
        return "sent"

    assert [theirs(), theirs(), ours(), ours()] == ["sent"] * 4  # the second ones waited
    assert (clock.now() - START, mine.now() - START) == pytest.approx((60, 60), abs=1e-3)
    with pytest.raises(ConfigError, match="on_exceeded='wait'"):
        capped("send", guard=guard, timeout=120)


def test_rate_strings(clock: ManualClock) -> None:
    """Their quota strings read alike: ``"5/s"``, ``"10/m"``, ``"1/h"``, ``"2/d"``."""
    for text, seconds in (("5/s", 1), ("10/m", 60), ("1/h", 3600), ("2/d", 86400)):
        quota = Throttled(key="u", quota=text, store=MemoryStore()).limiter.quota
        rule = Rule(text)
        assert (rule.rate.limit, rule.rate.window_us) == (quota.get_limit(), seconds * 10**6)


def test_store_urls() -> None:
    """``RedisStore(server="redis://...")`` is ``backend_from_url("redis://...")``."""
    assert parse_url("redis://localhost:6379/0").kind == "redis"


def test_asyncio(clock: ManualClock) -> None:
    import asyncio

    from throttled.asyncio import MemoryStore as AsyncMemoryStore
    from throttled.asyncio import Throttled as AsyncThrottled

    async def both() -> list[tuple[bool, bool]]:
        theirs = AsyncThrottled(key="u", using="gcra", quota=per_min(2), store=AsyncMemoryStore())
        ours = AsyncGuard(
            MemoryBackend(clock),
            [Policy("api", Rule("2/minute", strategy="gcra", by="user"))],
            clock=clock,
        )
        return [
            (not (await theirs.limit("u")).limited, (await ours.hit("api", user="u")).allowed)
            for _ in range(3)
        ]

    assert asyncio.run(both()) == [(True, True), (True, True), (False, False)]


#: a burst, then a hit every 7 s: refills that do not line up with whole tokens (12 s each)
OFF_BEAT = [(0.0, 1)] * 5 + [(7.0 * step, 1) for step in range(1, 13)]


def test_their_bucket_drops_a_part_refill(clock: ManualClock) -> None:
    """Their token bucket rounds each hit's refill down to whole tokens and drops the rest
    (a new-user run found the page's "the same admissions" false off the refills' beat):
    after a burst of 5, a hit every 7 s, theirs admits 11 in 84 s, freqguard's 12 (its
    refill is exact to the microsecond, and the rate says 5 a minute: 5 + 84 / 12 = 12)."""
    seen = _run(clock, "token_bucket", "token-bucket", OFF_BEAT)
    assert sum(t[0] for t, _ in seen) == 11
    assert sum(o[0] for _, o in seen) == 12


@pytest.mark.parametrize(
    ("quota", "written", "burst"),
    [
        (per_min(10), "'10/minute'", None),
        (throttled.per_sec(5, burst=20), "'5/second'", "burst=20"),
        (throttled.per_hour(3), "'3/hour'", None),
        (throttled.per_day(2), "'2/day'", None),
        (throttled.per_duration(timedelta(seconds=90), 7), "'7 per 90 seconds'", None),
    ],
)
def test_a_quota_is_refused_naming_its_rate_string(
    quota: Any, written: str, burst: str | None
) -> None:
    """``Rule(per_min(10))``, as the page's own example writes the quota, was refused with
    no hint ("rate must be a Rate, a rate string or limits' item, got Quota(...)"): found
    by a new user. Each place a rate goes names the string to write (and a burst that is
    not the limit, which only a bucket takes), and that string is the quota's rate."""
    from freqguard.integrations.starlette import Limit

    for give in (Rule, lambda q: Limit("/x", q), lambda q: capped(q, guard=Guard())):
        with pytest.raises(ConfigError, match="throttled-py's Quota") as refused:
            give(quota)
        text = str(refused.value)
        assert f"is {written} here" in text
        assert burst is None or (burst in text and "strategy='gcra'" in text)
    rate = Rule(written.strip("'")).rate
    assert (rate.limit, rate.window_us) == (quota.get_limit(), quota.get_period_sec() * 10**6)
