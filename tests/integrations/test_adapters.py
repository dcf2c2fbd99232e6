"""``as_async``: an AsyncGuard over a sync guard, one per guard, off the event loop."""

from __future__ import annotations

import asyncio
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
        self.closed = False

    def execute(self, call: ScriptCall) -> Reply:
        self.threads.add(threading.get_ident())
        return self.inner.execute(call)

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        self.threads.add(threading.get_ident())
        return self.inner.execute_many(calls)

    def close(self) -> None:
        self.threads.add(threading.get_ident())
        self.closed = True


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
    assert backend.closed
    assert backend.threads
    assert loop_thread not in backend.threads
    assert not guard.hit("one", user="u").allowed  # the view's hits are the guard's
