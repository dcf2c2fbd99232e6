"""Work that callers arriving together do once: a hand-written sync/async pair.

A Redis backend asks the server what it is before its first calls, and loads the library
when calls find it missing. Callers that come while that work runs wait for it and take its
outcome, rather than each doing it again. Threads and tasks wait differently, so this pair
is not generated from one source: a thread waits on a lock and then sees whether a run
finished meanwhile; a task awaits one shared task, shielded so that a cancelled caller does
not cancel it for the others (with a lock, each waiting task would run the work again when
its turn came, since a task cannot tell "finished meanwhile" without a shared result).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

__all__ = ["AsyncSharedRun", "SharedRun"]


class SharedRun:
    """Runs work once for the threads that ask while it runs."""

    __slots__ = ("_lock", "_runs")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs = 0  # runs finished

    def run(self, work: Callable[[], object]) -> None:
        """Run ``work``, unless a run finished while this thread waited for the lock. A run
        that fails raises in its own thread; the threads that waited run it again."""
        seen = self._runs
        with self._lock:
            if self._runs == seen:
                work()
                self._runs += 1


class AsyncSharedRun:
    """Runs work once for the tasks that ask while it runs (in one event loop)."""

    __slots__ = ("_running",)

    def __init__(self) -> None:
        self._running: asyncio.Future[object] | None = None

    async def run(self, work: Callable[[], Awaitable[object]]) -> None:
        """Run ``work``, or await the run already under way; every waiter gets its error."""
        running = self._running
        if (
            running is None
            or running.done()
            or running.get_loop() is not asyncio.get_running_loop()
        ):
            running = self._running = asyncio.ensure_future(work())
        await asyncio.shield(running)
