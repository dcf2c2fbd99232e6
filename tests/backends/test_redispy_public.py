"""The Redis edge's two ways into redis-py (``freqguard/backends/_redispy.py``): its own state
where the release keeps it, and the public fallback a release without it would get. The
quick tests hold each fallback to the private answer on real servers; the slow one runs the
Redis edge's behaviour tests with every fallback (``FREQGUARD_REDISPY_PUBLIC=1``)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from freqguard.backends import _redispy
from tests.servers import RedisServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=[True, False], ids=["private", "public"])
def private(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(_redispy, "PRIVATE", request.param)
    return bool(request.param)


def test_both_ways_name_the_same_owner_of_every_key(
    redis_cluster: list[RedisServer], private: bool
) -> None:
    client = RedisCluster(host="127.0.0.1", port=redis_cluster[0].port)
    try:
        node_of = _redispy.node_of_key(client)
        keys = [f"fg:{{r{n}}}:p".encode() for n in range(200)]
        owners = [client.get_node_from_key(k).name for k in keys]  # type: ignore[no-untyped-call]
        assert [node_of(k).name for k in keys] == owners
    finally:
        client.close()


def test_both_ways_find_an_idle_connection_the_server_closed(
    redis_server: RedisServer, private: bool
) -> None:
    async def main() -> tuple[bool, bool]:
        client = AsyncRedis(port=redis_server.port)
        connection = await _redispy.aget_connection(client.connection_pool)
        await connection.connect()
        before = await _redispy.aserver_closed(connection)
        redis_server.client.client_kill_filter(_type="normal", skipme=True)
        after = False
        for _ in range(200):  # bounded polling: the kill's FIN reaches the socket
            after = await _redispy.aserver_closed(connection)
            if after:
                break
            await asyncio.sleep(0.005)
        await client.connection_pool.release(connection)
        await client.aclose()
        return before, after

    assert asyncio.run(main()) == (False, True)


def test_both_ways_give_the_nodes_connections_of_an_async_cluster(
    redis_cluster: list[RedisServer], private: bool
) -> None:
    async def main() -> None:
        client = AsyncRedisCluster(host="127.0.0.1", port=redis_cluster[0].port)
        await client.initialize()
        node = client.get_node_from_key("fg:{a}:p")
        assert node is not None
        pool = _redispy.async_node_pool(client, node)
        assert _redispy.async_node_pool(client, node) is pool  # one a node and client
        connection = await pool.get_connection()
        await connection.send_command("PING")
        assert await connection.read_response() in (b"PONG", "PONG")
        await pool.release(connection)
        await _redispy.aclose_client(client)

    asyncio.run(main())


def test_a_single_connection_client_is_told_apart(redis_server: RedisServer) -> None:
    one = Redis(port=redis_server.port, single_connection_client=True)
    assert _redispy.single_connection(one)
    assert not _redispy.single_connection(Redis(port=redis_server.port))
    assert _redispy.single_connection(
        AsyncRedis(port=redis_server.port, single_connection_client=True)
    )
    one.close()


#: The Redis edge's behaviour tests, run with every public fallback. Left out: the fault
#: drills (they time redis-py's own reconnections) and a slot served again after a hole,
#: which a client without its state learns only from its own next error (design note 73).
PUBLIC_RUN = [
    "tests/backends/test_redis.py",
    "tests/backends/test_redis_async.py",
    "tests/backends/test_redis_cluster_changes.py",
    "tests/backends/test_redis_direct.py",
    "tests/backends/test_redis_lanes.py",
    "tests/backends/test_redis_limits.py",
    "tests/backends/test_bins.py",
    "tests/backends/test_bin_lifetimes.py",
    "tests/backends/test_bin_options.py",
    "tests/backends/test_bin_settings.py",
    "tests/backends/test_cluster_edges.py",
    "tests/backends/test_cluster_new_node.py",
    "tests/backends/test_redis_cluster_errors.py",
    "tests/backends/test_redis_durability.py",
    "tests/backends/test_redis_flush_race.py",
    "tests/backends/test_short_states.py",
    "tests/conformance/test_differential.py",
    "tests/conformance/test_differential_clock.py",
    "tests/conformance/test_differential_messaging.py",
    "tests/conformance/test_differential_windows.py",
    "tests/operations/test_limits.py",
]


@pytest.mark.slow  # a few minutes: the Redis edge's tests again
def test_the_redis_edge_behaves_alike_on_every_public_fallback() -> None:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow"]
    command += ["-k", "not slot_served_again", *PUBLIC_RUN]
    env = {**os.environ, "FREQGUARD_REDISPY_PUBLIC": "1"}
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
