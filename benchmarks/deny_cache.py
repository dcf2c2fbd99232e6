"""The deny cache on the Zipf SMS stream: store calls saved, decisions/s gained.

    python -m benchmarks.deny_cache [--messages 100000] [--rate 100000] [--size 100000]

Replays the seeded SMS stream (Zipf recipients over 1,000,000 ids, 20 contents; the
four-rule sliding-log policy) at ``--rate`` messages per second of pinned time, through a
Guard without and with ``deny_cache=--size``, on MemoryBackend and on a redis-server it
starts on a free loopback port. Time is pinned (a ManualClock advanced 1/rate s a message),
so both runs see the same instants: their answers must be identical, and are checked.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.redis_sms import sms_policy
from benchmarks.workload import sms_stream
from freqguard import Guard, ManualClock, MemoryBackend, Strategy
from freqguard.backends.base import SyncBackend

Stream = list[tuple[str, str]]


def replay(
    backend: SyncBackend, stream: Stream, rate: int, size: int
) -> tuple[float, list[bool], int]:
    """(seconds, the answers, store calls) of one run."""
    clock = ManualClock(1_000_000.0)
    guard = Guard(backend, [sms_policy(Strategy.SLIDING_LOG)], clock, deny_cache=size)
    step = 1.0 / rate
    answers: list[bool] = []
    calls = 0
    hit = guard.hit
    start = time.perf_counter()
    for recipient, content in stream:
        decision = hit("sms", recipient=recipient, content=content)
        answers.append(decision.allowed)
        calls += decision.source == "backend"
        clock.advance(step)
    return time.perf_counter() - start, answers, calls


def compare(name: str, make: object, stream: Stream, rate: int, size: int) -> None:
    assert callable(make)
    rows = []
    for cache in (0, size, 0, size):  # interleaved: the second pair checks the first
        seconds, answers, calls = replay(make(), stream, rate, cache)
        rows.append((cache, seconds, answers, calls))
    plain = [r for r in rows if r[0] == 0]
    cached = [r for r in rows if r[0] != 0]
    assert plain[0][2] == cached[0][2], "the deny cache changed an answer"
    denied = plain[0][2].count(False)
    best_plain = min(r[1] for r in plain)
    best_cached = min(r[1] for r in cached)
    n = len(stream)
    print(f"{name}:")
    print(f"  denied                    {denied:>10,} of {n:,} ({denied / n:.1%})")
    print(f"  store calls, no cache     {plain[0][3]:>10,}")
    print(
        f"  store calls, deny_cache   {cached[0][3]:>10,}  "
        f"({1 - cached[0][3] / plain[0][3]:.1%} saved)"
    )
    print(f"  decisions/s, no cache     {n / best_plain:>10,.0f}")
    print(
        f"  decisions/s, deny_cache   {n / best_cached:>10,.0f}  ({best_plain / best_cached:.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=100_000, help="messages per pinned second")
    parser.add_argument("--size", type=int, default=100_000, help="deny_cache entries")
    args = parser.parse_args()
    stream = sms_stream(args.messages)
    print(
        f"{args.messages:,} messages at {args.rate:,}/s of pinned time, deny_cache={args.size:,}\n"
    )
    compare("MemoryBackend", MemoryBackend, stream, args.rate, args.size)

    from freqguard.backends.redis import RedisBackend
    from tests.servers import standalone

    with standalone(Path(tempfile.mkdtemp(prefix="fg-bench-"))) as server:

        def fresh() -> RedisBackend:
            server.client.flushall()
            from redis import Redis

            return RedisBackend(Redis(port=server.port))

        compare("Redis (standalone, loopback)", fresh, stream, args.rate, args.size)


if __name__ == "__main__":
    main()
