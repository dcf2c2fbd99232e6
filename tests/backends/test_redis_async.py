"""Async backends on Redis and Redis Cluster: decisions as memory's, tasks sharing one
connection per node, cancelled callers, a flushed library and a hanging server."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ManualClock,
    MemoryBackend,
    async_backend_from_url,
)
from freqguard.backends.redis import AsyncRedisBackend
from tests.backends.redis_rig import _connections_named, _in_flight, _turns_until
from tests.conftest import SMS, START, flush
from tests.servers import RedisServer


def test_async_backends_decide_like_memory(
    redis_server: RedisServer, redis_cluster: list[RedisServer]
) -> None:
    flush([redis_server, *redis_cluster])
    batch = [{"recipient": f"r{n % 5}", "content": "c"} for n in range(30)]

    async def run(backend: AsyncRedisBackend | MemoryBackend) -> list[object]:
        guard = AsyncGuard(backend, [SMS], clock=ManualClock(START))
        out: list[object] = [await guard.hit("sms", recipient="a", content="x") for _ in range(4)]
        out.append(await guard.hit_many("sms", batch))
        out.append(await guard.refund("sms", recipient="a", content="x"))
        out.append(await guard.peek("sms", recipient="a", content="x"))
        await guard.aclose()
        return out

    async def main() -> list[list[object]]:
        standalone = AsyncRedisBackend(AsyncRedis(port=redis_server.port))
        cluster = AsyncRedisBackend(AsyncRedisCluster(host="127.0.0.1", port=redis_cluster[0].port))
        # a single-connection client keeps its connection: driven through its own API
        single = AsyncRedisBackend(
            AsyncRedis(
                port=redis_server.port,
                single_connection_client=True,
                client_name="one",
                retry=AsyncRetry(NoBackoff(), 0),  # one that retries is refused
            )
        )
        out = [await run(MemoryBackend()), await run(standalone), await run(cluster)]
        flush([redis_server])
        await AsyncGuard(single, [SMS]).hit("sms", recipient="z", content="z")
        assert _connections_named(redis_server, "one") == 1
        return [*out, await run(single)]

    memory, standalone, cluster, single = asyncio.run(main())
    assert standalone == memory
    assert cluster == memory
    assert single == memory


@pytest.mark.parametrize("where", ["redis", "cluster"])
def test_async_tasks_share_a_connection_and_admit_exactly_the_limit(
    where: str, redis_server: RedisServer, redis_cluster: list[RedisServer]
) -> None:
    """32 tasks at once: their calls are batched on one connection per node, each task gets
    its own answer, and exactly the limit is admitted."""
    nodes = [redis_server] if where == "redis" else redis_cluster
    flush(nodes)
    for node in nodes:
        node.client.config_resetstat()

    def connected() -> int:
        return sum(int(node.client.info("clients")["connected_clients"]) for node in nodes)

    before = connected()

    async def main() -> tuple[list[list[bool]], int]:
        client: AsyncRedis | AsyncRedisCluster
        if where == "redis":
            client = AsyncRedis(port=nodes[0].port)
        else:
            client = AsyncRedisCluster(host="127.0.0.1", port=nodes[0].port)
        guard = AsyncGuard(AsyncRedisBackend(client), [SMS], clock=ManualClock(START))

        async def task(n: int) -> list[bool]:
            out = []
            for i in range(6):  # unique contents: only the 15-per-minute rule binds
                decision = await guard.hit("sms", recipient="hot", content=f"{n}:{i}")
                out.append(decision.allowed)
                other = await guard.hit("sms", recipient=f"cold{n}", content="x")
                assert other.allowed == (i < 2)  # 2 per 59 s for that recipient and content
            return out

        results = await asyncio.gather(*(task(n) for n in range(32)))
        connections = connected() - before
        await guard.aclose()
        return results, connections

    results, connections = asyncio.run(main())
    assert sum(sum(r) for r in results) == 15
    stats = [node.client.info("commandstats")["cmdstat_fcall"] for node in nodes]
    # every call ran once (the first ones met an empty server: failed, loaded, redone)
    assert sum(int(s["calls"]) - int(s["failed_calls"]) for s in stats) == 32 * 6 * 2
    assert connections <= 2 * len(nodes)  # one per node (and one that loads), not per task


def test_async_cancelled_callers_leave_the_lane_working(redis_server: RedisServer) -> None:
    flush([redis_server])

    async def main() -> None:
        backend = AsyncRedisBackend(AsyncRedis(port=redis_server.port))
        guard = AsyncGuard(backend, [SMS], clock=ManualClock(START))
        # a backend's first call first asks the server what it is (I/O, not loop turns)
        await guard.peek("sms", recipient="warm", content="x")
        redis_server.client.function_flush()  # the calls below still meet an empty server
        tasks = [
            asyncio.ensure_future(guard.hit("sms", recipient=f"c{n}", content="x"))
            for n in range(10)
        ]
        # every task has queued its call, and the batch is out
        await _turns_until(
            lambda: _in_flight(next((lane for _, lane in backend._lanes.values()), None))
        )
        for task in tasks[::2]:
            task.cancel()
        done = await asyncio.wait_for(asyncio.gather(*tasks[1::2]), 10)
        assert [d.allowed for d in done] == [True] * 5
        again = [await guard.hit("sms", recipient="c1", content="x") for _ in range(2)]
        assert [d.allowed for d in again] == [True, False]  # 2 per 59 s
        await guard.aclose()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_async_function_flush_and_a_hanging_server(
    redis_server: RedisServer, silent_server: int, clock: ManualClock
) -> None:
    flush([redis_server])
    batch = [{"recipient": f"r{n % 7}", "content": f"c{n % 2}"} for n in range(40)]

    async def main() -> None:
        guard = AsyncGuard(async_backend_from_url(redis_server.url), [SMS], clock=clock)
        reference = AsyncGuard(MemoryBackend(), [SMS], clock=clock)
        for _ in range(3):
            redis_server.client.function_flush()
            assert await guard.hit_many("sms", batch) == await reference.hit_many("sms", batch)
            redis_server.client.function_flush()
            assert await guard.hit("sms", recipient="a", content="x") == await reference.hit(
                "sms", recipient="a", content="x"
            )
        await guard.aclose()
        url = f"redis://127.0.0.1:{silent_server}?socket_timeout=0.3"
        hanging = AsyncGuard(async_backend_from_url(url), [SMS])
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="Timeout"):
            await asyncio.gather(
                *(hanging.hit("sms", recipient="a", content="b") for _ in range(5))
            )
        assert 0.25 < time.monotonic() - started < 1.5

    asyncio.run(main())
