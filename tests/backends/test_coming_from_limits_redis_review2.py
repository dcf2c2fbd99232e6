"""docs/coming-from/limits.md on Redis (a second review's run): ``storage_from_string(
"redis://...")`` under limits' moving window beside ``backend_from_url("redis://...")``
under the sliding log, on one server and one pinned clock. The page's rows are run in
memory by ``tests/integrations/test_coming_from_limits.py``; a user porting a Redis-backed
service meets these."""

from __future__ import annotations

import random
import types

import limits.storage.redis
import pytest
from limits import parse, strategies
from limits.storage import storage_from_string

from freqguard import Guard, ManualClock, Policy, Rule, backend_from_url
from tests.conftest import START, flush
from tests.servers import RedisServer

#: The page maps limits as it is now: before 4, its moving window's Redis storage told a
#: cost's window stats otherwise (the CI matrix's floor, limits 3.7, answered 0 for 1)
THEIRS = tuple(int(part) for part in limits.__version__.split(".")[:1])


@pytest.mark.skipif(THEIRS < (4,), reason="limits before 4 tells remaining otherwise")
@pytest.mark.parametrize("seed", range(6))
def test_moving_window_on_redis_answers_as_the_sliding_log(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """limits.md: ``MovingWindowRateLimiter(storage).hit(item, "u")`` is ``guard.hit``,
    "the same answers, hit for hit", and ``get_window_stats(...).remaining`` is
    ``peek(...).remaining``, "the same"; ``storage_from_string("redis://...")`` is
    ``backend_from_url``. Seen right: a stream of costly hits (no two exactly a window
    apart, where the page says they differ) answered alike on one Redis server."""
    flush([redis_server])
    rnd = random.Random(seed)
    clock = ManualClock(START)
    monkeypatch.setattr(limits.storage.redis, "time", types.SimpleNamespace(time=clock.now))
    url = f"redis://localhost:{redis_server.port}/0"
    limit = rnd.randint(1, 6)
    theirs = strategies.MovingWindowRateLimiter(storage_from_string(url))
    item = parse(f"{limit}/minute")
    guard = Guard(backend_from_url(url), [Policy("api", Rule(item, by="user"))], clock=clock)
    try:
        for _ in range(20):
            clock.advance(rnd.choice([0.5, 1, 3, 7, 13, 29.5, 41]) + rnd.random() / 100)
            cost = rnd.randint(1, limit)
            assert theirs.hit(item, "u", cost=cost) is guard.hit("api", cost, user="u").allowed
            stats = theirs.get_window_stats(item, "u")
            assert stats.remaining == guard.peek("api", user="u").remaining
    finally:
        guard.close()
