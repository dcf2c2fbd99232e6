"""A client made with ``single_connection_client=True`` under redis-py's default ``Retry``
(redis-py 8 retries a command 10 times): its calls go through the client's own
``execute_command`` (``_command``), not a lane, so a hit whose reply timed out after the
server took it was sent again by that ``Retry`` and counted twice (the last review). Such
a client is refused when the backend is made, naming the fix; one made without retries
counts the hit once, as a pooled client's lanes do (a lane sends a call once: design
note 90).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Iterator
from contextlib import suppress

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from freqguard import AsyncGuard, BackendUnavailable, ConfigError, Guard, Policy, Rule
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from tests import servers
from tests.conftest import flush
from tests.faults import halted, loopback, pause, resume, tcp_rows
from tests.servers import RedisServer

pytestmark = pytest.mark.slow  # a fault drill: the server stopped

CAP = 5
P = Policy("p", Rule(f"{CAP}/day", by="r", name="daily"))
TIMEOUT = 0.3  # the client's socket timeout: the first try gives up after it
NAME = "single"
CLOSE_WAIT = "08"  # /proc/net/tcp: the peer closed, this side (the stopped server) has not


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with servers.standalone(tmp_path_factory.mktemp("single-retry")) as started:
        yield started


def _peer_port(server: RedisServer) -> int:
    """The local port of the backend's connection (named ``NAME``), as the server sees it."""
    (entry,) = [c for c in server.client.client_list() if c["name"] == NAME]
    return int(entry["addr"].rsplit(":", 1)[1])


def _given_up(server: RedisServer, peer: int) -> bool:
    """Whether the client closed the connection its first try went on (its read timed
    out), while the stopped server still holds the call it sent there."""
    return any(
        row[1] == loopback(server.port) and row[2] == loopback(peer) and row[3] == CLOSE_WAIT
        for row in tcp_rows()
    )


def _resumer(server: RedisServer, peer: int, stop: threading.Event) -> threading.Thread:
    """A thread that resumes the server once the first try has timed out (or the test
    ends): the retry then reaches a server that runs both calls."""

    def run() -> None:
        try:
            servers.wait_for(
                lambda: stop.is_set() or (halted(server.process.pid) and _given_up(server, peer)),
                "the first try, given up",
            )
        finally:
            resume(server)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_client_of_one_connection_that_retries_is_refused_naming_the_fix(
    server: RedisServer,
) -> None:
    fix = r"retry=Retry\(NoBackoff\(\), 0\)"
    client = Redis(port=server.port, single_connection_client=True)  # the default Retry
    with pytest.raises(ConfigError, match=fix):
        RedisBackend(client)
    client.close()

    async def main() -> None:
        client = AsyncRedis(port=server.port, single_connection_client=True)
        with pytest.raises(ConfigError, match=fix):
            AsyncRedisBackend(client)
        await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("single", [True, False], ids=["single-connection", "pooled"])
def test_a_hit_that_timed_out_is_counted_once_on_a_sync_client(
    single: bool, server: RedisServer
) -> None:
    flush([server])
    default = inspect.signature(Redis).parameters["retry"].default  # redis-py's own
    client = Redis(
        port=server.port,
        socket_timeout=TIMEOUT,
        single_connection_client=single,
        client_name=NAME,
        retry=Retry(NoBackoff(), 0) if single else default,  # one that retries: refused
    )
    guard = Guard(RedisBackend(client), [P])
    try:
        assert guard.hit("p", r="a").remaining == CAP - 1  # connected, the library loaded
        peer = _peer_port(server)
        stop = threading.Event()
        pause(server)
        thread = _resumer(server, peer, stop)
        try:
            with suppress(BackendUnavailable):  # answered by the retry, or failed: fair
                guard.hit("p", r="a")
        finally:
            stop.set()
            thread.join()
        # one hit before, one now: the server ran the timed-out call, it must not run twice
        assert guard.peek("p", r="a").remaining == CAP - 2
    finally:
        resume(server)
        guard.close()


@pytest.mark.parametrize("single", [True, False], ids=["single-connection", "pooled"])
def test_a_hit_that_timed_out_is_counted_once_on_an_async_client(
    single: bool, server: RedisServer
) -> None:
    flush([server])

    async def main() -> None:
        default = inspect.signature(AsyncRedis).parameters["retry"].default
        client = AsyncRedis(
            port=server.port,
            socket_timeout=TIMEOUT,
            single_connection_client=single,
            client_name=NAME,
            retry=AsyncRetry(NoBackoff(), 0) if single else default,
        )
        guard = AsyncGuard(AsyncRedisBackend(client), [P])
        try:
            assert (await guard.hit("p", r="a")).remaining == CAP - 1
            peer = _peer_port(server)
            stop = threading.Event()
            pause(server)
            thread = _resumer(server, peer, stop)
            try:
                with suppress(BackendUnavailable):
                    await guard.hit("p", r="a")
            finally:
                stop.set()
                await asyncio.to_thread(thread.join)
            assert (await guard.peek("p", r="a")).remaining == CAP - 2
        finally:
            resume(server)
            await guard.aclose()

    asyncio.run(main())
