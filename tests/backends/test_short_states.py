"""States stored short where they fit, in full where they do not: the same decisions either way.

The Lua stores a bucket's state without ``back`` (0 until a refund) and with ``born`` as its
distance from the time before it (5 bytes), and a window's count in 2 bytes, whenever the
numbers fit (``strategies.base.SHORT_SPAN``, ``SHORT_COUNT``); otherwise in full. Each test
drives a state across that edge, from 1 µs or one unit below it to at or past it, and back,
on Redis and on the memory backend from the same pinned time: the decisions, reports and
receipts must be identical (the differential tests' comparison), and the stored state must
have the size the edge says.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from redis import Redis

from freqguard import MemoryBackend, Policy, Rate, Rule
from freqguard.backends.redis import RedisBackend
from freqguard.script.contract import FIELD_HEAD, widths
from freqguard.script.strategies import SHORT_FORMATS, STATE_FORMATS
from freqguard.script.strategies.base import SHORT_COUNT, SHORT_SPAN
from tests.conformance.test_differential import _assert_alike
from tests.conftest import START, flush
from tests.servers import RedisServer, state_keys

HEAD = sum(widths(FIELD_HEAD))
POOL = [{"u": "a", "c": "x", "tz": "Asia/Shanghai"}]
US = 1_000_000


def _size(kind: str, form: str) -> int:
    return sum(widths((SHORT_FORMATS if form == "short" else STATE_FORMATS)[kind]))


def _stored(client: Redis) -> list[int]:
    """The size of every state stored, over every record."""
    sizes = []
    for key in state_keys(client):
        record: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]
        sizes += [len(value) - HEAD for field, value in record.items() if field]
    return sorted(sizes)


def _run(
    redis_server: RedisServer,
    redis_backend: RedisBackend,
    policy: Policy,
    ops: list[Any],
    start: float = START,
) -> list[int]:
    """``ops`` on memory and Redis alike (asserted); the sizes Redis is left storing."""
    flush([redis_server])
    _assert_alike([MemoryBackend(), redis_backend], policy, POOL, ops, int(start))
    return _stored(redis_server.client)


def _gcra(window_us: int) -> Policy:
    return Policy("p", Rule(Rate(1, timedelta(microseconds=window_us)), by="u", strategy="gcra"))


@pytest.mark.parametrize(("window_us", "form"), [(SHORT_SPAN - 1, "short"), (SHORT_SPAN, "full")])
def test_gcra_is_short_while_born_is_within_the_span(
    redis_server: RedisServer, redis_backend: RedisBackend, window_us: int, form: str
) -> None:
    """One hit leaves tat = born + the interval: the window of a 1-per-window rule."""
    ops = [("hit", 0, 1)]
    assert _run(redis_server, redis_backend, _gcra(window_us), ops) == [_size("gcra", form)]
    later = [*ops, ("advance", 0, window_us - 1), ("hit", 0, 1), ("advance", 0, 1), ("hit", 0, 1)]
    _run(redis_server, redis_backend, _gcra(window_us), later)


@pytest.mark.parametrize("strategy", ["gcra", "token-bucket"])
def test_a_bucket_is_stored_in_full_after_a_refund_and_short_once_full_again(
    redis_server: RedisServer, redis_backend: RedisBackend, strategy: str
) -> None:
    policy = Policy("p", Rule("3/minute", by="u", strategy=strategy))
    hits = [("hit", 0, 1), ("hit", 0, 1)]
    assert _run(redis_server, redis_backend, policy, hits) == [_size(strategy, "short")]
    refunded = [*hits, ("undo", 0, 0)]  # back > 0 now
    assert _run(redis_server, redis_backend, policy, refunded) == [_size(strategy, "full")]
    # full again after a minute: a new generation, back 0, short on its next hit
    again = [*refunded, ("undo", 0, 1), ("advance", 0, 60 * US), ("hit", 0, 1), ("undo", 0, 2)]
    assert _run(redis_server, redis_backend, policy, again) == [_size(strategy, "full")]
    assert _run(redis_server, redis_backend, policy, again[:-1]) == [_size(strategy, "short")]


def test_a_token_bucket_refilling_for_longer_than_the_span_goes_full(
    redis_server: RedisServer, redis_backend: RedisBackend
) -> None:
    """born stays while the bucket is never full again; last moves on with each token: one
    interval of SHORT_SPAN - 1 µs after its birth it is short, two after it in full."""
    step = SHORT_SPAN - 1
    window = timedelta(microseconds=2 * step)
    policy = Policy("p", Rule(Rate(2, window), by="u", strategy="token-bucket"))
    ops = [("hit", 0, 2), ("advance", 0, step), ("hit", 0, 1)]  # last - born = SHORT_SPAN - 1
    short, full = _size("token-bucket", "short"), _size("token-bucket", "full")
    assert _run(redis_server, redis_backend, policy, ops) == [short]
    ops += [("advance", 0, step), ("hit", 0, 1)]  # last - born = 2 * (SHORT_SPAN - 1)
    assert _run(redis_server, redis_backend, policy, ops) == [full]
    _run(redis_server, redis_backend, policy, [*ops, ("undo", 0, 1), ("undo", 0, 0)])


MONTH = 30 * 86_400  # s: a fixed window longer than SHORT_SPAN µs (12.7 days)


@pytest.mark.parametrize(("into", "form"), [(SHORT_SPAN - 1, "short"), (SHORT_SPAN, "full")])
def test_a_window_whose_count_began_late_in_it_goes_full(
    redis_server: RedisServer, redis_backend: RedisBackend, into: int, form: str
) -> None:
    """born - start: how far into its window the count began, in 5 bytes below SHORT_SPAN."""
    policy = Policy("p", Rule(Rate(5, timedelta(seconds=MONTH)), by="u", strategy="fixed-window"))
    ops = [("advance", 0, into), ("hit", 0, 1)]
    start = 656 * MONTH  # a window's start: the clock begins aligned
    sizes = _run(redis_server, redis_backend, policy, ops, start=start)
    assert sizes == [_size("fixed-window", form)]
    _run(redis_server, redis_backend, policy, [*ops, ("hit", 0, 4), ("undo", 0, 2)], start=start)


@pytest.mark.parametrize("calendar", [False, True])
def test_a_count_is_short_below_2_bytes_and_full_from_there(
    redis_server: RedisServer, redis_backend: RedisBackend, calendar: bool
) -> None:
    limit = SHORT_COUNT + 5
    rule = Rule(
        Rate(limit, timedelta(days=1)),
        by="u",
        strategy="fixed-window",
        calendar=calendar,
        tz="UTC" if calendar else None,
    )
    policy = Policy("p", rule)
    kind = "calendar" if calendar else "fixed-window"
    short, full = _size(kind, "short"), _size(kind, "full")
    below = [("hit", 0, SHORT_COUNT - 1)]
    assert _run(redis_server, redis_backend, policy, below) == [short]
    at = [*below, ("hit", 0, 1)]
    assert _run(redis_server, redis_backend, policy, at) == [full]
    back = [*at, ("undo", 0, 1)]  # the 1 given back: below again
    assert _run(redis_server, redis_backend, policy, back) == [short]
    _run(redis_server, redis_backend, policy, [*back, ("hit", 0, 6), ("hit", 0, 5), ("hit", 0, 1)])


def test_a_calendar_period_begun_before_1970_is_stored_in_full(
    redis_server: RedisServer, redis_backend: RedisBackend
) -> None:
    """Shanghai's day holding the epoch began at -8 h: a negative start, read back as the full
    form reads it (a short form would have put born 2^56 µs away: the count lost)."""
    rule = Rule("3/day", by="u", calendar=True, tz_from="tz")
    policy = Policy("p", rule)
    ops = [("hit", 0, 1), ("advance", 0, 3600 * US), ("hit", 0, 2), ("hit", 0, 1)]
    sizes = _run(redis_server, redis_backend, policy, ops, start=0)
    assert sizes == [_size("calendar", "full")]
    later = [*ops, ("hours", 0, 16), ("hit", 0, 1)]  # 17:00 UTC: 01:00 the next Shanghai day
    assert _run(redis_server, redis_backend, policy, later, start=0) == [_size("calendar", "short")]
