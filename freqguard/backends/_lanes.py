"""Connections borrowed from redis-py's pools, for calls packed by the caller.

freqguard sends its FCALLs here rather than through redis-py's command API (see
``freqguard.backends.redis``). A :class:`Lane` keeps a few connections of one client's pool
for the threads that call through it; an :class:`AsyncLane` shares one connection among the
tasks of an event loop and batches what they send. Both read replies with the connection's
own parser and return error replies in place, so one bad reply never desynchronizes a
connection (``_async/wire.py``, and its generated sync copy).

The two lanes, and :func:`exchange_all` / :func:`aexchange_all`, are written by hand, not
generated from one source: a thread does its own I/O on a connection it holds for the call,
while a task hands its call to the lane's one driver task, which pipelines the calls of all
tasks on one connection; sending to several nodes at once is a send-all-then-read-all loop
for threads and ``asyncio.gather`` for tasks. Neither has a counterpart on the other side.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Sequence
from time import monotonic

from redis import Redis
from redis import exceptions as rex
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.connection import Connection as AsyncConnection
from redis.connection import Connection

from freqguard.backends._async import wire as async_wire
from freqguard.backends._async.wire import drive as adrive
from freqguard.backends._redispy import (
    NodePool,
    aget_connection,
    aserver_closed,
    connected,
    get_connection,
    pool_of,
)
from freqguard.backends._sync import wire
from freqguard.backends._sync.wire import drive
from freqguard.errors import ConfigError

__all__ = ["AsyncLane", "Lane", "adrive", "aexchange_all", "drive", "exchange_all"]


_CHECK_AFTER = 0.01  # seconds a kept connection may idle before it is checked for a close


def _drop_if_closed(connection: Connection) -> None:
    """Disconnect a kept connection the server closed meanwhile (restarted, or it timed the
    client out), so that the call reconnects instead of failing on it: what redis-py's own
    pool checkout does. A poll of the socket (``can_read``, which connects a dropped
    connection first), paid only after an idle moment (a busy lane never pays it)."""
    try:
        if connection.can_read(timeout=0):
            connection.disconnect()  # type: ignore[no-untyped-call]  # stray data or EOF
    except rex.ConnectionError:
        connection.disconnect()  # type: ignore[no-untyped-call]


def _reconnected(connection: Connection) -> Connection:
    """A connection redis-py dropped after a failure, connected again the way its pool would,
    by ``connect()``: a Sentinel-managed connection
    overrides it to ask the sentinels where the master is now, whereas sending on a dropped
    connection reconnects to the address it had (the old master's, after a failover)."""
    if not connected(connection):  # a connected one's connect() is a no-op, not free
        connection.connect()  # type: ignore[no-untyped-call]
    return connection


class Lane:
    """Connections borrowed from one redis-py client's pool and kept between calls.

    redis-py's ``execute_command`` costs more on the client than everything else in a decision
    (a pool checkout that polls the socket, observability hooks, generic argument packing),
    so calls go to a connection directly: packed by the caller, sent, read with the
    connection's own parser, under the connection's ``Retry``. A connection that fails is
    disconnected by redis-py and reconnects on its next use. Safe across threads (``list.pop``
    and ``append`` are atomic) and across ``fork`` (a child forgets its parent's connections).
    """

    __slots__ = ("_closed", "_idle", "_pid", "_pool")

    def __init__(self, client: Redis) -> None:
        self._pool = pool_of(client)
        self._idle: list[tuple[Connection, float]] = []  # and when it was given back
        self._pid = os.getpid()
        self._closed = False

    def _give(self, connection: Connection) -> None:
        if self._closed:  # closed while this call was out: back to the pool
            self._pool.release(connection)
        else:
            self._idle.append((connection, monotonic()))

    def _take(self) -> Connection:
        if self._pid != os.getpid():
            self._idle, self._pid = [], os.getpid()
        try:
            connection, since = self._idle.pop()
        except IndexError:
            found: Connection = get_connection(self._pool)
            return found
        try:
            if monotonic() - since > _CHECK_AFTER:
                _drop_if_closed(connection)
            return _reconnected(connection)
        except BaseException:
            self._give(connection)
            raise

    def send(self, packed: bytes) -> Connection:
        """Send without waiting (no retry): the replies are :meth:`receive`'s to read."""
        connection = self._take()
        try:
            connection.send_packed_command((packed,))  # type: ignore[no-untyped-call]
        except BaseException:
            self._give(connection)  # redis-py disconnected it
            raise
        return connection

    def receive(self, connection: Connection, count: int) -> list[object]:
        """Read the replies to what :meth:`send` sent, and give the connection back."""
        try:
            return wire.read(connection, count)
        finally:
            self._give(connection)

    def abandon(self, connection: Connection) -> None:
        """Give back a connection whose replies will not be read."""
        connection.disconnect()  # type: ignore[no-untyped-call]
        self._give(connection)

    def _attempt(self, work: Callable[[Connection], list[object]]) -> list[object]:
        """``work`` on a connection, under that connection's ``Retry``."""
        connection = self._take()
        try:
            return connection.retry.call_with_retry(
                lambda: work(connection),
                lambda _: connection.disconnect(),  # type: ignore[no-untyped-call]
            )
        finally:
            self._give(connection)

    def exchange(self, packed: bytes, count: int) -> list[object]:
        """Send ``count`` packed calls at once and read their replies."""
        return self._attempt(lambda connection: wire.send_and_read(connection, packed, count))

    def stream(self, chunks: Callable[[], Iterable[bytes]], count: int) -> list[object]:
        """Send each chunk of packed calls as ``chunks()`` produces it, then read all
        ``count`` replies: the server works on one chunk while the next is produced."""

        def work(connection: Connection) -> list[object]:
            try:
                for chunk in chunks():
                    connection.send_packed_command((chunk,))  # type: ignore[no-untyped-call]
            except BaseException:  # some calls went out, their replies will not be read
                connection.disconnect()  # type: ignore[no-untyped-call]
                raise
            return wire.read(connection, count)

        return self._attempt(work)

    def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection, _ in idle:
            self._pool.release(connection)


_Waiter = tuple[bytes, int, "asyncio.Future[list[object]]"]


class AsyncLane:
    """One connection to one node, shared by every task of the event loop.

    Calls queue up; one driver task sends everything queued as one write, reads the replies
    in order, hands each caller its own, and goes again while calls arrived meanwhile. So
    concurrent tasks are pipelined without asking for it, and a lone call costs one write and
    one read. A failed batch fails its callers (under the connection's ``Retry`` first); the
    next batch reconnects. Connections belong to the loop that opened them: a lane used from
    another loop starts afresh.
    """

    __slots__ = ("_closed", "_connection", "_driver", "_loop", "_owner", "_pending")

    def __init__(self, owner: AsyncRedis | NodePool) -> None:
        self._owner = owner
        self._closed = False
        self._connection: AsyncConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[_Waiter] = []
        self._driver: asyncio.Task[None] | None = None

    async def exchange(self, packed: bytes, count: int) -> list[object]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._rebind(loop)
        future: asyncio.Future[list[object]] = loop.create_future()
        self._pending.append((packed, count, future))
        if self._driver is None:
            self._driver = driver = loop.create_task(self._drive())
            driver.add_done_callback(self._driven)
        return await future

    def _driven(self, driver: asyncio.Task[None]) -> None:
        """A driver done: one cancelled before its first step never ran its ``finally``
        (``asyncio.run`` cancels every task as its main returns), so its callers fail here
        and the next call gets a driver, where they waited for ever."""
        if self._driver is driver:
            self._driver = None
            pending, self._pending = self._pending, []
            for _, _, future in pending:
                if not future.done():
                    future.set_exception(rex.ConnectionError("freqguard: the call was cut off"))

    def _rebind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve ``loop`` from now on: afresh, its predecessor being gone (or idle). A loop
        still running elsewhere (another thread) owns the connection and the calls under
        way: refused, where it used to lose them (a hang until the timeout)."""
        old = self._loop
        if old is not None and old.is_running() and not old.is_closed():
            raise ConfigError(
                "an async Redis backend (and its AsyncGuard) serves one event loop at a time, "
                "and this one serves a loop running in another thread: make one backend per "
                "event loop (async_backend_from_url(...) in each), or share a sync Guard "
                "between threads"
            )
        self._loop, self._connection, self._pending, self._driver = loop, None, [], None

    async def stream(self, chunks: Callable[[], Iterable[bytes]], count: int) -> list[object]:
        """:meth:`Lane.stream`'s counterpart: the chunks go as one batch (the driver already
        pipelines it with the calls of other tasks)."""
        return await self.exchange(b"".join(chunks()), count)

    async def _connect(self) -> AsyncConnection:
        connection = self._connection
        if connection is None:
            owner = self._owner
            if isinstance(owner, NodePool):
                connection = await owner.get_connection()
            else:
                connection = await aget_connection(pool_of(owner))
            self._connection = connection
        elif not connection.is_connected:  # dropped after a failure: see _reconnected
            await connection.connect()  # type: ignore[no-untyped-call]
        elif await aserver_closed(connection):
            # the server closed it meanwhile (restarted): reconnect rather than fail on it
            await connection.disconnect()
            await connection.connect()  # type: ignore[no-untyped-call]
        return connection

    async def _round(self, batch: list[_Waiter]) -> list[object]:
        connection = await self._connect()
        packed = b"".join([waiter[0] for waiter in batch])
        count = sum(waiter[1] for waiter in batch)
        return await connection.retry.call_with_retry(
            lambda: async_wire.send_and_read(connection, packed, count),
            lambda _: connection.disconnect(),
        )

    async def _drive(self) -> None:
        batch: list[_Waiter] = []
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    replies = await self._round(batch)
                except Exception as exc:  # handed to the callers
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                at = 0
                for _, n, future in batch:
                    if not future.done():  # its caller may have been cancelled
                        future.set_result(replies[at : at + n])
                    at += n
                batch = []
                if not self._pending:
                    await asyncio.sleep(0)  # the callers just answered may have more to send
            if self._closed:  # closed while this driver ran: its connection goes back now
                await self._release()
        finally:
            self._driver = None
            for _, _, future in batch + self._pending:  # cancelled: nobody waits forever
                if not future.done():
                    future.set_exception(rex.ConnectionError("freqguard: the call was cut off"))
            self._pending = []

    async def aclose(self) -> None:
        """Give the connection back to its pool, at once if idle, else when the calls in
        flight are answered (never while a driver still reads from it)."""
        self._closed = True
        if self._driver is None:
            await self._release()

    async def _release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None or asyncio.get_running_loop() is not self._loop:
            return
        owner = self._owner
        if isinstance(owner, NodePool):
            await owner.release(connection)
        else:
            await pool_of(owner).release(connection)


Job = tuple[Lane, bytes, int]  # a lane, packed calls, how many replies they get
AsyncJob = tuple[AsyncLane, bytes, int]


def exchange_all(jobs: Sequence[Job]) -> list[list[object] | Exception]:
    """Each job's replies, every lane's calls sent before any reply is read, so the nodes
    work at once. A lane that fails gives its error in place of its replies."""
    if len(jobs) == 1:  # under the connection's Retry
        lane, packed, count = jobs[0]
        try:
            return [lane.exchange(packed, count)]
        except Exception as exc:
            return [exc]
    sent: list[Connection | Exception] = []
    for lane, packed, _ in jobs:
        try:
            sent.append(lane.send(packed))
        except Exception as exc:
            sent.append(exc)
    answers: list[list[object] | Exception] = []
    read = 0  # connections handed to receive, which gives them back whatever happens
    try:
        for (lane, _, count), connection in zip(jobs, sent, strict=True):
            read += 1
            if isinstance(connection, Exception):
                answers.append(connection)
                continue
            try:
                answers.append(lane.receive(connection, count))
            except Exception as exc:
                answers.append(exc)
    finally:  # cut short (KeyboardInterrupt): the unread connections are out of step
        for (lane, _, _), connection in list(zip(jobs, sent, strict=True))[read:]:
            if not isinstance(connection, Exception):
                lane.abandon(connection)
    return answers


async def aexchange_all(jobs: Sequence[AsyncJob]) -> list[list[object] | Exception]:
    """:func:`exchange_all`'s counterpart: every lane's calls at once, by ``asyncio.gather``."""
    if len(jobs) == 1:  # gather would wrap it in a task, a loop turn later
        lane, packed, count = jobs[0]
        try:
            return [await lane.exchange(packed, count)]
        except Exception as exc:
            return [exc]
    answers = await asyncio.gather(
        *[lane.exchange(packed, count) for lane, packed, count in jobs], return_exceptions=True
    )
    for answer in answers:  # cancelled: not an answer to hand on
        if isinstance(answer, BaseException) and not isinstance(answer, Exception):
            raise answer
    return answers  # type: ignore[return-value]
