"""The lane of an event loop: one connection to one node, shared by the loop's tasks
(``_lanes.py`` has the threads' :class:`~freqguard.backends._lanes.Lane`, and says why the
two are written by hand)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

from redis import exceptions as rex
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.connection import Connection as AsyncConnection

from freqguard.backends._redispy import NodePool, aget_connection, aserver_closed, pool_of
from freqguard.backends.base import answered
from freqguard.errors import ConfigError

__all__ = ["AsyncJob", "AsyncLane", "aexchange_all"]

T = TypeVar("T")


def _cut_off() -> rex.ConnectionError:
    """The failure of a round a cancelled driver gave up on (its grace over, or the
    connection failed): it may have been written."""
    return rex.ConnectionError("freqguard: the call was cut off")


def _after(seconds: float) -> float:
    """The event loop's time ``seconds`` from now."""
    return asyncio.get_running_loop().time() + seconds


_FINISH_WITHIN = 1.0  # seconds a cancelled driver still reads the replies to what it sent
_UNPAUSED = 65_536  # bytes an asyncio transport takes without pausing its writer (high water)

_Waiter = tuple[bytes, int, "asyncio.Future[list[object]]"]


class AsyncLane:
    """One connection to one node, shared by every task of the event loop.

    Calls queue up; one driver task sends everything queued as one write, reads the replies
    in order, hands each caller its own, and goes again while calls arrived meanwhile. So
    concurrent tasks are pipelined without asking for it, and a lone call costs one write and
    one read. A failed batch fails its callers (never sent again: it may have run); the next
    batch reconnects. Connections belong to the loop that opened them: a lane used from
    another loop starts afresh.
    """

    __slots__ = (
        "_closed",
        "_connection",
        "_driver",
        "_loop",
        "_owner",
        "_pending",
        "_sent",
        "_stop",
        "_until",
    )

    def __init__(self, owner: AsyncRedis | NodePool) -> None:
        self._owner = owner
        self._closed = False
        self._connection: AsyncConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[_Waiter] = []
        self._driver: asyncio.Task[None] | None = None
        self._sent = False  # whether the driver's batch may have gone out
        self._stop: asyncio.CancelledError | None = None  # the driver's, once its round is read
        self._until: float | None = None  # when a stopping driver's round is cut off

    async def exchange(self, packed: bytes, count: int) -> list[object]:
        future = self.submit(packed, count)
        return await answered(future)

    def submit(self, packed: bytes, count: int) -> asyncio.Future[list[object]]:
        """Queue ``count`` packed calls: the future of their replies (no task is made, so
        none can be cancelled before the calls are queued)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._rebind(loop)
        future: asyncio.Future[list[object]] = loop.create_future()
        self._pending.append((packed, count, future))
        if self._driver is None:
            self._drive_on(loop, resumed=False)
        return future

    def _drive_on(self, loop: asyncio.AbstractEventLoop, resumed: bool) -> None:
        """A driver for what is queued (see :meth:`_drive`), watched by :meth:`_driven`."""
        self._driver = driver = loop.create_task(self._drive(resumed))
        driver.add_done_callback(self._driven)

    def _driven(self, driver: asyncio.Task[None]) -> None:
        """A driver done: one cancelled before its first step never ran its ``finally``
        (``asyncio.run`` cancels every task as its main returns), so its calls, never sent,
        go to the next driver here, where they waited for ever."""
        if self._driver is driver:
            self._driver = None
            pending, self._pending = self._pending, []
            self._resume(pending)

    def _resume(self, waiters: list[_Waiter]) -> None:
        """Calls no driver sent, left by one cancelled (``asyncio.run`` cancels every task
        left at once, the callers and the driver): a new driver sends them, where they
        failed with it (a lease's release among them, the lease then held until it
        lapsed). Calls whose callers are gone are dropped."""
        waiting = [waiter for waiter in waiters if not waiter[2].done()]
        loop = self._loop
        if not waiting or loop is None or loop.is_closed():
            return
        self._pending = waiting + self._pending
        if self._driver is None:
            self._drive_on(loop, resumed=True)

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
        self._stop, self._until = None, None

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
        connection = await self._in_time(self._connect())
        packed = b"".join([waiter[0] for waiter in batch])
        count = sum(waiter[1] for waiter in batch)
        self._sent = True  # sent once: never under the connection's Retry (Lane._attempt)
        return await self._send_and_read(connection, packed, count)

    async def _send_and_read(
        self, connection: AsyncConnection, packed: bytes, count: int
    ) -> list[object]:
        """``wire.send_and_read``, through a first cancellation of the driver (kept in
        ``_stop``: the driver stops once the round is answered; a second one cuts the round
        off), so that the callers learn what their calls did, where they were cut off not
        knowing (a lease taken, never given back: ``asyncio.run`` cancels every task left
        at once, the driver among them).

        A send cancelled wrote nothing when it was at most :data:`_UNPAUSED` bytes (the
        transport takes those at once, so redis-py's writing never waits: a cancellation
        can only come before it), and is sent again. The replies are read through it
        (redis-py's parsers take up a reply where a cancellation left it). A round of a
        driver that is stopping (cancelled, or sending what a cancelled one left) has until
        ``_until``, and its failure says it was cut off (:func:`_cut_off`)."""
        while True:
            try:
                await self._in_time(connection.send_packed_command((packed,)))
                break
            except asyncio.CancelledError as exc:
                if self._stop is not None or len(packed) > _UNPAUSED:
                    raise
                self._stopping(exc)
            except Exception:
                if self._until is None:
                    raise
                raise _cut_off() from None
        replies: list[object] = []
        while len(replies) < count:
            reading = connection.read_response(disable_decoding=True, disconnect_on_error=False)
            try:
                replies.append(await self._in_time(reading))
            except rex.ResponseError as exc:
                replies.append(exc)
            except asyncio.CancelledError as exc:
                if self._stop is not None:
                    await connection.disconnect(nowait=True)
                    raise
                self._stopping(exc)
            except BaseException as exc:
                await connection.disconnect(nowait=True)
                if self._until is not None and isinstance(exc, Exception):
                    raise _cut_off() from None
                raise
        return replies

    def _stopping(self, cancelled: asyncio.CancelledError) -> None:
        """The driver cancelled: it stops once its round is answered, within
        :data:`_FINISH_WITHIN` seconds (or the deadline its round already had)."""
        self._stop = cancelled
        if self._until is None:
            self._until = _after(_FINISH_WITHIN)

    async def _in_time(self, step: Awaitable[T]) -> T:
        """``step`` awaited: by ``_until`` (the loop's time) when the driver is stopping."""
        if self._until is None:
            return await step
        left = self._until - asyncio.get_running_loop().time()
        return await asyncio.wait_for(step, max(left, 0.0))

    async def _drive(self, resumed: bool) -> None:
        """Send what is queued, round after round. A driver ``resumed`` (made for the calls
        a cancelled one left) sends them within :data:`_FINISH_WITHIN` seconds, as that one
        would have: ``asyncio.run`` waits for it, never cancelling it."""
        batch: list[_Waiter] = []
        try:
            while self._pending:
                batch, self._pending, self._sent = self._pending, [], False
                self._until = _after(_FINISH_WITHIN) if resumed else None
                resumed = False
                try:
                    replies = await self._round(batch)
                except Exception as exc:  # handed to the callers
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    if self._stop is not None:  # cancelled meanwhile: now stop
                        raise self._stop from None
                    continue
                at = 0
                for _, n, future in batch:
                    if not future.done():  # its caller may have been cancelled
                        future.set_result(replies[at : at + n])
                    at += n
                batch = []
                if self._stop is not None:  # cancelled while its calls were out: now stop
                    raise self._stop
                if not self._pending:
                    await asyncio.sleep(0)  # the callers just answered may have more to send
            if self._closed:  # closed while this driver ran: its connection goes back now
                await self._release()
        finally:
            self._driver, self._stop, self._until = None, None, None
            cut, unsent = (batch, self._pending) if self._sent else ([], batch + self._pending)
            self._pending = []
            for _, _, future in cut:  # gone out, its outcome unknown: nobody waits forever
                if not future.done():
                    future.set_exception(_cut_off())
            self._resume(unsent)

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


AsyncJob = tuple[AsyncLane, bytes, int]  # a lane, packed calls, how many replies they get


async def aexchange_all(jobs: Sequence[AsyncJob]) -> list[list[object] | Exception]:
    """:func:`exchange_all`'s counterpart: every lane's calls queued at once, their replies
    gathered."""
    if len(jobs) == 1:  # gather would wrap it in a task, a loop turn later
        lane, packed, count = jobs[0]
        try:
            return [await lane.exchange(packed, count)]
        except Exception as exc:
            return [exc]
    gathered = asyncio.gather(
        *[lane.submit(packed, count) for lane, packed, count in jobs], return_exceptions=True
    )
    answers = await answered(gathered)
    for answer in answers:  # cancelled: not an answer to hand on
        if isinstance(answer, BaseException) and not isinstance(answer, Exception):
            raise answer
    return answers  # type: ignore[return-value]
