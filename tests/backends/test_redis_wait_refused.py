"""``wait_replicas`` on a store that refuses WAIT to the user (an ACL without ``+wait``) is
a refusal, found before the first write: a :class:`~freqguard.ConfigError` naming the fix,
whatever ``on_error`` says, and nothing written. It was found only after each hit was
applied, as a failure of the store (``on_error`` answered it: failing open admitted, the
breaker opened, every later hit the same), for as long as the ACL stood; a WAIT refused
later (the ACL changed under a running backend) is still that (``test_cluster_edges``)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from freqguard import (
    AsyncGuard,
    ConfigError,
    Guard,
    Policy,
    RedisBackend,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from freqguard.backends._inspect import wait_refused
from tests.conftest import flush, store_nodes
from tests.servers import RedisServer

USER = "fg_no_wait"
QUERY = "wait_replicas=1&wait_timeout=0.1&socket_timeout=1"
POLICIES = [Policy("p", Rule("2/minute", by="r"), on_error="allow")]


@pytest.fixture(params=["redis", "cluster"])
def no_wait(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[RedisServer]]]:
    """The URL of a user whom every node allows all but WAIT, and the nodes."""
    scheme, nodes = store_nodes(request, request.param)
    for node in nodes:
        node.client.acl_setuser(
            USER, enabled=True, nopass=True, keys=["*"], commands=["+@all", "-wait"]
        )
    try:
        yield f"{scheme}://{USER}@127.0.0.1:{nodes[0].port}/0?{QUERY}", nodes
    finally:
        for node in nodes:
            node.client.acl_deluser(USER)


def _written(nodes: list[RedisServer]) -> int:
    return sum(node.client.dbsize() for node in nodes)


@pytest.mark.parametrize("side", ["sync", "async"])
def test_wait_refused_by_the_acl_is_a_config_error_before_any_write(
    no_wait: tuple[str, list[RedisServer]], side: str
) -> None:
    url, nodes = no_wait
    if side == "sync":
        guard = Guard(backend_from_url(url), POLICIES)
        try:
            for _ in range(2):  # not a one-off: said again, the breaker never opens on it
                with pytest.raises(ConfigError, match=r"\+wait.*wait_replicas=0"):
                    guard.hit("p", r="a")
        finally:
            guard.close()
    else:

        async def main() -> None:
            aguard = AsyncGuard(async_backend_from_url(url), POLICIES)
            try:
                for _ in range(2):
                    with pytest.raises(ConfigError, match=r"\+wait.*wait_replicas=0"):
                        await aguard.hit("p", r="a")
            finally:
                await aguard.aclose()

        asyncio.run(main())
    assert _written(nodes) == 0  # the hit never went: no record, no function loaded
    assert all(not node.client.function_list() for node in nodes)


def test_wait_refused_over_one_connection_is_the_same_refusal(redis_server: RedisServer) -> None:
    flush([redis_server])
    redis_server.client.acl_setuser(
        USER, enabled=True, nopass=True, keys=["*"], commands=["+@all", "-wait"]
    )
    client = redis.Redis(
        port=redis_server.port,
        username=USER,
        single_connection_client=True,
        retry=Retry(NoBackoff(), 0),
    )
    guard = Guard(RedisBackend(client, wait_replicas=1, wait_timeout=0.1), POLICIES)
    try:
        with pytest.raises(ConfigError, match=r"\+wait"):
            guard.hit("p", r="a")
        assert _written([redis_server]) == 0
    finally:
        guard.close()
        redis_server.client.acl_deluser(USER)


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (redis.exceptions.NoPermissionError("this user has no permissions"), r"\+wait"),
        (redis.exceptions.ResponseError("unknown command 'WAIT', with args"), "does not know"),
    ],
)
def test_a_store_that_cannot_wait_is_named_with_the_fix(
    reply: redis.exceptions.ResponseError, said: str
) -> None:
    found = wait_refused(reply, "127.0.0.1:1")
    assert isinstance(found, ConfigError)
    assert "wait_replicas=0" in str(found)
    assert found.argument is None  # no argument of a call: the service answers 503
    assert re.search(said, str(found))


def test_other_errors_of_wait_are_no_refusal() -> None:
    """An error of the moment (the server loading, out of memory) is the store's failure,
    answered as one; the check is made again at the next call."""
    assert wait_refused(redis.exceptions.ResponseError("LOADING Redis is loading"), "x") is None
