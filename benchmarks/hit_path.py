"""Guard.hit's lone call against the same hit driven as an operation (``decide_op``).

    python -m benchmarks.hit_path [--messages 100000] [--block 1000] [--backend memory|redis|all]

A hit on a policy that lives in one part is one script call: ``Hits.hit`` prepares it, and
``Guard._run`` sends it alone (no batch around it); every other operation drives
``decide_op``'s generator through the same ``_run``. This measures what the lone call is
worth, on the four-rule SMS policy (sliding logs) and the
seeded stream of ``benchmarks.memory_sms``: two guards, each on its own state, take the same
stream in alternating blocks (the order swapped every block), so drift on a shared machine
falls on both alike. Reported per path: wall time and this process's CPU time per hit, and
the median of the per-block ratios; sync and async; memory and a standalone redis-server of
its own.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from benchmarks.redis_sms import sms_policy
from benchmarks.workload import sms_stream
from freqguard import AsyncGuard, Guard, MemoryBackend, Strategy
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from freqguard.script.contract import HIT
from tests.servers import standalone

Stream = list[tuple[str, str]]
POLICY = sms_policy(Strategy.SLIDING_LOG)


def one_call(guard: Guard, recipient: str, content: str) -> object:
    return guard.hit("sms", recipient=recipient, content=content)


def generic(guard: Guard, recipient: str, content: str) -> object:
    ctx = {"recipient": recipient, "content": content}
    return guard._run(guard._hits.decide("sms", 1, ctx, HIT), "sms")


async def aone_call(guard: AsyncGuard, recipient: str, content: str) -> object:
    return await guard.hit("sms", recipient=recipient, content=content)


async def ageneric(guard: AsyncGuard, recipient: str, content: str) -> object:
    ctx = {"recipient": recipient, "content": content}
    return await guard._run(guard._hits.decide("sms", 1, ctx, HIT), "sms")


class Tally:
    """Wall and CPU seconds per path, and the per-block ratio of the two paths' wall time."""

    def __init__(self) -> None:
        self.wall = {"one-call": 0.0, "generic": 0.0}
        self.cpu = {"one-call": 0.0, "generic": 0.0}
        self.ratios: list[float] = []

    def add(self, took: dict[str, tuple[float, float]]) -> None:
        for path, (wall, cpu) in took.items():
            self.wall[path] += wall
            self.cpu[path] += cpu
        self.ratios.append(took["generic"][0] / took["one-call"][0])

    def show(self, label: str, hits: int) -> None:
        one, gen = self.wall["one-call"], self.wall["generic"]
        cpu_one, cpu_gen = self.cpu["one-call"], self.cpu["generic"]
        print(
            f"{label:<16}{hits / one:>10,.0f}/s {hits / gen:>10,.0f}/s"
            f"{cpu_one / hits * 1e6:>9.1f}{cpu_gen / hits * 1e6:>9.1f}"
            f"{gen / one:>10.3f}x{median(self.ratios):>8.3f}x{cpu_gen / cpu_one:>8.3f}x",
            flush=True,
        )


def alternate(stream: Stream, block: int, run: Callable[[str, Stream], object]) -> Tally:
    """Each block of the stream through both paths, ``run(path, block)``, in turn."""
    tally = Tally()
    for k in range(0, len(stream), block):
        took: dict[str, tuple[float, float]] = {}
        for path in sorted(("one-call", "generic"), reverse=(k // block) % 2 == 1):
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            run(path, stream[k : k + block])
            took[path] = (time.perf_counter() - wall, time.process_time() - cpu)
        tally.add(took)
    return tally


def sync_ab(make: Callable[[str], Guard], stream: Stream, block: int) -> Tally:
    guards = {"one-call": make("a"), "generic": make("b")}
    paths = {"one-call": one_call, "generic": generic}

    def run(path: str, part: Stream) -> None:
        guard, hit = guards[path], paths[path]
        for recipient, content in part:
            hit(guard, recipient, content)

    tally = alternate(stream, block, run)
    for guard in guards.values():
        guard.close()
    return tally


def async_ab(make: Callable[[str], AsyncGuard], stream: Stream, block: int) -> Tally:
    loop = asyncio.new_event_loop()
    guards = {"one-call": make("a"), "generic": make("b")}
    paths = {"one-call": aone_call, "generic": ageneric}

    async def run(path: str, part: Stream) -> None:
        guard, hit = guards[path], paths[path]
        for recipient, content in part:
            await hit(guard, recipient, content)

    tally = alternate(stream, block, lambda path, part: loop.run_until_complete(run(path, part)))
    for guard in guards.values():
        loop.run_until_complete(guard.aclose())
    loop.close()
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000, help="hits per path and run")
    parser.add_argument("--block", type=int, default=1_000, help="hits per alternation")
    parser.add_argument("--backend", choices=("memory", "redis", "all"), default="all")
    args = parser.parse_args()
    stream = sms_stream(args.messages)
    print(
        f"{'':<16}{'one-call':>12}{'generic':>12}{'CPU µs/hit':>18}"
        f"{'generic/one-call: wall':>25}{'median':>8}{'CPU':>8}"
    )
    if args.backend in ("memory", "all"):
        sync_ab(lambda p: Guard(MemoryBackend(), [POLICY], prefix=p), stream, args.block).show(
            "memory, sync", len(stream)
        )
        async_ab(
            lambda p: AsyncGuard(MemoryBackend(), [POLICY], prefix=p), stream, args.block
        ).show("memory, async", len(stream))
    if args.backend in ("redis", "all"):
        with standalone(Path(tempfile.mkdtemp(prefix="fg-hit-path-"))) as server:
            client = Redis(port=server.port)
            sync_ab(
                lambda p: Guard(RedisBackend(client), [POLICY], prefix=p), stream, args.block
            ).show("redis, sync", len(stream))
            server.client.flushall()
            async_ab(
                lambda p: AsyncGuard(
                    AsyncRedisBackend(AsyncRedis(port=server.port)), [POLICY], prefix=p
                ),
                stream,
                args.block,
            ).show("redis, async", len(stream))
            client.close()


if __name__ == "__main__":
    main()
