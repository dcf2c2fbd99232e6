"""What only asyncio has, for the async guard: a cancellation may come while calls are out.

Written by hand with its sync counterpart (``freqguard/_sync/_io.py``), the guard's only
hand-written pair: a thread is not cancelled part way, but its main thread is interrupted
(Ctrl-C), which the sync side holds back around what a lease does (``holding``), and
unwinds elsewhere as this side does a cancellation (both through ``engine.ops.unwinding``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar, cast

from freqguard.backends.base import FINISHING
from freqguard.clock import Clock
from freqguard.engine.ops import Interrupted, Op, turn_key, unwinding
from freqguard.script.calls import Reply, ScriptCall

__all__ = ["Cancelled", "Interrupt", "Turns", "holding", "send", "sleep", "unheld", "unwind"]

T = TypeVar("T")
_log = logging.getLogger("freqguard")

Cancelled = asyncio.CancelledError
#: What ends a lease's take or give-back part way and has it given back: a cancellation, a
#: Ctrl-C, or the ``SystemExit`` of a program's SIGTERM handler (a deploy stopping a worker).
Interrupt = (asyncio.CancelledError, KeyboardInterrupt, SystemExit)


def unheld(func: object) -> str | None:
    """What a call of ``func`` only makes, to run after the call (a generator), which a
    lease taken around the call would not hold while it runs; None when the call runs the
    body (a coroutine function: awaited inside the block). Told of ``func`` itself: a
    wrapper of a generator function may consume it (``contextlib.contextmanager``'s)."""
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        return "a generator"
    return None


async def sleep(clock: Clock, seconds: float) -> None:
    await clock.asleep(seconds)


class Turns:
    """The callers of one guard's ``acquire`` on one policy and context, in turn (first
    come, first asked): the first asks the store, sleeps and asks again; the others wait
    until it is done, so a process sends one waiter's calls a key where every waiter's
    raced for each freed unit. A caller that waits its whole ``timeout`` asks at once
    (the store then says whether its turn is within what is left); the store decides
    every hit alike: exactness is the store's, the order the process's."""

    def __init__(self) -> None:
        self._queues: dict[Any, deque[asyncio.Future[None]]] = {}

    @contextlib.asynccontextmanager
    async def turn(
        self, policy: str, ctx: Mapping[str, object], clock: Clock, timeout: object
    ) -> AsyncIterator[object]:
        """Yield the timeout left once it is the caller's turn (None: no timeout); one that
        is no timeout, or a context that is none, as given (the guard refuses them)."""
        found = turn_key(policy, ctx, timeout)
        if found is None:
            yield timeout
            return
        key = (asyncio.get_running_loop(), found)  # a guard's waiters on each loop apart
        limit = cast("float | None", timeout)
        queue = self._queues.setdefault(key, deque())
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(mine)
        if len(queue) == 1:
            mine.set_result(None)
        began = clock.now()
        try:
            if not mine.done():  # asyncio.wait never cancels it: no turn lost to a timeout
                await asyncio.wait((mine,), timeout=limit)
            waited = clock.now() - began
            yield None if limit is None else max(0.0, limit - waited)
        finally:
            first = queue[0] is mine
            queue.remove(mine)
            if not queue:
                self._queues.pop(key, None)
            elif first and not queue[0].done():  # the next waiter's turn
                queue[0].set_result(None)


class holding(contextlib.nullcontext[None]):
    """The sync side holds a Ctrl-C back around what a lease does; a task is cancelled
    only where it awaits, which :func:`send` lets finish: nothing to hold here."""

    entered = True  # as the sync side's, once in force

    def __init__(self, backend: Any) -> None:
        super().__init__()

    def restore(self) -> None:
        """The sync side puts SIGINT's handler back; nothing to put back here."""


async def send(backend: Any, calls: list[ScriptCall], whole: bool) -> list[Reply]:
    """``backend.aexecute_many(calls)``; with ``whole`` (an operation that writes in more
    than one call, a batch, a lease taken or given back), let finish when the caller is
    cancelled, however many times, which is then an :class:`_Interrupted` with the replies
    (or, when the calls failed too, the cancellation as it came: what they did is not
    known)."""
    if not whole:
        return await backend.aexecute_many(calls)  # type: ignore[no-any-return]
    cancelled: BaseException | None = None
    while True:
        began: list[bool] = []
        finishing = FINISHING.set(True)  # the task's own context: its calls finish, whatever
        try:  # cancels it (asyncio.run cancels every task left, this one among them)
            task = asyncio.ensure_future(_began(began, backend, calls))
        finally:
            FINISHING.reset(finishing)
        cancelled = await _through(task) or cancelled
        if began or not task.cancelled():
            break
        # cancelled before its first step (asyncio.run's end): nothing sent, send it again
    try:
        replies, failed = task.result()
    except BaseException:
        if cancelled is None:
            raise
        raise cancelled from None
    if failed is not None:
        if cancelled is None:
            raise failed
        raise cancelled from None
    if cancelled is None:
        return replies
    raise _Interrupted(backend, calls, replies, cancelled) from None


async def _began(
    began: list[bool], backend: Any, calls: list[ScriptCall]
) -> tuple[list[Reply], Exception | None]:
    """``backend.aexecute_many(calls)``, once ``began`` says that the task running it took
    its first step (a task cancelled before it has sent nothing); its failure returned,
    not raised (``asyncio.run`` logs a task it cancelled that ended in an error as an error
    nobody handled, though the caller handles it)."""
    began.append(True)
    try:
        return await backend.aexecute_many(calls), None
    except Exception as exc:
        return [], exc


async def _through(task: asyncio.Future[Any]) -> BaseException | None:
    """Wait until ``task`` is done, through every cancellation of the caller meanwhile (the
    task goes on): the first such cancellation, or None."""
    cancelled: BaseException | None = None
    while not task.done():
        try:
            await asyncio.wait((task,))  # never cancels the task, never raises its error
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    return cancelled


async def unwind(op: Op[T], cancelled: BaseException, backend: Any) -> BaseException:
    """The caller was cancelled: what the call under way took (when it finished and said)
    and what the operation took before (``op`` gives it back when the cancellation is
    thrown into it) goes back to the store (``backend``), each call let finish, through
    any further cancellation. Returns the cancellation to raise: the caller's own, as it
    came (``asyncio.timeout`` turns only a ``CancelledError`` itself into a
    ``TimeoutError``, never a subclass of it)."""
    await _unwind(op, cancelled, backend)
    return cancelled.cancelled if isinstance(cancelled, _Interrupted) else cancelled


async def _unwind(op: Op[T], cancelled: BaseException, backend: Any) -> None:
    steps = unwinding(op, cancelled, backend)
    try:
        where = next(steps)
        while True:
            where = steps.send(await _finish(*where))
    except (asyncio.CancelledError, StopIteration):
        return
    except Exception:  # the store failed meanwhile: the units stay taken, the strict side
        _log.warning("freqguard: a cancelled operation could not give back what it took")
        op.close()


async def _finish(backend: Any, calls: list[ScriptCall]) -> list[Reply]:
    """``calls`` sent and answered, though the caller, being unwound, is cancelled again."""
    try:
        return await send(backend, calls, True)
    except _Interrupted as again:
        return again.replies


class _Interrupted(Interrupted, asyncio.CancelledError):
    """A cancellation that came while ``calls`` were out on ``backend``, which answered them
    after it: ``replies``; ``cancelled``, the caller's own, is the one raised."""

    def __init__(
        self,
        backend: Any,
        calls: list[ScriptCall],
        replies: list[Reply],
        cancelled: BaseException,
    ) -> None:
        Interrupted.__init__(self, backend, calls, replies)
        asyncio.CancelledError.__init__(self)
        self.cancelled = cancelled
