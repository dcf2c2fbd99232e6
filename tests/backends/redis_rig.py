"""What several of the Redis edge's test modules share (``test_redis.py``,
``test_redis_direct.py``, ``test_redis_async.py``, ``test_redis_lanes.py``): a client of a
standalone server or cluster, a count of named connections, a server that never answers
(a fixture of the folder's ``conftest.py``), and event-loop turns for the async ones.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from redis import Redis
from redis.cluster import RedisCluster

from freqguard.backends._lanes import AsyncLane
from tests.servers import RedisServer


def _client(where: str, nodes: list[RedisServer]) -> Redis | RedisCluster:
    if where == "redis":
        return Redis(port=nodes[0].port)
    return RedisCluster(host="127.0.0.1", port=nodes[0].port)


def _connections_named(server: RedisServer, name: str) -> int:
    return sum(1 for c in server.client.client_list() if c["name"] == name)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts and never answers: the hang a timeout must cut short."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


async def _turns_until(condition: Callable[[], bool], limit: int = 1000) -> None:
    """Let the event loop run its other tasks, one turn at a time, until ``condition`` holds.
    No time passes and nothing is waited for but the loop itself."""
    loop = asyncio.get_running_loop()
    for _ in range(limit):
        if condition():
            return
        turn = loop.create_future()
        loop.call_soon(turn.set_result, None)
        await turn
    raise AssertionError(f"not reached in {limit} loop turns")


def _in_flight(lane: AsyncLane | None) -> bool:
    """Whether a lane's driver has taken every queued call and is sending or reading them."""
    return lane is not None and lane._driver is not None and not lane._pending
