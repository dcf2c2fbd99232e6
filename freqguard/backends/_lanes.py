"""Connections borrowed from redis-py's pools, for calls packed by the caller.

freqguard sends its FCALLs here rather than through redis-py's command API (see
``freqguard.backends.redis``). A :class:`Lane` keeps a few connections of one client's pool
for the threads that call through it; an :class:`~freqguard.backends._async_lane.AsyncLane`
(``_async_lane.py``, imported from here) shares one connection among the tasks of an event
loop and batches what they send. Both read replies with the connection's own parser and
return error replies in place, so one bad reply never desynchronizes a connection
(``_async/wire.py``, and its generated sync copy).

The two lanes, and :func:`exchange_all` / :func:`aexchange_all`, are written by hand, not
generated from one source: a thread does its own I/O on a connection it holds for the call,
while a task hands its call to the lane's one driver task, which pipelines the calls of all
tasks on one connection; sending to several nodes at once is a send-all-then-read-all loop
for threads and ``asyncio.gather`` for tasks. Neither has a counterpart on the other side.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from time import monotonic

from redis import Redis
from redis import exceptions as rex
from redis.connection import Connection

from freqguard.backends._async.wire import drive as adrive
from freqguard.backends._async_lane import AsyncJob, AsyncLane, aexchange_all
from freqguard.backends._redispy import connected, get_connection, pool_of
from freqguard.backends._sync import wire
from freqguard.backends._sync.wire import drive

__all__ = [
    "AsyncJob",
    "AsyncLane",
    "Job",
    "Lane",
    "adrive",
    "aexchange_all",
    "drive",
    "exchange_all",
]


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


def _disconnect(connection: Connection) -> None:
    """Close a connection whose call failed: its replies may still come, and would be read
    as the next call's. redis-py closes its own on a failure, but for a Sentinel-managed
    connection, whose reads keep it open."""
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
    connection's own parser, never sent again once written. A connection whose call failed
    is closed (redis-py closes its own, but a Sentinel-managed one) and reconnects on its
    next use. Safe across threads (``list.pop`` and ``append`` are atomic) and across
    ``fork`` (a child forgets its parent's connections).
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
        except BaseException:
            _disconnect(connection)
            raise
        finally:
            self._give(connection)

    def abandon(self, connection: Connection) -> None:
        """Give back a connection whose replies will not be read."""
        _disconnect(connection)
        self._give(connection)

    def _attempt(self, work: Callable[[Connection], list[object]]) -> list[object]:
        """``work`` on a connection, once: never under the connection's ``Retry``, which
        would send calls again that may have run (their reply lost, not the call), and
        count them twice. A connection that cannot be made is tried again by redis-py's
        own ``connect``, under that ``Retry``: nothing was sent."""
        connection = self._take()
        try:
            return work(connection)
        except BaseException:
            _disconnect(connection)
            raise
        finally:
            self._give(connection)

    def exchange(self, packed: bytes, count: int) -> list[object]:
        """Send ``count`` packed calls at once and read their replies."""
        return self._attempt(lambda connection: wire.send_and_read(connection, packed, count))

    def stream(self, chunks: Callable[[], Iterable[bytes]], count: int) -> list[object]:
        """Send each chunk of packed calls as ``chunks()`` produces it, then read all
        ``count`` replies: the server works on one chunk while the next is produced."""

        def work(connection: Connection) -> list[object]:
            # a failure part way (some calls out, their replies never read): _attempt
            # closes the connection
            for chunk in chunks():
                connection.send_packed_command((chunk,))  # type: ignore[no-untyped-call]
            return wire.read(connection, count)

        return self._attempt(work)

    def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection, _ in idle:
            self._pool.release(connection)


Job = tuple[Lane, bytes, int]  # a lane, packed calls, how many replies they get


def exchange_all(jobs: Sequence[Job]) -> list[list[object] | Exception]:
    """Each job's replies, every lane's calls sent before any reply is read, so the nodes
    work at once. A lane that fails gives its error in place of its replies."""
    if len(jobs) == 1:  # on the lane's own connection, at once
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
