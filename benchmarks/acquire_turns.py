"""What ``acquire`` gets from a vendor's limit of 200 calls a second, per rule and waiters.

    python -m benchmarks.acquire_turns [--seconds 3] [--threads 1 8] [--tasks 32]

Starts its own redis-server (a free port); for GCRA at ``burst=1`` and ``burst=5`` and the
sliding log (``Rule("200/second")``), threads loop ``guard.acquire("vendor")`` for
``--seconds``, then ``--tasks`` asyncio tasks on an ``AsyncGuard``. Reported: calls a
second over whole seconds after the first (the sliding log admits its limit at the start
of each window: a part of a second would misread it) and the store's calls per admitted
call (``INFO commandstats``). What each admits in any window is the strategies'
guarantee, held by the differential tests and ``benchmarks.audit`` on the store's own
times, not read here.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import tempfile
import threading
import time
from pathlib import Path

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from freqguard import AsyncGuard, Guard, Policy, Rule
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from tests.servers import standalone

_RULES = {
    "gcra, burst=1": Rule("200/second", strategy="gcra", burst=1),
    "gcra, burst=5": Rule("200/second", strategy="gcra", burst=5),
    "sliding log": Rule("200/second"),
}


def _store_calls(client: Redis) -> int:
    found = client.info("commandstats")
    return sum(v["calls"] for k, v in found.items() if k in ("cmdstat_fcall", "cmdstat_evalsha"))


def _run(client: Redis, rule: Rule, threads: int, seconds: float) -> tuple[float, float]:
    client.flushall()
    client.config_resetstat()
    guard = Guard(RedisBackend(client), [Policy("vendor", rule)])
    times: list[float] = []
    stop = time.monotonic() + seconds

    def loop() -> None:
        while time.monotonic() < stop:
            guard.acquire("vendor", timeout=5.0)
            times.append(time.monotonic())

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return _figures(client, times)


def _run_tasks(
    client: Redis, port: int, rule: Rule, tasks: int, seconds: float
) -> tuple[float, float]:
    client.flushall()
    client.config_resetstat()
    times: list[float] = []

    async def run() -> None:
        store = AsyncRedis(port=port)
        guard = AsyncGuard(AsyncRedisBackend(store), [Policy("vendor", rule)])
        stop = time.monotonic() + seconds

        async def loop() -> None:
            while time.monotonic() < stop:
                await guard.acquire("vendor", timeout=5.0)
                times.append(time.monotonic())

        await asyncio.gather(*(loop() for _ in range(tasks)))
        await store.aclose()

    asyncio.run(run())
    return _figures(client, times)


def _figures(client: Redis, times: list[float]) -> tuple[float, float]:
    times.sort()
    whole = int(times[-1] - times[0]) - 1  # whole seconds after the first
    start = times[0] + 1.0
    rate = (bisect.bisect_left(times, start + whole) - bisect.bisect_left(times, start)) / whole
    return rate, _store_calls(client) / len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tasks", type=int, nargs="*", default=[32])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work, standalone(Path(work)) as server:
        for label, rule in _RULES.items():
            for threads in args.threads:
                rate, calls = _run(server.client, rule, threads, args.seconds)
                print(
                    f"{label:14} {threads:3} threads  {rate:6.1f} calls/s  "
                    f"{calls:5.1f} store calls a call"
                )
            for tasks in args.tasks:
                rate, calls = _run_tasks(server.client, server.port, rule, tasks, args.seconds)
                print(
                    f"{label:14} {tasks:3} tasks    {rate:6.1f} calls/s  "
                    f"{calls:5.1f} store calls a call"
                )


if __name__ == "__main__":
    main()
