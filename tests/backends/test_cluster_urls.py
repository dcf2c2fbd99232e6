"""A cluster URL of several nodes, as limits writes it (``redis+cluster://host:port,host:port``):
each node one the client may learn the cluster from, so a cluster whose first node is down
as the client is made is reached through the next. It was refused as a bad port
(``'7000,localhost:7001'``), an error that named neither the form nor the fix."""

from __future__ import annotations

import asyncio

import pytest

from freqguard import (
    AsyncGuard,
    ConfigError,
    Guard,
    Policy,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from freqguard.backends.urls import parse_url
from tests.conftest import flush
from tests.servers import RedisServer, free_port

POLICIES = [Policy("p", Rule("2/minute", by="r"))]


def test_the_nodes_after_the_first_are_startup_nodes() -> None:
    target = parse_url("redis+cluster://u:pw@localhost:7000,10.0.0.2:7001,[::1]:7002/0?bins=4")
    assert target.kind == "cluster"
    assert target.url == "redis://u:pw@localhost:7000/0"
    assert target.nodes == (("10.0.0.2", 7001), ("::1", 7002))
    assert target.backend == {"bins": 4}
    assert parse_url("rediss+cluster://a:1,b").nodes == (("b", 6379),)  # Redis's own port
    assert parse_url("redis+cluster://localhost:7000").nodes == ()


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis+cluster://a:1,b:99999", "port must be an integer >= 1 and <= 65535"),
        ("redis+cluster://a:1,,b:2", "a cluster node's address must be host:port"),
        ("redis+cluster://a:1,b:x", "port must be an integer"),
        ("redis://a:1,b:2", "several nodes are a cluster's: redis\\+cluster://"),
    ],
)
def test_a_bad_node_is_named(url: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        parse_url(url)


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_cluster_whose_first_node_is_down_is_reached_through_the_next(
    redis_cluster: list[RedisServer], side: str
) -> None:
    flush(redis_cluster)
    url = f"redis+cluster://127.0.0.1:{free_port()},127.0.0.1:{redis_cluster[0].port}"
    if side == "sync":
        guard = Guard(backend_from_url(url), POLICIES)
        try:
            said = [guard.hit("p", r=r).allowed for r in ("a", "a", "a", "b")]
        finally:
            guard.close()
    else:

        async def main() -> list[bool]:
            aguard = AsyncGuard(async_backend_from_url(url), POLICIES)
            try:
                return [(await aguard.hit("p", r=r)).allowed for r in ("a", "a", "a", "b")]
            finally:
                await aguard.aclose()

        said = asyncio.run(main())
    assert said == [True, True, False, True]
