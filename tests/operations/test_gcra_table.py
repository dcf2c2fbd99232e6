"""redis-cell's published GCRA table, reproduced exactly (and by the token bucket)."""

from __future__ import annotations

import pytest

from freqguard import ManualClock, Policy, Rule
from tests.conftest import GuardFactory

# (ms from start, cost or None for peek) -> (allowed, remaining, reset_after, retry_after)
TABLE = [
    (0, 1, (True, 4, 1.0, 0.0)),
    (0, 1, (True, 3, 2.0, 0.0)),
    (0, 1, (True, 2, 3.0, 0.0)),
    (0, 1, (True, 1, 4.0, 0.0)),
    (0, 1, (True, 0, 5.0, 0.0)),
    (0, 1, (False, 0, 5.0, 1.0)),
    (3000, 1, (True, 2, 3.0, 0.0)),
    (3100, 1, (True, 1, 3.9, 0.0)),
    (4000, 1, (True, 1, 4.0, 0.0)),
    (8000, 1, (True, 4, 1.0, 0.0)),
    (9500, 1, (True, 4, 1.0, 0.0)),
    (9500, None, (True, 4, 1.0, 0.0)),
    (9500, 2, (True, 2, 3.0, 0.0)),
    (9500, 5, (False, 2, 3.0, 3.0)),
]


@pytest.mark.parametrize("strategy", ["gcra", "token-bucket"])
def test_redis_cell_table(make_guard: GuardFactory, clock: ManualClock, strategy: str) -> None:
    guard = make_guard([Policy("cell", Rule("5 per 5 seconds", by="key", strategy=strategy))])
    start = clock.now()
    for ms, cost, expected in TABLE:
        clock.set(start + ms / 1000)
        d = (
            guard.peek("cell", key="user1")
            if cost is None
            else guard.hit("cell", cost, key="user1")
        )
        got = (d.allowed, d.remaining, d.reset_after, d.retry_after)
        assert got == pytest.approx(expected), (ms, cost)


def test_burst_defaults_to_limit_and_can_be_raised(make_guard: GuardFactory) -> None:
    guard = make_guard(
        [Policy("b", Rule("1 per second", by="k", strategy="gcra", burst=3, name="g"))]
    )
    assert [guard.hit("b", k="x").allowed for _ in range(4)] == [True, True, True, False]
    assert guard.peek("b", k="x").limit == 3
