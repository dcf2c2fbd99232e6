"""What only asyncio has, for the async guard: a cancellation may come while calls are out.

Written by hand with its sync counterpart (``freqguard/_sync/_io.py``), the guard's only
hand-written pair: a thread is not cancelled part way, but its main thread is interrupted
(Ctrl-C), which the sync side holds back around what a lease does (``holding``), and
unwinds elsewhere as this side does a cancellation (both through ``engine.ops.unwinding``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar

from freqguard.backends.base import FINISHING
from freqguard.clock import Clock
from freqguard.decision import Decision
from freqguard.engine.ops import Interrupted, Op, Sleep, own_line, to_wake, turn_key, unwinding
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


async def sleep(clock: Clock, step: Sleep) -> None:
    """A step's wait: in an ``acquire``, by its place in the process's line (see
    :class:`Turns`); else the clock's sleep."""
    place = _PLACE.get()
    if place is None:
        await clock.asleep(step.seconds)
    else:
        await place.wait(clock, step)


class Turns:
    """The callers of one guard's ``acquire`` on one policy and context that the store has
    denied, in line (first come, first served): the first sleeps until its unit frees and
    asks again; the others wait until it is admitted or gone, then ask. So a process sends
    about three calls an admitted one (benchmarks/README.md), where every sleeper woke at
    once and raced for each freed unit. A caller asks at once as it comes (the store
    admits several at once if it can, and refuses at once a turn past its timeout); one
    whose deadline passes in line asks once more. Exactness is the store's: the line only
    orders a process's askers."""

    def __init__(self) -> None:
        self._queues: dict[Any, deque[_Turn]] = {}

    @contextlib.asynccontextmanager
    async def place(
        self, policy: str, texts: Mapping[str, str], cost: int = 1
    ) -> AsyncIterator[_Place]:
        """An ``acquire``'s place, taken when the store first denies it (``texts``: the
        checked call's context, ``cost`` its units; a guard's callers on each event loop
        apart), and left as the block ends, however."""
        key = (asyncio.get_running_loop(), turn_key(policy, texts))
        task, outer = asyncio.current_task(), _PLACE.get()
        if outer is not None and outer.task is not task:  # a task started in an acquire
            outer = None  # copied its context: that acquire is not its caller's
        place = _Place(self._queues, key, outer, task, cost)
        token = _PLACE.set(place)
        try:
            yield place
        finally:
            _PLACE.reset(token)
            place.leave()


class _Turn(asyncio.Future[None]):
    """A caller's turn in a line, set when it is first; ``cost``, the units it asks."""

    def __init__(self, cost: int) -> None:
        super().__init__()
        self.cost = cost


class _Place:
    """One ``acquire``'s place in a line: ``mine``, its turn, set when it is first;
    ``outer``, the place of the acquire the same ``task`` runs it in, if any."""

    __slots__ = ("_queues", "cost", "free", "key", "mine", "outer", "task")

    def __init__(
        self,
        queues: dict[Any, deque[_Turn]],
        key: Any,
        outer: _Place | None,
        task: object,
        cost: int = 1,
    ) -> None:
        self._queues, self.key, self.outer, self.task = queues, key, outer, task
        self.cost = cost
        self.mine: _Turn | None = None
        self.free = 0  # the units its admission left: that many more are woken with the next

    def took(self, decision: Decision) -> Decision:
        """``decision``, the acquire's; as it leaves, the next in line is woken and as many
        after it as the units the decision left hold, by each one's cost (a window freed at
        once: they ask together), and one more, to sleep for the next turn (review: one a
        unit woke five callers of 5 units where one fitted, the rest denied, each then
        sleeping as if first: the herd at every turn)."""
        self.free = decision.remaining if decision.allowed else 0
        return decision

    async def wait(self, clock: Clock, step: Sleep) -> None:
        """The first in line sleeps the step's seconds; any other waits for its turn (then
        asks at once: the unit the first slept for went to it), at most to its deadline."""
        if self.mine is None:
            if own_line(self):
                await clock.asleep(step.seconds)
                return
            self.mine = _Turn(self.cost)
            queue = self._queues.setdefault(self.key, deque())
            queue.append(self.mine)
            if len(queue) == 1:
                self.mine.set_result(None)
        if self.mine.done():
            await clock.asleep(step.seconds)
            return
        left = None if step.until is None else max(0.0, step.until - clock.now())
        await asyncio.wait((self.mine,), timeout=left)  # never cancels it: no turn lost

    def leave(self) -> None:
        """Out of the line (if in it); the next one's turn, if this one was first."""
        mine, self.mine = self.mine, None
        queue = None if mine is None else self._queues.get(self.key)
        if mine is None or queue is None or mine not in queue:
            return
        first = queue[0] is mine
        queue.remove(mine)
        if not queue:
            del self._queues[self.key]
        elif first:
            for waiter in to_wake(queue, self.free):
                if not waiter.done():
                    waiter.set_result(None)


#: The line place of the ``acquire`` the running task is in, read by :func:`sleep`.
_PLACE: contextvars.ContextVar[_Place | None] = contextvars.ContextVar(
    "freqguard_turn", default=None
)


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
