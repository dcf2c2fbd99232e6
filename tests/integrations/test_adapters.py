"""``as_async``: an AsyncGuard over a sync guard, one per guard, off the event loop."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Sequence
from typing import cast

from freqguard import Clock, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.decorators.adapters import ThreadedBackend, as_async
from freqguard.script.calls import Reply, ScriptCall

ONE = Policy("one", Rule("1/minute", by="user"))


class Recording:
    """A sync backend that is not the memory backend: it notes the thread of each call."""

    def __init__(self, clock: ManualClock) -> None:
        self.inner = MemoryBackend(clock)
        self.clock: Clock = clock
        self.threads: set[int] = set()
        self.seen: list[str] = []  # the caller's context variable, as each call saw it
        self.closed = 0

    def execute(self, call: ScriptCall) -> Reply:
        self.threads.add(threading.get_ident())
        self.seen.append(_REQUEST.get())
        return self.inner.execute(call)

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        self.threads.add(threading.get_ident())
        self.seen.append(_REQUEST.get())
        return self.inner.execute_many(calls)

    def close(self) -> None:
        self.threads.add(threading.get_ident())
        self.closed += 1


_REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="unset")


def test_one_view_per_guard_sharing_the_memory_backend(clock: ManualClock) -> None:
    guard = Guard(MemoryBackend(clock), [ONE], clock=clock)
    view = as_async(guard)
    assert as_async(guard) is view
    assert view.backend is cast(object, guard.backend)  # the memory backend never blocks: no thread
    assert guard.hit("one", user="u").allowed
    assert not asyncio.run(view.hit("one", user="u")).allowed  # one state


def test_another_backend_runs_in_a_worker_thread(clock: ManualClock) -> None:
    backend = Recording(clock)
    guard = Guard(backend, [ONE], clock=clock)
    view = as_async(guard)
    assert isinstance(view.backend, ThreadedBackend)

    async def use() -> tuple[bool, bool, int]:
        first = await view.hit("one", user="u")
        second = await view.hit("one", user="u")
        await view.aclose()
        return first.allowed, second.allowed, threading.get_ident()

    first, second, loop_thread = asyncio.run(use())
    assert (first, second) == (True, False)
    assert backend.closed == 1
    assert backend.threads
    assert loop_thread not in backend.threads
    assert not guard.hit("one", user="u").allowed  # the view's hits are the guard's


def test_the_worker_threads_calls_run_in_the_callers_context(clock: ManualClock) -> None:
    """A sync store, or a tracing wrapper of one, reads the caller's context variables (a
    span, a request id), as ``asyncio.to_thread`` passes them: the threads' calls run in a
    copy of the caller's context (review: a change to run_in_executor dropped it)."""
    backend = Recording(clock)
    view = as_async(Guard(backend, [ONE], clock=clock))

    async def use() -> None:
        _REQUEST.set("request-42")
        assert (await view.hit("one", user="u")).allowed

    asyncio.run(use())
    assert backend.seen == ["request-42"]


def test_closing_the_async_face_closes_each_store_once(clock: ManualClock) -> None:
    """The face holds the sync guard's fallbacks adapted, each in a worker-thread wrapper
    made anew (the default, each policy's, the face's own store): its close closed a
    fallback that is also the store three times, another twice (review)."""
    store, other = Recording(clock), Recording(clock)
    same = Guard(store, [ONE], clock=clock, on_error=store)
    apart = Guard(Recording(clock), [ONE], clock=clock, on_error=other)
    asyncio.run(as_async(same).aclose())
    asyncio.run(as_async(apart).aclose())
    assert (store.closed, other.closed) == (1, 1)
