"""Fixtures the conformance tests share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis
from redis.cluster import RedisCluster

from freqguard.backends.redis import RedisBackend
from tests.conftest import flush
from tests.servers import RedisServer


@pytest.fixture(params=["redis", "cluster"])
def unreplicated(request: pytest.FixtureRequest) -> Iterator[tuple[RedisBackend, RedisBackend]]:
    """A store that applies every write and never has it acknowledged: ``wait_replicas=1``
    on servers without replicas (``WAIT`` answers 0 after ``wait_timeout``); and a plain
    backend on the same servers, to read what is held."""
    client: Any
    plain: Any
    if request.param == "cluster":
        nodes: list[RedisServer] = request.getfixturevalue("redis_cluster")
        flush(nodes)
        client = RedisCluster(host="127.0.0.1", port=nodes[0].port, socket_timeout=5)
        plain = RedisCluster(host="127.0.0.1", port=nodes[0].port, socket_timeout=5)
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        flush([server])
        client, plain = Redis(port=server.port, socket_timeout=5), Redis(port=server.port)
    durable = RedisBackend(client, wait_replicas=1, wait_timeout=0.01)
    reader = RedisBackend(plain)
    yield durable, reader
    durable.close()
    reader.close()
