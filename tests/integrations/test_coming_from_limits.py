"""docs/coming-from/limits.md, row by row: each case run through limits and through
freqguard on one pinned clock (limits' memory storage reads ``time.time``, patched here),
the outcomes equal, or different as the page says."""

from __future__ import annotations

import asyncio
import inspect
import re
import types

import limits.storage.memory
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from limits import parse, parse_many, storage, strategies

from freqguard import (
    AsyncGuard,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    async_backend_from_url,
    parse_rate,
    parse_rates,
)
from freqguard.backends.urls import parse_url
from tests.conftest import START, examples


class Clock:
    """One time for both: limits' storage reads it, freqguard's guard is pinned to it."""

    def __init__(self) -> None:
        self.manual = ManualClock(START)

    def time(self) -> float:
        return self.manual.now()

    def at(self, offset: float) -> None:
        self.manual.set(START + offset)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    shared = Clock()
    monkeypatch.setattr(limits.storage.memory, "time", types.SimpleNamespace(time=shared.time))
    return shared


def _guard(clock: Clock, rate: str, strategy: str = "sliding-log") -> Guard:
    policy = Policy("api", Rule(rate, by="user", strategy=strategy))
    return Guard(MemoryBackend(), [policy], clock=clock.manual)


def _both(
    clock: Clock, rate: str, times: list[float], limiter: type[strategies.RateLimiter]
) -> tuple[list[bool], list[bool]]:
    theirs = limiter(storage.MemoryStorage())
    ours = _guard(clock, rate)
    item = parse(rate)
    got_theirs, got_ours = [], []
    for offset in times:
        clock.at(offset)
        got_theirs.append(theirs.hit(item, "u"))
        got_ours.append(ours.hit("api", user="u").allowed)
    return got_theirs, got_ours


@pytest.mark.parametrize("text", ["10/minute", "2 per 59 seconds", "10/minute; 100/hour", "1/day"])
def test_rate_strings(text: str) -> None:
    theirs = [(item.amount, item.get_expiry()) for item in parse_many(text)]
    ours = [(rate.limit, rate.window_seconds) for rate in parse_rates(text)]
    assert theirs == ours
    assert parse_rate("5/m").limit == 5  # and django-ratelimit's, which limits refuses
    # limits 3.x says it cannot parse it, later releases name the granularity
    with pytest.raises(ValueError, match=r"granularity|couldn't parse"):
        parse("5/m")


def test_moving_window_hits(clock: Clock) -> None:
    times = [0, 1, 2, 3, 59, 60.5, 60.9, 61.5, 119, 180]
    theirs, ours = _both(clock, "3/minute", times, strategies.MovingWindowRateLimiter)
    assert theirs == ours == [True, True, True, False, False, True, False, True, True, True]


def test_a_hit_exactly_one_window_old(clock: Clock) -> None:
    """limits' window holds both its ends: a hit exactly 60 s old still counts there. Here
    a hit leaves the window 60 s after it came (a window is (t - 60 s, t])."""
    theirs, ours = _both(clock, "1/minute", [0, 60], strategies.MovingWindowRateLimiter)
    assert theirs == [True, False]
    assert ours == [True, True]


@settings(max_examples=examples(30))
@given(
    limit=st.integers(1, 5),
    gaps=st.lists(st.integers(0, 40_000), min_size=1, max_size=25),
)
def test_moving_window_hits_on_any_stream(limit: int, gaps: list[int]) -> None:
    """Any stream of hits (gaps in ms): limits' moving window and the sliding log answer
    alike, hit for hit."""
    shared = Clock()
    times = [sum(gaps[: i + 1]) / 1000 for i in range(len(gaps))]
    assume(all(abs(b - a) != 60 for i, a in enumerate(times) for b in times[i + 1 :]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(limits.storage.memory, "time", types.SimpleNamespace(time=shared.time))
        theirs, ours = _both(shared, f"{limit}/minute", times, strategies.MovingWindowRateLimiter)
    assert theirs == ours


def test_aio(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """limits.aio's limiter and storage; here an AsyncGuard on an async backend
    (``async_backend_from_url``): the same answers, awaited (found missing from this page
    by a new user's first hour)."""
    import limits.aio.storage.memory
    from limits.aio import storage as aio_storage
    from limits.aio import strategies as aio_strategies

    monkeypatch.setattr(limits.aio.storage.memory, "time", types.SimpleNamespace(time=clock.time))
    times = [0, 1, 2, 59, 61]

    async def run() -> tuple[list[bool], list[bool]]:
        theirs = aio_strategies.MovingWindowRateLimiter(aio_storage.MemoryStorage())
        policy = Policy("api", Rule("2/minute", by="user"))
        ours = AsyncGuard(async_backend_from_url("memory://"), [policy], clock=clock.manual)
        got_theirs, got_ours = [], []
        for offset in times:
            clock.at(offset)
            got_theirs.append(await theirs.hit(parse("2/minute"), "u"))
            got_ours.append((await ours.hit("api", user="u")).allowed)
        return got_theirs, got_ours

    theirs, ours = asyncio.run(run())
    assert theirs == ours == [True, True, False, False, True]


def test_costs(clock: Clock) -> None:
    theirs = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
    ours = _guard(clock, "5/minute")
    item = parse("5/minute")
    got = [(theirs.hit(item, "u", cost=c), ours.hit("api", c, user="u").allowed) for c in (3, 3, 2)]
    assert got == [(True, True), (False, False), (True, True)]


def test_test_is_peek(clock: Clock) -> None:
    theirs = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
    ours = _guard(clock, "1/minute")
    item = parse("1/minute")
    assert theirs.test(item, "u") is ours.peek("api", user="u").allowed is True
    assert theirs.test(item, "u") is ours.peek("api", user="u").allowed is True  # counts none
    theirs.hit(item, "u")
    ours.hit("api", user="u")
    assert theirs.test(item, "u") is ours.peek("api", user="u").allowed is False


def test_test_with_a_cost_is_peek_with_one(clock: Clock) -> None:
    """limits' ``test(item, key, cost=3)``: whether a hit of that cost would pass. peek
    took no cost (a review of the coming-from pages)."""
    theirs = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
    if "cost" not in inspect.signature(theirs.test).parameters:
        pytest.skip("this limits' test() takes no cost (newer ones do)")
    ours = _guard(clock, "5/minute")
    item = parse("5/minute")
    theirs.hit(item, "u", cost=3)
    ours.hit("api", 3, user="u")
    for cost in (1, 2, 3, 5):
        assert theirs.test(item, "u", cost=cost) is ours.peek("api", cost, user="u").allowed
    assert ours.peek("api", cost=2, user="u").remaining == 2  # counts none
    with pytest.raises(ConfigError, match="cost 6 exceeds the capacity 5"):
        ours.peek("api", 6, user="u")


def test_window_stats(clock: Clock) -> None:
    theirs = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
    ours = _guard(clock, "3/minute")
    item = parse("3/minute")
    empty_theirs, empty_ours = theirs.get_window_stats(item, "u"), ours.peek("api", user="u")
    assert empty_theirs.remaining == empty_ours.remaining == 3
    assert empty_theirs.reset_time == clock.time() + 60  # a full window from now
    assert empty_ours.reset_after == 0  # nothing held: nothing to wait for
    clock.at(10)
    theirs.hit(item, "u")
    ours.hit("api", user="u")
    clock.at(15)
    assert theirs.get_window_stats(item, "u").remaining == ours.peek("api", user="u").remaining
    assert theirs.get_window_stats(item, "u").reset_time == START + 70
    assert ours.peek("api", user="u").reset_after == 55  # the same moment, in seconds from now


def test_clear_is_reset(clock: Clock) -> None:
    theirs = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
    ours = _guard(clock, "1/minute")
    item = parse("1/minute")
    theirs.hit(item, "u")
    ours.hit("api", user="u")
    theirs.clear(item, "u")
    ours.reset("api", user="u")
    assert theirs.hit(item, "u") is ours.hit("api", user="u").allowed is True


def test_fixed_window_denied_hits(clock: Clock) -> None:
    theirs = strategies.FixedWindowRateLimiter(storage.MemoryStorage())
    ours = _guard(clock, "5/minute", "fixed-window")
    item = parse("5/minute")
    got = [(theirs.hit(item, "u", cost=c), ours.hit("api", c, user="u").allowed) for c in (3, 3)]
    assert got == [(True, True), (False, False)]
    # limits counted the denied 3 (its counter is at 6): 2 more are denied there, admitted here
    assert (theirs.hit(item, "u", cost=2), ours.hit("api", 2, user="u").allowed) == (False, True)


def test_fixed_window_edges(clock: Clock) -> None:
    """limits starts a key's window at its first hit; freqguard's fixed windows start on
    multiples of their length (every key's at once). 2/minute, hits 10 s and 5 s before a
    minute's edge and 5 s after it: limits denies the third (its window runs 50 s more),
    freqguard admits it (a new window). Neither keeps a window's count in any window: the
    sliding log (the default) denies it too."""
    theirs = strategies.FixedWindowRateLimiter(storage.MemoryStorage())
    ours, exact = _guard(clock, "2/minute", "fixed-window"), _guard(clock, "2/minute")
    item = parse("2/minute")
    edge = 60 - START % 60  # the next minute's edge, from START
    said = []
    for offset in (edge - 10, edge - 5, edge + 5):
        clock.at(offset)
        said.append(
            (
                theirs.hit(item, "u"),
                ours.hit("api", user="u").allowed,
                exact.hit("api", user="u").allowed,
            )
        )
    assert said == [(True, True, True), (True, True, True), (False, True, False)]


@pytest.mark.parametrize("strategy", ["rolling-window", "sliding-log"])
def test_sliding_window_counter(clock: Clock, strategy: str) -> None:
    """Ten hits late in one window; six seconds into the next, limits' counter weighs them
    at 54/60 and admits one more: eleven in the minute ending then. The rolling window (the
    translation: a fixed state at any limit, as the counter) says no, as the log does."""
    if not hasattr(strategies, "SlidingWindowCounterRateLimiter"):  # limits 4.1 added it
        pytest.skip("this limits has no sliding window counter: the row needs both sides")
    theirs = strategies.SlidingWindowCounterRateLimiter(storage.MemoryStorage())
    ours = _guard(clock, "10/minute", strategy)
    item = parse("10/minute")
    start = 60 - (START % 60) - 0.1  # just before one of limits' window edges
    clock.at(start)
    assert all(theirs.hit(item, "u") for _ in range(10))
    assert all(ours.hit("api", user="u").allowed for _ in range(10))
    clock.at(start + 6.1)
    assert theirs.hit(item, "u") is True
    assert ours.hit("api", user="u").allowed is False


def test_cost_above_the_limit(clock: Clock) -> None:
    theirs = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
    assert [theirs.hit(parse("2/minute"), "u", cost=3) for _ in range(3)] == [False] * 3
    with pytest.raises(ConfigError, match="cost 3 exceeds the capacity 2"):
        _guard(clock, "2/minute").hit("api", 3, user="u")


def test_zero_rate(clock: Clock) -> None:
    theirs = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
    assert theirs.hit(parse("0/minute"), "u") is False
    with pytest.raises(ConfigError, match="a limit must be >= 1"):
        parse_rate("0/minute")


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("memory://", "memory"),
        ("redis://localhost:6379/0", "redis"),
        ("rediss://h:6380/1", "redis"),
    ],
)
def test_storage_urls(url: str, kind: str) -> None:
    assert storage.storage_from_string(url) is not None
    assert parse_url(url).kind == kind


@pytest.mark.parametrize(
    ("url", "ours"),
    [
        ("redis+unix:///tmp/redis.sock", "limits' redis+unix:// is unix:// here"),
        ("async+redis://localhost:6379", "limits' async+redis:// is redis:// here"),
        ("valkey://localhost:6379", "Redis's protocol: redis:// here"),
        ("async+redis+cluster://h:7000", "limits' async+redis+cluster:// is redis+cluster://"),
    ],
)
def test_their_other_urls_name_ours(url: str, ours: str) -> None:
    """limits' other URL forms are refused naming the one to write here."""
    with pytest.raises(ConfigError, match=re.escape(ours)):
        parse_url(url)


def test_an_item_is_a_rules_rate() -> None:
    """limits' rate items (``parse``, ``parse_many``'s, ``RateLimitItemPerMinute(10)``)
    are rates where freqguard takes one: the page's ``Rule(item, by="user")`` failed
    ("rate must be a Rate or a rate string, got 10 per 1 minute"; a new-user run)."""
    from limits import RateLimitItemPerDay, RateLimitItemPerMinute

    assert Rule(parse("10/minute"), by="user").rate == parse_rate("10/minute")
    assert Rule(RateLimitItemPerMinute(10), by="user").rate == parse_rate("10/minute")
    assert Rule(RateLimitItemPerDay(5, 2), by="u").rate == parse_rate("5 per 2 days")
    assert [Rule(item, by="u").rate for item in parse_many("1/second; 5/hour")] == list(
        parse_rates("1/second; 5/hour")
    )
    with pytest.raises(ConfigError, match="limit must be an integer from 1"):
        Rule(parse("0/minute"), by="u")
    with pytest.raises(ConfigError, match="the longest is 10 years"):
        Rule(RateLimitItemPerDay(1, 10**9), by="u")
