"""An async lane and its driver on a real server: a lane closed mid-flight, a driver
cancelled before it ran, while its calls are out or past its grace, and calls to finish
sent as ``asyncio.run`` ends."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions as rex
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from freqguard.backends import _lanes
from freqguard.backends._lanes import AsyncLane
from freqguard.backends.base import FINISHING
from tests.backends.redis_rig import _in_flight, _turns_until
from tests.conftest import run_and_shut_down
from tests.servers import RedisServer, standalone

PING = b"*1\r\n$4\r\nPING\r\n"
INCR = b"*2\r\n$4\r\nINCR\r\n$7\r\ncounted\r\n"


def _blpop(seconds: str) -> bytes:
    """``BLPOP empty <seconds>``: answered (nil) once the server waited that long."""
    return b"*3\r\n$5\r\nBLPOP\r\n$5\r\nempty\r\n$%d\r\n%s\r\n" % (
        len(seconds),
        seconds.encode(),
    )


def _awaits(task: asyncio.Task[Any] | None, name: str) -> bool:
    """Whether ``task`` is suspended in a coroutine called ``name``, at any depth."""
    awaited = None if task is None else task.get_coro()
    while awaited is not None:
        if getattr(awaited, "__name__", None) == name:
            return True
        awaited = getattr(awaited, "cr_await", None)
    return False


def test_an_async_lane_closed_mid_flight_keeps_its_connection_until_answered(
    redis_server: RedisServer,
) -> None:
    """A reroute closes every lane, possibly while a driver still reads: the connection must
    not go back to the pool (and to another caller) before its replies are read."""

    async def main() -> None:
        client = AsyncRedis(port=redis_server.port)
        lane = AsyncLane(client)
        # a script that keeps the server busy, so the replies are still to come
        busy = "local i = 0 while i < 3000000 do i = i + 1 end return 'done'"
        slow = b"*3\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n0\r\n" % (len(busy), busy.encode())
        echo = [b"*2\r\n$4\r\nECHO\r\n$%d\r\n%d\r\n" % (len(str(n)), n) for n in range(200)]
        assert await lane.exchange(echo[0], 1) == [b"0"]  # the lane holds its connection
        await _turns_until(lambda: lane._driver is None)  # and that call's driver is done
        calls = [asyncio.ensure_future(lane.exchange(p, 1)) for p in [slow, *echo]]
        await _turns_until(lambda: _in_flight(lane))  # the calls are out, replies to come
        await lane.aclose()
        # the pool hands out its idle connections: none may be the lane's, still reading
        others = [asyncio.ensure_future(client.echo(f"other{n}")) for n in range(20)]
        replies = await asyncio.gather(*calls)
        assert [r[0] for r in replies] == [b"done"] + [str(n).encode() for n in range(200)]
        assert await asyncio.gather(*others) == [f"other{n}".encode() for n in range(20)]
        await client.aclose()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_an_async_lane_whose_driver_was_cancelled_before_it_ran_sends_its_calls(
    redis_server: RedisServer,
) -> None:
    """``asyncio.run`` cancels every task when its main returns, a lane's driver among them:
    one cancelled before its first step never ran its ``finally``, so the lane kept it as
    its driver, its callers waited forever and every later call queued behind it (review:
    ``asyncio.run`` hung at shutdown). Then its callers failed ("cut off"), though nothing
    was sent: a lease's release among them, its lease held until it lapsed. Its calls go to
    the next driver, and so do later ones."""

    async def main() -> None:
        client = AsyncRedis(port=redis_server.port)
        lane = AsyncLane(client)
        first = asyncio.ensure_future(lane.exchange(PING, 1))
        await asyncio.sleep(0)  # the call is queued, its driver made and not yet run
        assert lane._driver is not None
        lane._driver.cancel()
        assert await first == [b"PONG"]
        assert await lane.exchange(PING, 1) == [b"PONG"]
        await lane.aclose()
        await client.aclose()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_an_async_lanes_driver_cancelled_while_its_calls_are_out_reads_their_replies_first(
    redis_server: RedisServer,
) -> None:
    """A driver cancelled once it has sent its round reads the replies before it stops, so
    that each caller learns what its call did; calls queued meanwhile go to the next
    driver. The first call blocks in the server for 50 ms (``BLPOP`` on an empty list),
    so the cancellation surely comes while the round is out."""

    async def main() -> None:
        client = AsyncRedis(port=redis_server.port)
        lane = AsyncLane(client)
        assert await lane.exchange(PING, 1) == [b"PONG"]  # connected: no handshake to read
        out = asyncio.ensure_future(lane.exchange(_blpop("0.05"), 1))
        await _turns_until(lambda: _awaits(lane._driver, "read_response"))  # the round is out
        driver = lane._driver
        assert driver is not None
        driver.cancel()
        later = asyncio.ensure_future(lane.exchange(PING, 1))
        assert await out == [None]  # BLPOP's answer once it timed out in the server
        assert await later == [b"PONG"]
        assert driver.cancelled()
        await lane.aclose()
        await client.aclose()

    asyncio.run(asyncio.wait_for(main(), 10))


@pytest.mark.slow  # the server answers after 2.5 s
def test_a_cancelled_driver_whose_round_outlasts_its_grace_never_sends_it_again(
    redis_server: RedisServer,
) -> None:
    """A round (an INCR, then a BLPOP answered after 2.5 s) is out when the driver is
    cancelled; its grace (1 s) runs out. Its "cut off" was raised inside the connection's
    ``Retry``, which sent the round again, ten times (review: INCR ran 11 times, the
    cancelled driver took 14 s and ended as if not cancelled). Now the caller learns "cut
    off" once, the INCR ran once, and the driver ends cancelled."""
    sync = Redis(port=redis_server.port)
    sync.delete("counted", "empty")

    async def main() -> asyncio.Task[None]:
        client = AsyncRedis(port=redis_server.port, socket_timeout=5)
        lane = AsyncLane(client)
        assert await lane.exchange(PING, 1) == [b"PONG"]  # connected
        out = asyncio.ensure_future(lane.exchange(INCR + _blpop("2.5"), 2))
        await _turns_until(lambda: _awaits(lane._driver, "read_response"))
        driver = lane._driver
        assert driver is not None
        driver.cancel()
        with pytest.raises(rex.ConnectionError, match="cut off"):
            await out
        await asyncio.wait((driver,))
        await client.aclose()
        return driver

    driver = asyncio.run(asyncio.wait_for(main(), 60))
    assert int(sync.get("counted") or 0) == 1
    sync.delete("counted")
    assert driver.cancelled()


def _incr(key: str) -> bytes:
    return b"*2\r\n$4\r\nINCR\r\n$%d\r\n%s\r\n" % (len(key), key.encode())


def test_a_batch_to_finish_over_two_lanes_is_sent_when_asyncio_run_ends_at_once(
    redis_server: RedisServer,
) -> None:
    """A call to finish (``FINISHING``: a lease's, a batch's) over two lanes, made as
    ``asyncio.run``'s main returns: the tasks ``asyncio.gather`` made for the lanes were
    cancelled before they ran, nothing was queued, and the caller got a cancellation
    (review: a release over two nodes lost). The lanes' calls are queued without a task."""
    sync = Redis(port=redis_server.port)
    sync.delete("a", "b")

    client = AsyncRedis(port=redis_server.port, socket_timeout=5)

    async def main() -> None:
        one, two = AsyncLane(client), AsyncLane(client)
        assert await one.exchange(PING, 1) == [b"PONG"]
        assert await two.exchange(PING, 1) == [b"PONG"]

        async def caller() -> None:
            FINISHING.set(True)  # as the guard sets it for a release
            await _lanes.aexchange_all([(one, _incr("a"), 1), (two, _incr("b"), 1)])

        asyncio.get_running_loop().create_task(caller())  # main returns at once

    run_and_shut_down(main(), client.aclose)
    assert [int(sync.get(key) or 0) for key in ("a", "b")] == [1, 1]
    sync.delete("a", "b")


@pytest.mark.slow  # a server stalled for seconds
# the connection cut off on a stopped server may still be closing when its loop ends
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("timeout", [None, 1.0])
def test_a_driver_made_for_a_cancelled_ones_calls_sends_them_once_within_its_grace(
    tmp_path: Path, timeout: float | None
) -> None:
    """``asyncio.run`` cancels a lane's driver before its first step, a call to finish
    queued: a new driver sends it, which ``asyncio.run`` waits for and never cancels. On a
    stalled server it waited for ever (no ``socket_timeout``, redis-py's default before
    8), or timed out and the connection's ``Retry`` wrote the call again (review: the
    INCR ran twice). It has the cancelled driver's grace (1 s), and sends once."""
    with standalone(tmp_path) as server:
        pid = server.process.pid
        client = AsyncRedis(port=server.port, socket_timeout=timeout)

        async def main() -> None:
            lane = AsyncLane(client)
            assert await lane.exchange(PING, 1) == [b"PONG"]  # connected
            os.kill(pid, signal.SIGSTOP)

            async def caller() -> None:
                FINISHING.set(True)
                await lane.exchange(_incr("counted"), 1)

            asyncio.get_running_loop().create_task(caller())

        done = threading.Event()

        def run() -> None:
            run_and_shut_down(main(), client.aclose)
            done.set()

        thread = threading.Thread(target=run, daemon=True)
        try:
            thread.start()
            returned = done.wait(10)  # a real stalled server: bounded
        finally:
            os.kill(pid, signal.SIGCONT)
        thread.join(10)
        assert returned
        assert int(server.client.get("counted") or 0) <= 1
