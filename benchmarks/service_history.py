"""What the decisions' history costs the service: the four-rule SMS policy's hits on a
real redis-server, with and without the history's write after each call.

    python -m benchmarks.service_history [--seconds 3] [--tasks 32] [--rounds 3]

Starts its own redis-server (a free port). In one process, ``--tasks`` asyncio tasks hit
random recipients for ``--seconds``: ``AsyncGuard.hit`` alone, then followed by
``History.record`` on a Redis store (the counts and the denied keys added up, written by a
task at most every 0.25 s: what the service adds), then ``hit_many`` batches of 20 alone and
followed by one record; and the same on one task (latency alone). ``--rounds`` alternates the
cases and takes each one's median.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from benchmarks.service import CONFIG
from freqguard.config import loads
from freqguard.guard import AsyncGuard
from freqguard.service.history import History
from tests.servers import standalone

BATCH = 20
DIMENSIONS = ("recipient", "content")
Case = Callable[[int], Awaitable[int]]  # one step of a task: how many hits it decided


def _cases(guard: AsyncGuard, history: History) -> dict[str, Case]:
    def context(rng: random.Random) -> dict[str, object]:
        return {"recipient": f"+1{rng.randrange(10**6)}", "content": f"c{rng.randrange(5)}"}

    rng = random.Random(7)

    async def hit(_: int) -> int:
        await guard.hit("sms", 1, **context(rng))
        return 1

    async def hit_recorded(_: int) -> int:
        ctx = context(rng)
        decided = await guard.hit("sms", 1, **ctx)
        await history.record("sms", (decided,), (ctx,), DIMENSIONS)
        return 1

    async def batch(_: int) -> int:
        await guard.hit_many("sms", [context(rng) for _ in range(BATCH)])
        return BATCH

    async def batch_recorded(_: int) -> int:
        contexts = [context(rng) for _ in range(BATCH)]
        decided = await guard.hit_many("sms", contexts)
        await history.record("sms", decided, contexts, DIMENSIONS)
        return BATCH

    return {
        "hit": hit,
        "hit + history": hit_recorded,
        f"hit-many {BATCH}": batch,
        f"hit-many {BATCH} + history": batch_recorded,
    }


async def _rate(case: Case, tasks: int, seconds: float) -> float:
    """Hits decided per second by ``tasks`` tasks running ``case`` for ``seconds``."""
    end = time.perf_counter() + seconds
    counts = [0] * tasks

    async def run(index: int) -> None:
        while time.perf_counter() < end:
            counts[index] += await case(index)

    start = time.perf_counter()
    await asyncio.gather(*(run(i) for i in range(tasks)))
    return sum(counts) / (time.perf_counter() - start)


async def _measure(port: int, seconds: float, tasks: int, rounds: int) -> None:
    guard = loads(CONFIG.format(port=port)).async_guard()
    history = History(guard)
    cases = _cases(guard, history)
    for width in (tasks, 1):
        found: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(rounds):
            for name, case in cases.items():
                found[name].append(await _rate(case, width, seconds))
        print(f"\n{width} task(s), median of {rounds} rounds of {seconds:g} s")
        for name, rates in found.items():
            rate = statistics.median(rates)
            print(f"  {name:28} {rate:10.0f} hits/s  {1e6 / rate * width:8.1f} us/hit a task")
    await history.aclose()
    await guard.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, standalone(Path(tmp)) as server:
        asyncio.run(_measure(server.port, args.seconds, args.tasks, args.rounds))


if __name__ == "__main__":
    main()
