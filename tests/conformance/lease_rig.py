"""What the tests of leases share (``test_lease_exits.py``, ``test_lease_deploys.py``,
``test_lease_cancellations.py``, and ``test_lease_model.py``, ``test_lease_interrupts.py``,
``test_differential_windows.py``): a policy of a lease and a rate, and every store, sync (a
fixture, each test on empty stores) and async (opened on empty servers, closed at the
end): memory, Redis, Redis with records in bins, Redis without Functions (EVAL scripts)
and a Redis Cluster."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from freqguard import MemoryBackend, Policy, Rule
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import AsyncRedisBackend
from tests.conftest import flush, flush_scripts, store_named
from tests.servers import RedisServer

LLM = Policy("llm", Rule("2 concurrent", by="user", lease=60), Rule("100/minute", by="user"))


EVERY_STORE = ("memory", "redis", "binned", "scripts", "cluster")


@pytest.fixture(params=EVERY_STORE)
def every_store(request: pytest.FixtureRequest) -> SyncBackend:
    """Every sync store, the one without Functions too, each test on empty stores."""
    return store_named(request)


def async_backend(request: pytest.FixtureRequest, name: str) -> Any:
    """An async store of ``name`` (one of :data:`EVERY_STORE`), on empty servers."""
    if name == "memory":
        return MemoryBackend()
    if name == "cluster":
        nodes: list[RedisServer] = request.getfixturevalue("redis_cluster")
        flush(nodes)
        client: Any = AsyncRedisCluster(host="127.0.0.1", port=nodes[0].port, socket_timeout=5)
        return AsyncRedisBackend(client)
    if name == "scripts":
        server: RedisServer = request.getfixturevalue("scripts_server")
        flush_scripts([server])
        return AsyncRedisBackend(AsyncRedis(port=server.port, socket_timeout=5))
    server = request.getfixturevalue("redis_server")
    flush([server])
    bins = 2 if name == "binned" else 0
    client = AsyncRedis(port=server.port, db=1 if bins else 0, socket_timeout=5)
    return AsyncRedisBackend(client, bins=bins)


@contextlib.asynccontextmanager
async def async_store(request: pytest.FixtureRequest, name: str) -> AsyncIterator[Any]:
    """:func:`async_backend`, closed at the end."""
    backend = async_backend(request, name)
    try:
        yield backend
    finally:
        await backend.aclose()
