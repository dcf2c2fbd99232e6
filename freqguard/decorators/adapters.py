"""Sync → async: an :class:`AsyncGuard` over a sync :class:`Guard`'s state and policies.

An ``async def`` capped on a sync guard, or an ASGI app given one, must not block its event
loop on a sync backend's I/O, and must see the very policies and state of that guard::

    guard = Guard(RedisBackend(...))
    face = as_async(guard)        # the same face on every call for this guard
    await face.hit("sms", recipient="+4917...")

On the memory backend the face shares the backend itself (it serves sync and async alike
and never blocks on I/O); on any other it runs the sync backend's calls in a worker thread
(:class:`ThreadedBackend`).
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Callable, Sequence
from typing import TypeVar

from freqguard.backends.base import AsyncBackend, SyncBackend, answered
from freqguard.backends.memory import MemoryBackend
from freqguard.guard import AsyncGuard, Guard
from freqguard.policy import Fallback
from freqguard.script.calls import Reply, ScriptCall

__all__ = ["ThreadedBackend", "as_async", "sharing"]

T = TypeVar("T")
R = TypeVar("R")


class ThreadedBackend:
    """An async backend over a sync-only one: each call runs in a worker thread.

    Args:
        backend: the sync backend whose calls are run in the loop's default executor, so
            the event loop never waits on its I/O.
    """

    def __init__(self, backend: SyncBackend) -> None:
        self.backend = backend
        self.clock = backend.clock
        # a cluster backend names each call's node: the guard's breaker keeps a circuit each
        self.node_of = getattr(backend, "node_of", None)
        self.bins: int = getattr(backend, "bins", 0)  # keys are built as the backend's

    async def aexecute(self, call: ScriptCall) -> Reply:
        """Run one script call in a worker thread (as :meth:`aexecute_many`)."""
        return await _in_thread(self.backend.execute, call)

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        """Run a batch of script calls in a worker thread: a cancellation stops the wait,
        never the thread; calls the guard lets finish (``FINISHING``: a lease's) are waited
        for through it, their replies returned (``asyncio.run``'s end cancelled the wait,
        and a lease the thread took was left held)."""
        return await _in_thread(self.backend.execute_many, calls)

    async def aclose(self) -> None:
        """Close the sync backend in a worker thread."""
        await asyncio.to_thread(self.backend.close)


async def _in_thread(function: Callable[[T], R], argument: T) -> R:
    """``function(argument)`` in the loop's default executor, in the caller's context (its
    context variables: a tracing span), as ``asyncio.to_thread`` runs it; a future, not a
    task, which ``asyncio.run``'s end would cancel."""
    loop, context = asyncio.get_running_loop(), contextvars.copy_context()
    return await answered(loop.run_in_executor(None, context.run, function, argument))


_faces: weakref.WeakKeyDictionary[Guard, AsyncGuard] = weakref.WeakKeyDictionary()


def as_async(guard: Guard) -> AsyncGuard:
    """The AsyncGuard over a sync guard's state and its live policies.

    Made once per guard and kept while the guard lives. A policy added to either side, now
    or later, is known to the other: they share one registry, not a copy.

    Args:
        guard: the sync guard to face.

    Returns:
        An AsyncGuard with the guard's clock and prefix, on the same memory backend, or on a
        :class:`ThreadedBackend` around any other.
    """
    found = _faces.get(guard)
    if found is not None:
        return found
    adapter = _Adapter()
    backend = guard.backend
    face = AsyncGuard(
        backend if isinstance(backend, MemoryBackend) else adapter.threaded(backend),
        (),
        guard.clock,
        prefix=guard.prefix,
    )
    face._adopt(guard, adapter)
    _faces[guard] = face
    return face


def sharing(guard: Guard, backend: AsyncBackend) -> AsyncGuard:
    """An AsyncGuard on ``backend`` (the guard's store, through an asyncio client) that
    shares the guard's policies, ``on_error``, breaker, deny cache and observers, as
    :func:`as_async`'s face does: a deploy through either reaches both (``configure`` with
    a URL made a second guard, whose policies a deploy on the first never reached)."""
    face = AsyncGuard(backend, (), guard.clock, prefix=guard.prefix)
    face._adopt(guard, _Adapter())
    return face


class _Adapter:
    """What makes a sync guard's backends ones its async face drives: each sync-only
    backend in one :class:`ThreadedBackend` (the face's store and its fallbacks, the
    default's and each policy's, one object for one backend: a close closes it once)."""

    def __init__(self) -> None:
        # by id(backend), while one is in use (a deploy's old fallback is let go)
        self._made: weakref.WeakValueDictionary[int, ThreadedBackend] = (
            weakref.WeakValueDictionary()
        )

    def threaded(self, backend: SyncBackend) -> ThreadedBackend:
        made = self._made.get(id(backend))
        if made is None or made.backend is not backend:
            made = self._made[id(backend)] = ThreadedBackend(backend)
        return made

    def __call__(self, on_error: object) -> object:
        """``on_error`` as the face drives it: a sync-only fallback from worker threads."""
        if isinstance(on_error, Fallback):
            return Fallback(self(on_error.backend), on_error.workers)
        if isinstance(on_error, str) or callable(getattr(on_error, "aexecute_many", None)):
            return on_error
        return self.threaded(on_error)  # type: ignore[arg-type]
