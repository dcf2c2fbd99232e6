"""What the rolling window gives up and what it costs, side by side in one run.

    python -m benchmarks.rolling_window [--windows 61] [--hits 3000]

1. **Admitted**, in memory on a pinned clock: the rolling window beside the exact sliding
   log (and ``limits``' sliding window counter, which weights the previous window) on the
   same streams, 1000 per 60 s: hits every 10 ms (continuous demand); Poisson arrivals at 2x
   and 10x the limit's pace; a client that always has more and waits what ``retry_after``
   says; bursts of the limit at each sub-window's start (the ring's worst pace); bursts of
   the limit one window apart. Reported: admitted, as a fraction of the exact log's, and
   the most admitted in any 60 s.
2. **Cost per hit and record size on Redis** (its own redis-server, server time from ``INFO
   commandstats``, record from ``MEMORY USAGE``) and in memory, one key kept busy, for a
   sliding log at its ceiling (10,000 per 120 s), the rolling window at that limit and at
   10,000,000 per 120 s, and gcra and fixed-window at 10,000,000: ratios to the sliding log.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.backends.redis import RedisBackend
from freqguard.script.strategies.rolling_window import grain
from tests.reference import max_in_any_window
from tests.servers import standalone, state_keys

US = 1_000_000
LIMIT, WINDOW = 1000, 60 * US
START = 1_700_000_040  # a multiple of 60: limits' windows start on it
Stream = list[tuple[int, int]]  # (µs since the start, cost)


def _streams(windows: int, rng: random.Random) -> dict[str, Stream]:
    span, g = windows * WINDOW, grain(WINDOW)
    poisson: dict[str, Stream] = {}
    for factor in (2, 10):
        at, hits, pace = 0.0, [], WINDOW / (LIMIT * factor)
        while at < span:
            hits.append((int(at), 1))
            at += rng.expovariate(1 / pace)
        poisson[f"Poisson, {factor}x the limit's pace"] = hits
    return {
        "every 10 ms (continuous demand)": [(t, 1) for t in range(0, span, 10_000)],
        **poisson,
        "bursts of the limit at each sub-window's start": [(t, LIMIT) for t in range(0, span, g)],
        "bursts of the limit one window apart": [(t, LIMIT) for t in range(0, span, WINDOW)],
    }


def _freqguard(strategy: str) -> Callable[[Stream], list[int]]:
    def run(stream: Stream) -> list[int]:
        clock = ManualClock(START)
        policy = Policy("p", Rule(f"{LIMIT} per 60 seconds", strategy=strategy))
        guard = Guard(MemoryBackend(), [policy], clock=clock)
        units = []
        for t, cost in stream:
            clock.set(START + t / US)
            if guard.hit("p", cost).allowed:
                units += [t] * cost
        return units

    return run


def _retrying(strategy: str, windows: int) -> list[int]:
    """A client that always has more: one unit at a time, waiting what it is told."""
    clock = ManualClock(START)
    policy = Policy("p", Rule(f"{LIMIT} per 60 seconds", strategy=strategy))
    guard = Guard(MemoryBackend(), [policy], clock=clock)
    units, end = [], clock.now_us() + windows * WINDOW
    while clock.now_us() < end:
        decision = guard.hit("p")
        if decision.allowed:
            units.append(clock.now_us())
        clock.advance(decision.retry_after)
    return units


def _limits_counter(stream: Stream) -> list[int] | None:
    """``limits``' SlidingWindowCounterRateLimiter on its memory storage, our clock given to
    it through the module's ``time`` (it has no clock to inject)."""
    try:
        import limits
        from limits.storage import memory
        from limits.strategies import SlidingWindowCounterRateLimiter
    except ImportError:
        return None
    now = [0.0]
    saved = getattr(memory, "time")  # noqa: B009 (not exported: mypy)
    setattr(memory, "time", SimpleNamespace(time=lambda: now[0]))  # noqa: B010
    try:
        counter = SlidingWindowCounterRateLimiter(memory.MemoryStorage())
        item = limits.parse(f"{LIMIT}/minute")
        units = []
        for t, cost in stream:
            now[0] = START + t / US
            if counter.hit(item, "k", cost=cost):
                units += [t] * cost
        return units
    finally:
        setattr(memory, "time", saved)  # noqa: B010


def admitted(windows: int) -> None:
    print(f"## Admitted: {LIMIT} per 60 s over {windows} windows (memory, pinned clock)\n")
    print("| stream | exact log | rolling window | ring / exact | limits' counter |")
    print("|---|---:|---:|---:|---:|")
    exact_run, ring_run = _freqguard("sliding-log"), _freqguard("rolling-window")
    rows: list[tuple[str, list[int], list[int], list[int] | None]] = []
    for name, stream in _streams(windows, random.Random(7)).items():
        rows.append((name, exact_run(stream), ring_run(stream), _limits_counter(stream)))
    retry = "a client that always has more (retry_after)"
    rows.append(
        (retry, _retrying("sliding-log", windows), _retrying("rolling-window", windows), None)
    )
    for name, exact, ring, theirs in rows:
        cells = [f"{len(u):,} (max {max_in_any_window(u, WINDOW):,})" for u in (exact, ring)]
        other = (
            "-"
            if theirs is None
            else f"{len(theirs):,} (max {max_in_any_window(theirs, WINDOW):,})"
        )
        print(f"| {name} | {cells[0]} | {cells[1]} | {len(ring) / len(exact):.4f} | {other} |")
    print("\n(max: the most admitted in any 60 s)\n")


RULES = {
    "sliding-log 10,000/120 s": ("10000 per 120 seconds", "sliding-log"),
    "rolling-window 10,000/120 s": ("10000 per 120 seconds", "rolling-window"),
    "rolling-window 10,000,000/120 s": ("10000000 per 120 seconds", "rolling-window"),
    "gcra 10,000,000/120 s": ("10000000 per 120 seconds", "gcra"),
    "fixed-window 10,000,000/120 s": ("10000000 per 120 seconds", "fixed-window"),
}


FILL = 10_000  # hits: a full window at the pace below, the log at its ceiling


def _busy(guard: Guard, clock: ManualClock, hits: int, limit: int) -> float:
    """µs per hit at the client, one key kept at its limit: a hit every 12 ms, of cost 1 at
    10,000 per 120 s, of a thousandth of the limit's at 10,000,000."""
    step = 120 / min(limit, 10_000)  # the sliding log's pace at its ceiling, or the limit's
    cost = max(1, limit // 10_000)
    started = time.perf_counter()
    for _ in range(hits):
        guard.hit("p", cost, k="x")
        clock.advance(step)
    return (time.perf_counter() - started) / hits * US


def _server_usec(client: Any) -> float:
    stats = client.info("commandstats").get("cmdstat_fcall", {"usec": 0})
    return float(stats["usec"])


def costs(hits: int) -> None:
    print(f"## Cost per hit, one key kept busy ({hits} hits after {FILL:,} to fill)\n")
    print("| rule | memory µs/hit | Redis server µs/hit | Redis record bytes | ratios to the log |")
    print("|---|---:|---:|---:|---|")
    found: dict[str, tuple[float, float, int]] = {}
    with tempfile.TemporaryDirectory() as tmp, standalone(Path(tmp)) as server:
        import redis

        for name, (rate, strategy) in RULES.items():
            policy = Policy("p", Rule(rate, by="k", strategy=strategy))
            limit = policy.rules[0].limit
            clock = ManualClock(START)
            memory = Guard(MemoryBackend(), [policy], clock=clock)
            _busy(memory, clock, FILL, limit)
            in_memory = _busy(memory, clock, hits, limit)
            server.client.flushall()
            backend = RedisBackend(redis.Redis(port=server.port))
            clock = ManualClock(START)
            guard = Guard(backend, [policy], clock=clock)
            _busy(guard, clock, FILL, limit)
            before = _server_usec(server.client)
            _busy(guard, clock, hits, limit)
            on_server = (_server_usec(server.client) - before) / hits
            (key,) = state_keys(server.client)
            found[name] = (in_memory, on_server, int(server.client.memory_usage(key) or 0))
            backend.close()
    base = found["sliding-log 10,000/120 s"]
    for name, (in_memory, on_server, size) in found.items():
        ratios = f"{in_memory / base[0]:.2f}x, {on_server / base[1]:.2f}x, {size / base[2]:.3f}x"
        print(f"| {name} | {in_memory:.1f} | {on_server:.1f} | {size:,} | {ratios} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=61)
    parser.add_argument("--hits", type=int, default=3000)
    args = parser.parse_args()
    admitted(args.windows)
    costs(args.hits)


if __name__ == "__main__":
    main()
