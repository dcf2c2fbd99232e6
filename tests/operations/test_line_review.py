"""A review of ``acquire``'s line as it begins at a denial (commits c21133c, 633788b:
``_io.Turns``, ``engine.ops.own_line``): each test failed on those commits, for the reason
its docstring gives. Time is a ManualClock; a sleeper is held in its turn by a gated clock;
every wait is bounded."""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard._sync import _io as _sync_io
from freqguard.script.calls import Reply, ScriptCall
from tests.conftest import START
from tests.operations.test_acquire_turns import _STRICT, AsyncGated, GatedClock
from tests.operations.test_turns_review import _only, _release, _thread, _waits_in_line

_WINDOW = Policy("window", Rule("3/minute", strategy="fixed-window", name="window"))


class HeldStore(MemoryBackend):
    """A memory store whose ``held``-th call after :meth:`arm` waits on a gate: one
    caller's round trip in flight."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.calling, self.gate = threading.Event(), threading.Event()
        self._count: int | None = None
        self._lock = threading.Lock()

    def arm(self, held: int) -> None:
        with self._lock:
            self._count = held

    def execute(self, call: ScriptCall) -> Reply:
        with self._lock:
            hold = False
            if self._count is not None:
                self._count -= 1
                hold = self._count == 0
        if hold:
            self.calling.set()
            assert self.gate.wait(timeout=60)
        return super().execute(call)


def test_waiters_a_window_frees_together_are_not_admitted_one_round_trip_each() -> None:
    """Scenario: a fixed window of 3 a minute, spent; three threads ``acquire`` and are
    denied: one sleeps to the window's end, two wait in line. The window turns: three
    units free at once. The first is admitted; the second's ask is in flight (a slow
    round trip). Wrong: the third waits in line for the second's reply though the store
    holds a free unit for it: a process's waiters take a freed window one round trip at
    a time (100 a window on a 10 ms link: a second), where every sleeper asked at once
    before the line (the last review's finding for newcomers, left for the line)."""
    clock = GatedClock(START)
    backend = HeldStore(clock)
    guard = Guard(backend, [_WINDOW], clock=clock)
    for _ in range(3):
        assert guard.hit("window").allowed
    got: list[object] = []
    threads = [_thread(lambda: guard.acquire("window", timeout=120), got) for _ in range(3)]
    try:
        _waits_in_line(guard, 3)
        assert clock.sleeping.wait(timeout=30)
        backend.arm(2)  # the first's ask after its sleep passes; the next one's is held
        clock.gate.set()
        assert backend.calling.wait(timeout=30)
        pause = threading.Event()
        for _ in range(6000):  # bounded polling (30 s): the first and the third admitted
            admitted = [d for d in got if isinstance(d, Decision) and d.allowed]
            if len(admitted) >= 2:
                break
            pause.wait(0.005)
        assert len(admitted) == 2, got  # the first, and the third beside the held one
    finally:
        backend.gate.set()
        _release(guard)
        for thread in threads:
            thread.join(timeout=30)


_SHAKY = Policy(
    "vendor", Rule("1/second", strategy="gcra", burst=1, name="vendor"), on_error="deny"
)


class FailingOnce(MemoryBackend):
    """A memory store whose next call fails once :attr:`failing` is set."""

    failing = False

    def execute(self, call: ScriptCall) -> Reply:
        if self.failing:
            self.failing = False
            raise BackendUnavailable("the store failed", sent=False)
        return super().execute(call)


class SpawningObserver:
    """An observer that, told the store failed, schedules a probe: a task of its own that
    waits for the key's next turn (``acquire``), once."""

    def __init__(self) -> None:
        self.guard: AsyncGuard | None = None
        self.tasks: list[asyncio.Task[Decision]] = []

    def decided(self, decision: Decision, context: object, seconds: float) -> None:
        return None

    def failed(self, error: object, policy: str, backend: str) -> None:
        if self.guard is not None and not self.tasks:
            self.tasks.append(asyncio.ensure_future(self.guard.acquire("vendor")))


def test_a_task_spawned_inside_an_acquire_waits_in_line_as_its_own() -> None:
    """Scenario: an async ``acquire`` whose first ask finds the store failing (``on_error``
    "deny": it waits for the store as for a turn); its observer, told of the failure,
    starts a task that ``acquire``s the same key. The task is no nested call: it is a
    caller of its own, and, denied, should wait in line behind the first. Wrong: the task
    copied the context, ``_PLACE`` and all, so ``own_line`` takes the first's place for
    its caller's and the task sleeps outside the line, racing it (admitted ahead of those
    in line, its wakes the store calls the line saves); so does every ``acquire`` of any
    task started in an acquire while that acquire holds its place."""
    clock = AsyncGated(START)
    backend = FailingOnce(clock)
    observer = SpawningObserver()
    guard = AsyncGuard(backend, [_SHAKY], clock=clock, observers=[observer])
    observer.guard = guard

    async def run() -> int:
        clock.gate = asyncio.Event()
        assert (await guard.hit("vendor")).allowed  # the unit of this second is spent
        backend.failing = True
        first = asyncio.ensure_future(guard.acquire("vendor", timeout=60))
        for _ in range(100):  # bounded: the first fails, sleeps; the probe is denied
            await asyncio.sleep(0)
        [line] = guard._turns._queues.values()
        waiting = len(line)
        clock.gate.set()
        await asyncio.wait_for(asyncio.gather(first, *observer.tasks), 30)
        return waiting

    assert asyncio.run(run()) == 2  # the first, and the probe behind it
    assert observer.tasks
    assert not guard._turns._queues


class StartingClock(ManualClock):
    """A ManualClock whose first sleep runs ``hook`` first (a follower lines up while the
    first in line sleeps)."""

    def __init__(self, start: float) -> None:
        super().__init__(start)
        self.hook: Callable[[], None] | None = None

    def sleep(self, seconds: float) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        super().sleep(seconds)


def _interrupt_in_leave() -> None:
    """Have a Ctrl-C land in this thread as it next runs ``_Place.leave``'s ``with`` line
    (between two of its steps, as a signal's handler runs: a trace raises it there), the
    trace function it replaced (a coverage run's) put back as it does."""
    previous = sys.gettrace()
    code = _sync_io._Place.leave.__code__
    lines = inspect.getsourcelines(code)
    target = lines[1] + next(i for i, text in enumerate(lines[0]) if "turns._lock" in text)

    def local(frame: FrameType, event: str, arg: object) -> Any:
        if event == "line" and frame.f_lineno == target:
            sys.settrace(previous)
            raise KeyboardInterrupt
        return local

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        return local if frame.f_code is code else None

    sys.settrace(tracer)


def test_a_ctrl_c_as_the_first_in_line_leaves_hands_the_turn_on() -> None:
    """Scenario: the main thread is first in line, a thread waits behind it with
    ``timeout=None``; the first is admitted and, as it leaves the line (``leave``, in the
    ``finally`` of its place), a Ctrl-C lands (a second Ctrl-C of an impatient user; a
    SIGTERM's ``SystemExit`` as a deploy stops the worker). Wrong: ``leave`` had taken
    ``mine`` off the place before it took the lock, so its event stays first in the
    key's line, set, for good: the follower, and every caller the store denies on the key
    after it, waits behind nobody, for ever (a worker's non-daemon thread: the process
    never exits)."""
    clock = StartingClock(START)
    guard = Guard(MemoryBackend(clock), [_STRICT], clock=clock)
    assert guard.hit("vendor").allowed
    got: list[object] = []
    follower: list[threading.Thread] = []
    previous = sys.gettrace()

    def line_up() -> None:
        follower.append(_thread(lambda: guard.acquire("vendor", timeout=None), got))
        _waits_in_line(guard, 2)
        _interrupt_in_leave()

    clock.hook = line_up
    try:
        with pytest.raises(KeyboardInterrupt):
            guard.acquire("vendor", timeout=60)
        follower[0].join(timeout=5)
        decision = _only(got)
        assert isinstance(decision, Decision), got
        assert decision.allowed
        assert not guard._turns._queues
    finally:
        sys.settrace(previous)
        _release(guard)
        for thread in follower:
            thread.join(timeout=30)
