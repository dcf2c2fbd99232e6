"""What one hit costs on an exact sliding log at its ceiling (``MAX_LOG_LIMIT`` entries).

A sliding log keeps one entry per admitted unit, so its cost per hit grows with its limit; the
limit is capped so that no configuration can make one call unbounded. This measures the worst
case the cap allows: a log of ``MAX_LOG_LIMIT`` per day kept full (every hit trims the oldest
entry and appends one), hits of cost 1 and of cost ``MAX_LOG_LIMIT`` (on an emptied log), a
rebase that re-encodes every entry, and the bytes the state takes, in memory and on Redis
(server time from ``INFO commandstats``, so the client and the network are left out).

    python -m benchmarks.log_ceiling [--hits 2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.backends.redis import FUNCTION, RedisBackend
from freqguard.bounds import MAX_LOG_LIMIT
from tests.servers import standalone

DAY = 86_400.0


def _policy() -> Policy:
    return Policy("ceiling", Rule(f"{MAX_LOG_LIMIT}/day", by="k"))


def _fill(guard: Guard, clock: ManualClock) -> None:
    for _ in range(MAX_LOG_LIMIT):
        assert guard.hit("ceiling", k="x").allowed
        clock.advance(DAY / MAX_LOG_LIMIT)  # one entry leaves the window for each one added


def _steady(guard: Guard, clock: ManualClock, hits: int) -> float:
    """µs per hit on a full log, each hit trimming one entry and appending one."""
    started = time.perf_counter()
    for _ in range(hits):
        assert guard.hit("ceiling", k="x").allowed
        clock.advance(DAY / MAX_LOG_LIMIT)
    return (time.perf_counter() - started) / hits * 1e6


def _server_us(server_client: object) -> tuple[int, float]:
    stats = server_client.info("commandstats")  # type: ignore[attr-defined]
    fcall = stats.get("cmdstat_fcall", {"calls": 0, "usec": 0})
    return int(fcall["calls"]), float(fcall["usec"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hits", type=int, default=2000)
    args = parser.parse_args()
    print(f"sliding log at its ceiling: {MAX_LOG_LIMIT}/day, log kept full\n")

    clock = ManualClock(1_700_000_000)
    memory = Guard(MemoryBackend(), [_policy()], clock=clock)
    _fill(memory, clock)
    per_hit = _steady(memory, clock, args.hits)
    big = Guard(MemoryBackend(), [_policy()], clock=clock)
    started = time.perf_counter()
    assert big.hit("ceiling", cost=MAX_LOG_LIMIT, k="x").allowed
    big_us = (time.perf_counter() - started) * 1e6
    print(
        f"memory: {per_hit:.1f} µs per hit (cost 1, full log); one hit of cost "
        f"{MAX_LOG_LIMIT}: {big_us:.0f} µs; state {8 * MAX_LOG_LIMIT} bytes of entries"
    )

    with tempfile.TemporaryDirectory() as tmp, standalone(Path(tmp)) as server:
        import redis

        backend = RedisBackend(redis.Redis(port=server.port))
        guard = Guard(backend, [_policy()], clock=clock)
        _fill(guard, clock)
        calls0, usec0 = _server_us(server.client)
        wall = _steady(guard, clock, args.hits)
        calls1, usec1 = _server_us(server.client)
        server_us = (usec1 - usec0) / max(1, calls1 - calls0)
        (key,) = server.client.keys("*")
        used = server.client.memory_usage(key)
        print(
            f"redis: {server_us:.1f} µs of server time per hit (cost 1, full log), "
            f"{wall:.1f} µs per hit at the client; record {used} bytes"
        )
        clock.advance(4 * DAY)  # past four windows: the next hit rebases (re-encodes) the log
        _fill(guard, clock)
        calls0, usec0 = _server_us(server.client)
        clock.advance(3 * DAY + 1)
        guard.hit("ceiling", k="x")
        calls1, usec1 = _server_us(server.client)
        print(f"redis: a hit after the log emptied: {(usec1 - usec0):.0f} µs of server time")
        guard.reset("ceiling", k="x")
        calls0, usec0 = _server_us(server.client)
        assert guard.hit("ceiling", cost=MAX_LOG_LIMIT, k="x").allowed
        calls1, usec1 = _server_us(server.client)
        print(f"redis: one hit of cost {MAX_LOG_LIMIT}: {(usec1 - usec0):.0f} µs of server time")
        worst = 0.0
        for _ in range(20):  # the slowest single call seen on a full log (re-encode included)
            calls0, usec0 = _server_us(server.client)
            guard.hit("ceiling", k="x")
            clock.advance(DAY / MAX_LOG_LIMIT)
            calls1, usec1 = _server_us(server.client)
            worst = max(worst, usec1 - usec0)
        print(f"redis: slowest of 20 hits on a full log: {worst:.0f} µs; function {FUNCTION}")
        backend.close()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
