"""A library flushed while calls are in flight: no call ever surfaces "Function not found",
and every call is decided exactly once. On real servers, sync and async, standalone and
cluster; driven by counts, never by sleeping."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from freqguard import AsyncGuard, Decision, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.backends import _library
from freqguard.backends._async import backend as async_backend
from freqguard.backends._sync import backend as sync_backend
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from tests.conftest import START, flush
from tests.faults import flushing
from tests.servers import RedisServer

P = Policy("p", Rule("7/minute", by="r"), Rule("3 per 59 seconds", by=("r", "c")))
WORKERS = 8
ROUNDS = 24  # per worker: a hit, then a batch of 4, alternately


def _operations(worker: int) -> list[tuple[str, list[dict[str, str]]]]:
    """What one worker does, on recipients no other worker uses: its decisions depend only on
    its own calls, so a memory backend replaying them gives the exact expected answers."""
    ops: list[tuple[str, list[dict[str, str]]]] = []
    for n in range(ROUNDS):
        contexts = [{"r": f"w{worker}r{(n + k) % 5}", "c": f"c{k % 2}"} for k in range(4)]
        ops.append(("hit", contexts[:1]) if n % 2 else ("hit_many", contexts))
    return ops


def _expected() -> list[list[list[Decision]]]:
    clock = ManualClock(START)
    out = []
    for worker in range(WORKERS):
        guard = Guard(MemoryBackend(), [P], clock=clock)
        out.append([_run(guard, op, contexts) for op, contexts in _operations(worker)])
    return out


def _run(guard: Guard, op: str, contexts: list[dict[str, str]]) -> list[Decision]:
    if op == "hit":
        return [guard.hit("p", r=contexts[0]["r"], c=contexts[0]["c"])]
    return guard.hit_many("p", contexts)


def _flush_functions(nodes: list[RedisServer]) -> None:
    for node in nodes:
        node.client.function_flush()


def _backend(where: str, nodes: list[RedisServer]) -> RedisBackend:
    if where == "redis":
        return RedisBackend(Redis(port=nodes[0].port))
    return RedisBackend(RedisCluster(host="127.0.0.1", port=nodes[0].port))


def _async_backend(where: str, nodes: list[RedisServer]) -> AsyncRedisBackend:
    if where == "redis":
        return AsyncRedisBackend(AsyncRedis(port=nodes[0].port))
    return AsyncRedisBackend(AsyncRedisCluster(host="127.0.0.1", port=nodes[0].port))


def _nodes(where: str, server: RedisServer, cluster: list[RedisServer]) -> list[RedisServer]:
    nodes = [server] if where == "redis" else cluster
    flush(nodes)
    return nodes


@pytest.mark.parametrize("where", ["redis", "cluster"])
def test_sync_calls_survive_a_flushing_storm(
    where: str, redis_server: RedisServer, redis_cluster: list[RedisServer]
) -> None:
    nodes = _nodes(where, redis_server, redis_cluster)
    guard = Guard(_backend(where, nodes), [P], clock=ManualClock(START))
    got: list[list[list[Decision]]] = [[] for _ in range(WORKERS)]
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for op, contexts in _operations(n):
                got[n].append(_run(guard, op, contexts))
        except BaseException as exc:  # reported below
            errors.append(exc)

    with flushing(nodes) as rounds:
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(WORKERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    guard.close()
    assert not errors, errors[:3]
    assert rounds[0] > 0
    assert got == _expected()


@pytest.mark.parametrize("where", ["redis", "cluster"])
def test_async_calls_survive_a_flushing_storm(
    where: str, redis_server: RedisServer, redis_cluster: list[RedisServer]
) -> None:
    nodes = _nodes(where, redis_server, redis_cluster)

    async def main() -> tuple[list[list[list[Decision]]], list[BaseException], int]:
        guard = AsyncGuard(_async_backend(where, nodes), [P], clock=ManualClock(START))

        async def worker(n: int) -> list[list[Decision]]:
            out = []
            for op, contexts in _operations(n):
                if op == "hit":
                    out.append([await guard.hit("p", r=contexts[0]["r"], c=contexts[0]["c"])])
                else:
                    out.append(await guard.hit_many("p", contexts))
            return out

        with flushing(nodes) as rounds:
            results = await asyncio.gather(
                *(worker(n) for n in range(WORKERS)), return_exceptions=True
            )
        await guard.aclose()
        got = [r for r in results if not isinstance(r, BaseException)]
        errors = [r for r in results if isinstance(r, BaseException)]
        return got, errors, rounds[0]

    got, errors, rounds = asyncio.run(main())
    assert not errors, errors[:3]
    assert rounds > 0
    assert got == _expected()


@pytest.fixture
def flush_behind_every_load(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Fault injection: the first resend behind the load meets a flush every time (its load
    is replaced by a PING), so the calls must go the atomic way. Counts the calls that do.
    Patched where the two backends (one source, generated twice) look it up."""
    atomic = [0]
    again = _library.again
    ping = b"*1\r\n$4\r\nPING\r\n"

    def flushed_between(
        found: _library.Library,
        calls: Sequence[tuple[bytes, bytes]],
        atomic_: bool,
        slot_of: Callable[[bytes], int],
    ) -> tuple[bytes, int, Callable[[Sequence[object]], list[object]]]:
        data, count, read = again(found, calls, atomic_, slot_of)
        if atomic_:
            atomic[0] += len(calls)
            return data, count, read
        assert data.startswith(found.load)
        return ping * found.loads + data[len(found.load) :], count, read

    for module in (sync_backend, async_backend):
        monkeypatch.setattr(module, "again", flushed_between)
    return atomic


@pytest.mark.parametrize("where", ["redis", "cluster"])
def test_calls_that_miss_behind_the_load_go_in_transactions(
    where: str,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    flush_behind_every_load: list[int],
) -> None:
    """A flush between the load and the calls (likely when a batch is read in several
    pieces) sends them again as MULTI, load, calls, EXEC: one transaction per slot on a
    cluster (its keys must share one), at most 64 calls each, order kept within a slot."""
    nodes = _nodes(where, redis_server, redis_cluster)
    clock = ManualClock(START)
    reference = Guard(MemoryBackend(), [P], clock=clock)
    guard = Guard(_backend(where, nodes), [P], clock=clock)
    batch = [{"r": f"r{n % 40}", "c": f"c{n % 3}"} for n in range(150)]  # 40 slots, > 64 calls
    assert guard.hit("p", r="a", c="x") == reference.hit("p", r="a", c="x")
    assert flush_behind_every_load[0] == 1
    _flush_functions(nodes)
    assert guard.hit_many("p", batch) == reference.hit_many("p", batch)
    assert flush_behind_every_load[0] == 151
    guard.close()

    async def main() -> None:
        _flush_functions(nodes)
        aguard = AsyncGuard(_async_backend(where, nodes), [P], clock=clock)
        assert await aguard.hit("p", r="b", c="x") == reference.hit("p", r="b", c="x")
        _flush_functions(nodes)
        assert await aguard.hit_many("p", batch) == reference.hit_many("p", batch)
        await aguard.aclose()

    asyncio.run(main())
    assert flush_behind_every_load[0] == 302
