"""Redis at its memory limit, and Redis set to evict: on real servers started for the purpose."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import pytest
from redis import Redis
from redis import exceptions as rex
from redis.asyncio import Redis as AsyncRedis

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    Guard,
    Policy,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from freqguard.backends._library import FUNCTION_BIN, FUNCTION_BIN_NOGROW
from freqguard.backends.redis import FUNCTION, FUNCTION_NOGROW, AsyncRedisBackend, RedisBackend
from freqguard.script.contract import CHECK, CLAIM, HIT, LIMIT
from tests.conftest import flush
from tests.servers import RedisServer, state_keys

P = Policy("p", Rule("5/minute", by="r"))


def _used(server: RedisServer) -> int:
    return int(server.client.info("memory")["used_memory"])


@pytest.fixture
def full_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RedisServer, list[str], int]]:
    """A ``noeviction`` server holding 10,000 recipients' records, its maxmemory then set
    below what it holds by a tenth of their bytes: full, by a margin that no connection's
    buffers can bridge. Yields it, the recipients (each hit once), and their bytes."""
    server = RedisServer(tmp_path_factory.mktemp("oom"), "--maxmemory-policy", "noeviction")
    try:
        guard = Guard(RedisBackend(Redis(port=server.port)), [P])
        assert guard.hit("p", r="first").allowed  # the library is loaded before the limit
        empty = _used(server)
        recipients = [f"r{n}" for n in range(10_000)]
        for start in range(0, len(recipients), 500):
            guard.hit_many("p", [{"r": name} for name in recipients[start : start + 500]])
        guard.close()
        records = _used(server) - empty
        assert records > 500_000
        server.client.config_set("maxmemory", _used(server) - records // 10)
        yield server, recipients, records
    finally:
        server.stop()


def test_out_of_memory_refuses_hits_but_not_peek_refund_or_reset(
    full_server: tuple[RedisServer, list[str], int],
) -> None:
    """Redis refuses a function that may write when used memory is past maxmemory, unless it
    is registered allow-oom: calls that never grow state go to such a variant of the function,
    so a full server can still be read, refunded and emptied through freqguard."""
    server, recipients, records = full_server
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
    assert _used(server) < before - records // 3  # the resets freed memory
    assert guard.hit("p", r="newcomer").allowed  # under the limit again: hits work
    assert guard.peek("p", r="newcomer").remaining == 4
    guard.close()


def test_the_nogrow_function_refuses_a_call_that_grows(redis_server: RedisServer) -> None:
    """Whoever calls it: only hits of cost 0 may run where memory is short, and no per-key
    limit may be set there (one may be cleared)."""
    flush([redis_server])
    guard = Guard(RedisBackend(Redis(port=redis_server.port)), [P])
    guard.peek("p", r="x")  # loads the library
    client = redis_server.client
    # a sliding log keeping a minute and 5, one rule (tag 7): 5 per minute
    specs = "1 2 0 1 60000000 5 5 60000000 0 0 7 0 0"
    with pytest.raises(rex.ResponseError, match="a call that grows cannot run"):
        client.fcall(FUNCTION_NOGROW, 1, "k", "", 1, HIT, specs, "ab")
    change = "1 7 7 0 0 9 60000000 9 0"  # keeping tag 7's: set tag 7 to 9 per minute
    with pytest.raises(rex.ResponseError, match="a call that grows cannot run"):
        client.fcall(FUNCTION_NOGROW, 1, "k", "", 1, LIMIT, specs, "ab", change)
    client.fcall(FUNCTION_NOGROW, 1, "k", "", 0, LIMIT, specs, "ab", "1 7 7")  # a clear
    client.fcall(FUNCTION_NOGROW, 1, "k", "", 0, HIT, specs, "ab")  # cost 0: a check
    client.fcall(FUNCTION_NOGROW, 1, "k", "", 1, CHECK, specs, "ab")
    assert len(state_keys(client)) == 0
    client.fcall(FUNCTION, 1, "k", "", 1, HIT, specs, "ab")
    assert len(state_keys(client)) == 1
    rid = b"12345678"  # the binned variants: ARGV[1] is the record's id in the bin, then
    record = rid + (2).to_bytes(4, "big")  # the client's bins setting
    with pytest.raises(rex.ResponseError, match="a call that grows cannot run"):
        client.fcall(FUNCTION_BIN_NOGROW, 1, "b", record, "", 1, HIT, specs, "ab")
    client.fcall(FUNCTION_BIN_NOGROW, 1, "b", record, "", 1, CHECK, specs, "ab")
    assert len(state_keys(client)) == 1
    with pytest.raises(rex.ResponseError, match="unclaimed bin"):  # no setting: none written
        client.fcall(FUNCTION_BIN, 1, "b", record, "", 1, HIT, specs, "ab")
    claim = bytes(8) + (2).to_bytes(4, "big")  # a claim of the bin for bins=2
    assert client.fcall(FUNCTION_BIN, 1, "b", claim, "", 1, CLAIM, "") == 2
    with pytest.raises(rex.ResponseError, match="bins=2 in b, and this client has bins=3"):
        client.fcall(FUNCTION_BIN, 1, "b", rid + (3).to_bytes(4, "big"), "", 1, HIT, specs, "ab")
    client.fcall(FUNCTION_BIN, 1, "b", record, "", 1, HIT, specs, "ab")
    assert sorted(client.hkeys("b")) == [b"", rid]  # the bin's meta field, the record
    guard.close()


# -- a maxmemory-policy that evicts ------------------------------------------------------------


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "freqguard" and r.levelno == logging.WARNING
    ]


@pytest.fixture(scope="module")
def evicting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server that evicts keys with a TTL when full: every freqguard record has one."""
    server = RedisServer(tmp_path_factory.mktemp("evicting"), "--maxmemory-policy", "volatile-lru")
    yield server
    server.stop()


def test_an_evicting_server_is_warned_of_once_per_backend(
    evicting: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="freqguard")
    guard = Guard(backend_from_url(evicting.url), [P])
    for _ in range(3):
        assert guard.hit("p", r="a").allowed
    guard.hit_many("p", [{"r": f"r{n}"} for n in range(5)])
    guard.close()
    (message,) = _warnings(caplog)
    assert f"127.0.0.1:{evicting.port}" in message
    assert "maxmemory-policy volatile-lru" in message
    assert "Set maxmemory-policy noeviction" in message

    async def main() -> None:
        aguard = AsyncGuard(async_backend_from_url(evicting.url), [P])
        await asyncio.gather(*(aguard.hit("p", r=f"t{n}") for n in range(10)))
        await aguard.aclose()

    asyncio.run(main())
    assert len(_warnings(caplog)) == 2  # one more: the async backend's


def test_threads_that_come_first_together_warn_once(
    evicting: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="freqguard")
    guard = Guard(backend_from_url(evicting.url), [P])
    barrier = threading.Barrier(8)

    def first_call(n: int) -> None:
        barrier.wait()
        guard.peek("p", r=f"t{n}")

    threads = [threading.Thread(target=first_call, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    guard.close()
    assert len(_warnings(caplog)) == 1


def test_noeviction_is_not_warned_of(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    flush([redis_server])
    caplog.set_level(logging.WARNING, logger="freqguard")
    guard = Guard(backend_from_url(redis_server.url), [P])
    assert guard.hit("p", r="a").allowed
    guard.close()
    assert _warnings(caplog) == []


def test_an_evicting_cluster_node_is_named(
    redis_cluster: list[RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    flush(redis_cluster)
    caplog.set_level(logging.WARNING, logger="freqguard")
    node = redis_cluster[2]
    node.client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        guard = Guard(backend_from_url(f"redis+cluster://127.0.0.1:{redis_cluster[0].port}"), [P])
        guard.hit_many("p", [{"r": f"r{n}"} for n in range(20)])
        guard.close()
    finally:
        node.client.config_set("maxmemory-policy", "noeviction")
    (message,) = _warnings(caplog)
    assert f"127.0.0.1:{node.port}" in message
    assert "allkeys-lru" in message
    assert f"127.0.0.1:{redis_cluster[0].port}" not in message


@pytest.fixture
def config_refused(evicting: RedisServer) -> Iterator[str]:
    """A user of the evicting server who may not run CONFIG (as on many managed services)."""
    evicting.client.acl_setuser(
        "noconfig", enabled=True, nopass=True, keys=["*"], commands=["+@all", "-config"]
    )
    yield f"redis://noconfig@127.0.0.1:{evicting.port}"
    evicting.client.acl_deluser("noconfig")


def test_a_server_that_refuses_config_is_not_warned_of_and_works(
    config_refused: str, tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="freqguard")
    renamed = RedisServer(
        tmp_path_factory.mktemp("noconfig"),
        "--maxmemory-policy",
        "volatile-lru",
        "--rename-command",
        "CONFIG",
        "",
    )
    try:
        for url in (config_refused, renamed.url):
            guard = Guard(backend_from_url(url), [P])
            assert guard.hit("p", r="someone").allowed
            guard.close()

            async def main(url: str = url) -> None:
                aguard = AsyncGuard(async_backend_from_url(url), [P])
                assert (await aguard.peek("p", r="someone")).remaining == 4
                await aguard.aclose()

            asyncio.run(main())
    finally:
        renamed.stop()
    assert _warnings(caplog) == []
