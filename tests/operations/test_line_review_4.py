"""A fourth review of ``acquire``'s line (commit 1ce1628: ``_io.Turns``, ``_Place.took``'s
wake of as many more as units left free): each test failed on that commit, for the reason
its docstring gives. Time is a ManualClock whose concurrent sleepers sleep to the same
instant (:class:`Until`); every wait is bounded."""

from __future__ import annotations

import asyncio
import contextvars
import threading

from freqguard import AsyncGuard, Decision, Guard, ManualClock, Policy, Rule
from tests.conftest import START
from tests.operations.test_acquire_turns import Counting, GatedClock
from tests.operations.test_line_review import _SHAKY, FailingOnce
from tests.operations.test_turns_review import _only, _release, _thread, _waits_in_line

_WINDOW = Policy("window", Rule("20/minute", strategy="fixed-window", name="window"))


class Until(ManualClock):
    """A ManualClock whose ``asleep`` sleeps to an instant: callers asleep together wake
    together, time moved once (a ManualClock moves it by every sleeper's seconds)."""

    async def asleep(self, seconds: float) -> None:
        target = self.now() + seconds
        await asyncio.sleep(0)
        if self.now() < target:
            self.set(target)


def test_a_turn_wakes_as_many_callers_as_fit_not_one_a_unit() -> None:
    """Scenario: a fixed window of 20 a minute, spent; twelve tasks ``acquire`` at a cost
    of 5 each, denied, in line. The window turns: the first is admitted, 15 units left
    (three more callers' worth). Wrong: ``took`` counts units as callers, so the first
    wakes 1 + 15: all eleven; three are admitted and eight denied, each then sleeping as if
    first in line, and all asking together at each window's turn: the herd the line is for
    (36 store calls, where waking the callers that fit, and one to sleep for the next turn,
    takes 4 admitted and one denied a window: 12 + 5 + 5 + 4), their order the race's."""
    clock = Until(START)
    backend = Counting(clock)
    guard = AsyncGuard(backend, [_WINDOW], clock=clock)
    order: list[int] = []

    async def send(n: int) -> None:
        await guard.acquire("window", cost=5)
        order.append(n)

    async def run() -> None:
        assert (await guard.hit("window", cost=20)).allowed
        backend.calls = 0
        tasks = [asyncio.ensure_future(send(n)) for n in range(12)]
        await asyncio.wait_for(asyncio.gather(*tasks), 30)

    asyncio.run(run())
    assert order == list(range(12))
    assert backend.calls <= 12 + 5 + 5 + 4, backend.calls
    assert not guard._turns._queues


class ThreadingObserver:
    """An observer that, told the store failed, starts a probe once: a thread of its own,
    in a copy of the caller's context (as ``asyncio.to_thread`` or a ``ThreadPoolExecutor``
    given ``contextvars.copy_context().run`` starts one, and every thread on a
    free-threaded 3.14, which inherits its starter's context), that, once the caller holds
    its place in line, waits for the key's next turn (``acquire``)."""

    def __init__(self) -> None:
        self.guard: Guard | None = None
        self.threads: list[threading.Thread] = []
        self.got: list[object] = []

    def decided(self, decision: Decision, context: object, seconds: float) -> None:
        return None

    def failed(self, *args: object) -> None:
        guard = self.guard
        if guard is None or self.threads:
            return

        def probe() -> None:
            _waits_in_line(guard, 1)
            self.got.append(guard.acquire("vendor", timeout=60))

        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(probe,), daemon=True)
        self.threads.append(thread)
        thread.start()


def _line_of(guard: Guard, count: int, seconds: float) -> bool:
    """Whether some key's line holds ``count`` callers within ``seconds``."""
    pause = threading.Event()
    for _ in range(int(seconds / 0.005)):
        if any(len(line) >= count for line in list(guard._turns._queues.values())):
            return True
        pause.wait(0.005)
    return False


def test_a_thread_started_in_a_sync_acquire_waits_in_line_as_its_own() -> None:
    """Scenario: the sync face of the last review's spawned task: a thread's ``acquire``
    finds the store failing (``on_error`` "deny": it waits in line as for a turn); its
    observer starts a thread in a copy of its context, which ``acquire``s the same key,
    is denied, and should wait in line behind the first. Wrong: the async place drops an
    outer place of another task, the sync one keeps that of another thread, so
    ``own_line`` takes the first's place for its caller's and the thread sleeps outside
    the line, racing it."""
    clock = GatedClock(START)
    backend = FailingOnce(clock)
    observer = ThreadingObserver()
    guard = Guard(backend, [_SHAKY], clock=clock, observers=[observer])
    observer.guard = guard
    assert guard.hit("vendor").allowed  # the unit of this second is spent
    backend.failing = True
    got: list[object] = []
    head = _thread(lambda: guard.acquire("vendor", timeout=60), got)
    try:
        lined = _line_of(guard, 2, 3)  # bounded: the probe lines up, or sleeps outside
    finally:
        clock.gate.set()
        _release(guard)
        head.join(timeout=30)
        for thread in observer.threads:
            thread.join(timeout=30)
    assert lined, "the probe slept outside the line"
    assert isinstance(_only(got), Decision)
    assert isinstance(_only(observer.got), Decision)
    assert not guard._turns._queues
