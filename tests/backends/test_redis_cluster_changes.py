"""A cluster that changes under the backend, on a cluster of the test's own: a node lost
under a batch, a slot resharded to another node (sync and async)."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.crc import key_slot

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    Guard,
    ManualClock,
    MemoryBackend,
)
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from tests.conftest import SMS
from tests.servers import RedisServer, cluster, cluster_settled


@pytest.mark.slow  # processes, and a cluster's slots moved or lost: seconds each
def test_a_lost_cluster_node_fails_its_calls_and_spares_the_others(
    tmp_path_factory: pytest.TempPathFactory, clock: ManualClock
) -> None:
    """A node that dies under a batch: the batch fails as BackendUnavailable (the live nodes
    did decide their calls), no connection is left out of step, and calls to the live
    nodes go on deciding correctly."""
    with cluster(tmp_path_factory.mktemp("lossy")) as nodes:
        client = RedisCluster(
            host="127.0.0.1", port=nodes[0].port, socket_timeout=1, socket_connect_timeout=1
        )
        guard = Guard(RedisBackend(client), [SMS], clock=clock)
        reference = Guard(MemoryBackend(), [SMS], clock=clock)
        recipients = [f"r{n}" for n in range(30)]
        owner = {
            r: client.nodes_manager.get_node_from_slot(key_slot(r.encode())).port
            for r in recipients
        }
        batch = [{"recipient": r, "content": "c"} for r in recipients]
        assert guard.hit_many("sms", batch) == reference.hit_many("sms", batch)
        # a node that hangs: its replies time out; the other nodes' replies are never read,
        # so their connections must not be reused as they are
        frozen = next(n for n in nodes if n.port == owner[recipients[0]])  # read first
        frozen.process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(BackendUnavailable, match="Timeout"):
                guard.hit_many("sms", batch)
        finally:
            frozen.process.send_signal(signal.SIGCONT)
        reference.hit_many("sms", batch)  # every node got its calls, and decides them
        assert guard.hit_many("sms", batch) == reference.hit_many("sms", batch)
        doomed = next(n for n in nodes if n is not frozen)
        doomed.stop()
        with pytest.raises(BackendUnavailable):
            guard.hit_many("sms", batch)
        alive = [c for c in batch if owner[c["recipient"]] != doomed.port]
        assert alive
        reference.hit_many("sms", alive)  # a batch is no transaction: the live nodes decided
        for _ in range(2):  # the same answers as memory: nothing half-read, nothing lost
            assert guard.hit_many("sms", alive) == reference.hit_many("sms", alive)
        guard.close()


def _admin(node: RedisServer, *args: object) -> Any:
    return node.client.execute_command(*args)  # type: ignore[no-untyped-call]


def _move_slot(nodes: list[RedisServer], slot: int) -> None:
    """Migrate one slot, keys and all, to another master, as a resharding would."""
    ids = {node.port: _admin(node, "CLUSTER", "MYID").decode() for node in nodes}
    source = next(n for n in nodes if _admin(n, "CLUSTER", "COUNTKEYSINSLOT", slot))
    target = next(n for n in nodes if n is not source)
    _admin(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source.port])
    _admin(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.port])
    keys = _admin(source, "CLUSTER", "GETKEYSINSLOT", slot, 1000)
    _admin(source, "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
    for node in (target, source, *[n for n in nodes if n not in (source, target)]):
        _admin(node, "CLUSTER", "SETSLOT", slot, "NODE", ids[target.port])
    # bounded polling until every node says so and the cluster is settled: a node's view
    # that lags (the cluster bus, on a loaded machine) would bounce the client's call back
    # and forth until redis-py gives up ("TTL exhausted"), which is not what is tested here
    deadline = time.monotonic() + 15
    while not (all(_owner(n, slot) == target.port for n in nodes) and cluster_settled(nodes)):
        if time.monotonic() > deadline:
            raise AssertionError(f"slot {slot} did not settle on {target.port} in 15 s")
        time.sleep(0.05)


def _owner(node: RedisServer, slot: int) -> int:
    """The port of the primary ``node`` says serves ``slot``."""
    for start, end, primary, *_ in _admin(node, "CLUSTER", "SLOTS"):
        if start <= slot <= end:
            return int(primary[1])
    return 0


def _moved_replies(nodes: list[RedisServer]) -> int:
    return sum(
        int(node.client.info("errorstats").get("errorstat_MOVED", {}).get("count", 0))
        for node in nodes
    )


@pytest.mark.slow  # processes, and a cluster's slots moved or lost: seconds each
def test_a_resharded_slot_is_followed_sync_and_async(
    tmp_path_factory: pytest.TempPathFactory, clock: ManualClock
) -> None:
    """After a slot moves, the node that lost it answers MOVED: the call is redone through
    the cluster client, which learns the new map, and the state moved with the slot."""
    with cluster(tmp_path_factory.mktemp("reshard")) as nodes:
        reference = Guard(MemoryBackend(), [SMS], clock=clock)
        batch = [{"recipient": f"r{n % 4}", "content": "c"} for n in range(6)]

        def expected(content: str) -> list[object]:
            return [
                reference.hit("sms", recipient="r0", content=content),
                reference.hit_many("sms", batch),
            ]

        sync = Guard(
            RedisBackend(RedisCluster(host="127.0.0.1", port=nodes[0].port)), [SMS], clock=clock
        )
        for _ in range(2):
            assert [
                sync.hit("sms", recipient="r0", content="s"),
                sync.hit_many("sms", batch),
            ] == expected("s")
            before = _moved_replies(nodes)
            _move_slot(nodes, key_slot(b"r0"))  # the backend still has the old map
            assert sync.hit("sms", recipient="r0", content="s") == reference.hit(
                "sms", recipient="r0", content="s"
            )
            assert _moved_replies(nodes) > before
        sync.close()

        async def run() -> None:
            client = AsyncRedisCluster(host="127.0.0.1", port=nodes[0].port)
            guard = AsyncGuard(AsyncRedisBackend(client), [SMS], clock=clock)
            for _ in range(2):
                assert [
                    await guard.hit("sms", recipient="r0", content="a"),
                    await guard.hit_many("sms", batch),
                ] == expected("a")
                before = _moved_replies(nodes)
                _move_slot(nodes, key_slot(b"r0"))
                assert await guard.hit_many("sms", batch) == reference.hit_many("sms", batch)
                assert _moved_replies(nodes) > before
            await guard.aclose()

        asyncio.run(run())
