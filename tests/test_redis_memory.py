"""Redis at its memory limit, and Redis set to evict: on real servers started for the purpose."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from redis import Redis
from redis import exceptions as rex
from redis.asyncio import Redis as AsyncRedis

from freqguard import AsyncGuard, BackendUnavailable, Guard, Policy, Rule
from freqguard.backends.redis import FUNCTION, FUNCTION_NOGROW, AsyncRedisBackend, RedisBackend
from freqguard.script import CHECK, HIT
from tests.conftest import flush
from tests.servers import RedisServer

P = Policy("p", Rule("5/minute", by="r"))
HEADROOM = 1_500_000  # bytes of records the server may take past what it holds at the start


def _used(server: RedisServer) -> int:
    return int(server.client.info("memory")["used_memory"])


@pytest.fixture
def full_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RedisServer, list[str]]]:
    """A server with ``noeviction`` filled with freqguard records until it refuses a hit for
    want of memory. Yields it and every recipient that was hit."""
    server = RedisServer(tmp_path_factory.mktemp("oom"), "--maxmemory-policy", "noeviction")
    try:
        guard = Guard(RedisBackend(Redis(port=server.port)), [P])
        assert guard.hit("p", r="first").allowed  # the library is loaded before the limit
        server.client.config_set("maxmemory", _used(server) + HEADROOM)
        recipients: list[str] = []
        for batch in range(200):  # 1.5 MB of records is some 10,000 recipients: ~20 batches
            names = [f"b{batch}r{n}" for n in range(500)]
            recipients += names
            try:
                guard.hit_many("p", [{"r": name} for name in names])
            except BackendUnavailable as exc:
                refused = exc
                break
        else:
            raise AssertionError("the server never ran out of memory")
        assert isinstance(refused.__cause__, rex.OutOfMemoryError), refused
        guard.close()
        yield server, recipients
    finally:
        server.stop()


def test_out_of_memory_refuses_hits_but_not_peek_refund_or_reset(
    full_server: tuple[RedisServer, list[str]],
) -> None:
    """Redis refuses a function that may write when used memory is past maxmemory, unless it
    is registered allow-oom: calls that never grow state go to such a twin of the function,
    so a full server can still be read, refunded and emptied through freqguard."""
    server, recipients = full_server
    guard = Guard(RedisBackend(Redis(port=server.port)), [P])
    with pytest.raises(BackendUnavailable, match="OutOfMemoryError") as caught:
        guard.hit("p", r="newcomer")
    assert isinstance(caught.value.__cause__, rex.OutOfMemoryError)
    with pytest.raises(BackendUnavailable, match="OutOfMemoryError"):
        guard.hit_many("p", [{"r": "newcomer"}, {"r": "first"}])

    assert guard.peek("p", r="first").remaining == 4
    assert guard.hit("p", 0, r="first").remaining == 4  # cost 0: a check, writes nothing
    assert guard.refund("p", r="first").remaining == 5
    assert guard.peek("p", r="first").remaining == 5

    async def also_async() -> None:
        aguard = AsyncGuard(AsyncRedisBackend(AsyncRedis(port=server.port)), [P])
        assert (await aguard.peek("p", r=recipients[0])).remaining == 4
        with pytest.raises(BackendUnavailable, match="OutOfMemoryError"):
            await aguard.hit("p", r="newcomer")
        await aguard.reset("p", r=recipients[0])
        assert (await aguard.peek("p", r=recipients[0])).remaining == 5
        await aguard.aclose()

    asyncio.run(also_async())

    before = _used(server)
    for name in recipients[: len(recipients) // 2]:
        guard.reset("p", r=name)
    assert _used(server) < before - HEADROOM // 4  # the resets freed memory
    assert guard.hit("p", r="newcomer").allowed  # under the limit again: hits work
    assert guard.peek("p", r="newcomer").remaining == 4
    guard.close()


def test_the_nogrow_function_refuses_a_hit_that_consumes(redis_server: RedisServer) -> None:
    """Whoever calls it: only hits of cost 0 may run where memory is short."""
    flush([redis_server])
    guard = Guard(RedisBackend(Redis(port=redis_server.port)), [P])
    guard.peek("p", r="x")  # loads the library
    client = redis_server.client
    plan = "1 2 0 1 5 60000000 0 0"  # one sliding log, one rule: 5 per minute
    with pytest.raises(rex.ResponseError, match="a hit that consumes cannot run"):
        client.fcall(FUNCTION_NOGROW, 1, "k", "", 1, HIT, plan, "ab")
    client.fcall(FUNCTION_NOGROW, 1, "k", "", 0, HIT, plan, "ab")  # cost 0: a check
    client.fcall(FUNCTION_NOGROW, 1, "k", "", 1, CHECK, plan, "ab")
    assert client.dbsize() == 0
    client.fcall(FUNCTION, 1, "k", "", 1, HIT, plan, "ab")
    assert client.dbsize() == 1
    guard.close()
