"""docs/coming-from/redis-cell.md, row by row. redis-cell is a Redis module, not installed
here: ``cell`` below is its ``CL.THROTTLE`` as its source computes it (GCRA in integer
nanoseconds, the five numbers with seconds truncated to whole ones, as its README shows
them), and each row checks it against the README's own output before freqguard runs the
same calls on one pinned clock, in memory and on Redis."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from freqguard import ConfigError, Decision, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import RedisBackend
from tests.conftest import START
from tests.operations.test_gcra_table import TABLE

NS = 1_000_000_000


def _whole(ns: int) -> int:
    """A duration in whole seconds, truncated toward zero (``Duration::num_seconds``)."""
    return -(-ns // NS) if ns < 0 else ns // NS


@dataclass
class Cell:
    """``CL.THROTTLE key max_burst count period [quantity]``: one theoretical arrival time
    per key; the answer ``[limited, limit, remaining, retry_after, reset_after]``."""

    tats: dict[str, int] = field(default_factory=dict)

    def throttle(
        self, now: float, key: str, max_burst: int, count: int, period: int, quantity: int = 1
    ) -> list[int]:
        now_ns = round(now * NS)
        interval = period * NS // count
        tolerance = interval * (max_burst + 1)
        increment = interval * quantity
        tat = self.tats.get(key, now_ns)
        new_tat = (now_ns if now_ns > tat else tat) + increment
        diff = now_ns - (new_tat - tolerance)
        retry = -NS
        if diff < 0:
            if increment <= tolerance:
                retry = -diff
            ttl, limited = tat - now_ns, 1
        else:
            self.tats[key] = new_tat
            ttl, limited = new_tat - now_ns, 0
        spare = tolerance - ttl
        remaining = int(spare / interval) if spare > -interval else 0
        return [limited, max_burst + 1, remaining, _whole(retry), _whole(ttl)]


def five(d: Decision) -> list[int]:
    """A decision as CL.THROTTLE's five numbers (its whole seconds, its -1 when allowed)."""
    retry = -1 if d.allowed else int(d.retry_after)
    return [int(not d.allowed), d.limit, d.remaining, retry, int(d.reset_after)]


#: CL.THROTTLE user123 15 30 60 1, the README's example: 15 of burst, 30 tokens a minute
README = [0, 16, 15, -1, 2]


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[SyncBackend]:
    if request.param == "memory":
        yield MemoryBackend()
    else:
        yield request.getfixturevalue("redis_backend")


def _guard(store: SyncBackend, clock: ManualClock, rule: Rule) -> Guard:
    return Guard(store, [Policy("cell", rule)], clock=clock)


def _ported(store: SyncBackend, clock: ManualClock) -> Guard:
    rule = Rule("30 per 60 seconds", by="key", strategy="gcra", burst=16, name="cell")
    return _guard(store, clock, rule)


def test_throttle_is_a_gcra_rule(store: SyncBackend) -> None:
    clock = ManualClock(START)
    assert Cell().throttle(START, "user123", 15, 30, 60) == README
    guard = _ported(store, clock)
    assert five(guard.hit("cell", key="user123")) == README


def test_the_five_numbers_hit_by_hit(store: SyncBackend) -> None:
    """A burst, a denial, time passing, a quantity: every answer the same."""
    clock, cell = ManualClock(START), Cell()
    guard = _ported(store, clock)
    for offset, quantity in [(0, 1)] * 17 + [(1.5, 1), (3, 2), (3, 3), (40, 5), (40.5, 16)]:
        clock.set(START + offset)
        theirs = cell.throttle(START + offset, "user123", 15, 30, 60, quantity)
        assert five(guard.hit("cell", quantity, key="user123")) == theirs, (offset, quantity)


def test_burst_is_max_burst_plus_one(store: SyncBackend) -> None:
    clock = ManualClock(START)
    guard = _ported(store, clock)
    admitted = [guard.hit("cell", key="user123").allowed for _ in range(20)].count(True)
    assert admitted == 16 == Cell().throttle(START, "k", 15, 30, 60)[1]
    # the rate alone, burst not given: a capacity of the limit (redis-cell's max_burst L - 1)
    plain = _guard(store, clock, Rule("30 per 60 seconds", by="key", strategy="gcra", name="p"))
    assert plain.peek("cell", key="fresh").limit == 30


def test_capacity_and_rate_in_one_rate(store: SyncBackend) -> None:
    """16 at once, then one every 2 s: `16 per 32 seconds` says both, so a per-key limit
    or a tier (a rate, not a burst) can give one key redis-cell's own max_burst."""
    clock, cell = ManualClock(START), Cell()
    guard = _guard(store, clock, Rule("16 per 32 seconds", by="key", strategy="gcra", name="c"))
    for offset in [0] * 17 + [1.0, 2.0, 2.5, 9.0]:
        clock.set(START + offset)
        theirs = cell.throttle(START + offset, "k", 15, 30, 60)
        assert five(guard.hit("cell", key="k")) == theirs


def test_retry_after_when_allowed(store: SyncBackend) -> None:
    guard = _ported(store, ManualClock(START))
    decision = guard.hit("cell", key="user123")
    assert (decision.allowed, decision.retry_after) == (True, 0.0)
    assert Cell().throttle(START, "user123", 15, 30, 60)[3] == -1


def test_seconds_are_exact(store: SyncBackend) -> None:
    """redis-cell truncates: 1.5 s to wait reads 1, and a retry after 1 s is limited again."""
    clock, cell = ManualClock(START), Cell()
    guard = _ported(store, clock)
    for _ in range(16):
        guard.hit("cell", key="k")
        cell.throttle(START, "k", 15, 30, 60)
    clock.set(START + 0.5)
    denied = guard.hit("cell", key="k")
    assert cell.throttle(START + 0.5, "k", 15, 30, 60)[3] == 1
    assert denied.retry_after == 1.5
    clock.set(START + 0.5 + 1)  # redis-cell's whole second: still limited, there and here
    assert cell.throttle(START + 1.5, "k", 15, 30, 60)[0] == 1
    assert not guard.hit("cell", key="k").allowed
    clock.set(START + 0.5 + denied.retry_after)
    assert guard.hit("cell", key="k").allowed
    assert math.ceil(denied.retry_after) == 2  # whole seconds, never early


def test_quantity_is_cost(store: SyncBackend) -> None:
    """redis-cell's own table (its test cases, `tests/operations/test_gcra_table.py`):
    `CL.THROTTLE user1 4 5 5 quantity`."""
    clock, cell = ManualClock(START), Cell()
    guard = _guard(store, clock, Rule("5 per 5 seconds", by="key", strategy="gcra", name="t"))
    for ms, cost, _ in TABLE:
        if cost is None:
            continue
        clock.set(START + ms / 1000)
        theirs = cell.throttle(START + ms / 1000, "user1", 4, 5, 5, cost)
        assert five(guard.hit("cell", cost, key="user1")) == theirs, (ms, cost)


def test_quantity_zero(store: SyncBackend) -> None:
    """0 asks without counting in both; when the bucket is empty redis-cell says not
    limited (0 fits), freqguard that one more would not fit, and when it will."""
    clock, cell = ManualClock(START), Cell()
    guard = _ported(store, clock)
    assert five(guard.peek("cell", key="k")) == cell.throttle(START, "k", 15, 30, 60, 0)
    for _ in range(16):
        guard.hit("cell", key="k")
        cell.throttle(START, "k", 15, 30, 60)
    assert cell.throttle(START, "k", 15, 30, 60, 0)[:3] == [0, 16, 0]
    peek, zero = guard.peek("cell", key="k"), guard.hit("cell", 0, key="k")
    assert (peek.allowed, peek.remaining, peek.retry_after) == (False, 0, 2.0)
    assert zero == peek


def test_quantity_above_the_capacity(store: SyncBackend) -> None:
    """redis-cell limits it with retry_after -1 (it never fits); here it is an error."""
    clock = ManualClock(START)
    guard = _ported(store, clock)
    assert Cell().throttle(START, "k", 15, 30, 60, 17) == [1, 16, 16, -1, 0]
    with pytest.raises(ConfigError, match="exceeds the capacity 16"):
        guard.hit("cell", 17, key="k")


def test_on_the_servers_clock(redis_backend: RedisBackend) -> None:
    """Unpinned, both judge at the Redis server's time: the README's numbers, then a
    denial whose waits are within the calls' own milliseconds of redis-cell's."""
    rule = Rule("30 per 60 seconds", by="key", strategy="gcra", burst=16, name="cell")
    guard = Guard(redis_backend, [Policy("cell", rule)])
    assert five(guard.hit("cell", key="user123")) == README
    for _ in range(15):
        guard.hit("cell", key="user123")
    denied = guard.hit("cell", key="user123")
    assert (denied.allowed, denied.limit, denied.remaining) == (False, 16, 0)
    assert 0.0 < denied.retry_after <= 2.0
    assert 30.0 < denied.reset_after <= 32.0
