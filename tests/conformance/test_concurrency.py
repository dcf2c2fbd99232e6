"""Many threads or tasks on one key admit exactly the limit, for every strategy."""

from __future__ import annotations

import asyncio
import threading

import pytest

from freqguard import AsyncGuard, Guard, ManualClock, MemoryBackend, Policy, Rule, Strategy
from tests.reference import RATE_STRATEGIES


@pytest.mark.usefixtures("fast_switching")
@pytest.mark.parametrize("strategy", RATE_STRATEGIES)
def test_threads_admit_exactly_the_limit(strategy: Strategy) -> None:
    guard = Guard(
        MemoryBackend(), [Policy("p", Rule("15/minute", "r", strategy))], clock=ManualClock(1e9)
    )
    admitted = [0] * 16
    barrier = threading.Barrier(16)

    def worker(n: int) -> None:
        barrier.wait()
        for _ in range(50):
            if guard.hit("p", r="hot").allowed:
                admitted[n] += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 15


@pytest.mark.parametrize("strategy", RATE_STRATEGIES)
def test_asyncio_tasks_admit_exactly_the_limit(strategy: Strategy) -> None:
    guard = AsyncGuard(
        MemoryBackend(), [Policy("p", Rule("15/minute", "r", strategy))], clock=ManualClock(1e9)
    )

    async def task() -> bool:
        return (await guard.hit("p", r="hot")).allowed

    async def main() -> list[bool]:
        return await asyncio.gather(*(task() for _ in range(100)))

    assert sum(asyncio.run(main())) == 15
