"""A review of ``acquire``'s first line (commit 7ce6dbb, ``_io.Turns``), each test failing
on it: what a waiter in line cost the caller that the store alone did not. Time is a
ManualClock; a head is held in its turn by :class:`GatedClock` (its sleep waits on a
gate); every wait is bounded."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from freqguard import (
    AsyncGuard,
    CapExceeded,
    ConfigError,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.script.calls import Reply, ScriptCall
from tests.conftest import START
from tests.operations.test_acquire_turns import _STRICT, GatedClock

_DAILY = Policy("daily", Rule("1/day", strategy="gcra", burst=1, name="daily"))
_ROOMY = Policy("roomy", Rule("100/second", strategy="gcra", burst=100, name="roomy"))


def _waits_in_line(guard: Guard, count: int) -> None:
    """Until some key's line holds ``count`` callers (bounded: 30 seconds)."""
    pause = threading.Event()
    for _ in range(6000):
        if any(len(line) >= count for line in list(guard._turns._queues.values())):
            return
        pause.wait(0.005)
    raise AssertionError(f"no line of {count} formed")


def _thread(target: Callable[[], object], out: list[object]) -> threading.Thread:
    """A daemon thread that puts what ``target`` returned, or raised, in ``out``."""

    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:  # the test looks at it
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _only(got: list[object]) -> object:
    """What a thread returned or raised; none: it is still waiting (in line)."""
    assert got, "still waiting: in line"
    assert len(got) == 1, got
    return got[0]


def _release(guard: Guard) -> None:
    """Wake every caller left in a line (a test's cleanup on the broken code)."""
    turns = getattr(guard, "_turns", None)  # none before the turns: nothing to wake
    for line in list(turns._queues.values()) if turns is not None else ():
        for event in list(line):
            event.set()


def test_a_follower_may_wait_longer_than_a_thread_can_wait_at_once() -> None:
    """Scenario: a thread holds its turn; a second calls ``acquire(timeout=1e10)`` (finite
    seconds >= 0, as ``acquire`` takes and took: its deadline is only arithmetic).
    Before its fix: the follower's ``Event.wait(1e10)`` is past ``threading.TIMEOUT_MAX`` and raises
    ``OverflowError`` at once; it should wait its turn and be admitted."""
    clock = GatedClock(START)
    guard = Guard(MemoryBackend(clock), [_STRICT], clock=clock)
    assert guard.hit("vendor").allowed
    got: list[object] = []
    head = _thread(lambda: guard.acquire("vendor", timeout=60), [])
    assert clock.sleeping.wait(timeout=30)
    follower = _thread(lambda: guard.acquire("vendor", timeout=1e10), got)
    try:
        _waits_in_line(guard, 2)  # bounded polling: the follower waits in line (or raised)
    finally:
        clock.gate.set()
        head.join(timeout=30)
        follower.join(timeout=30)
    decision = _only(got)
    assert isinstance(decision, Decision), got
    assert decision.allowed
    assert not guard._turns._queues


class InterruptingClock(ManualClock):
    """A ManualClock whose next ``now()`` raises ``raising`` once armed: a Ctrl-C (or a
    clock's failure) landing as a caller takes its place in line."""

    def __init__(self, start: float, raising: BaseException) -> None:
        super().__init__(start)
        self.raising, self.armed = raising, False

    def now(self) -> float:
        if self.armed:
            self.armed = False
            raise self.raising
        return super().now()


def test_a_ctrl_c_as_a_thread_joins_the_line_leaves_no_head_behind() -> None:
    """Scenario: a Ctrl-C lands as ``acquire`` first reads the clock: in ``Turns.turn``
    right after the caller was put in line (``began = clock.now()``, before the ``try``).
    Before its fix: its place is never given back: the key's line keeps a head that is gone, so
    every later ``acquire`` on the key waits its whole timeout (None: for ever) behind
    nobody."""
    clock = InterruptingClock(START, KeyboardInterrupt())
    guard = Guard(MemoryBackend(clock), [_STRICT], clock=clock)
    clock.armed = True
    try:
        with pytest.raises(KeyboardInterrupt):
            guard.acquire("vendor", timeout=60)
        assert not guard._turns._queues, "the interrupted caller is still in line"
        got: list[object] = []
        _thread(lambda: guard.acquire("vendor", timeout=None), got).join(timeout=30)
        decision = _only(got)
        assert isinstance(decision, Decision), got
        assert decision.allowed
    finally:
        _release(guard)


def test_an_async_caller_whose_clock_fails_in_line_leaves_no_head_behind() -> None:
    """Scenario: the async face: the clock fails as a task takes its place in line.
    Before its fix: as on the sync side, its future stays at the head of the key's line, and the
    next task waits its whole timeout there (``asyncio.wait_for`` bounds it here)."""
    clock = InterruptingClock(START, RuntimeError("the clock failed"))
    guard = AsyncGuard(MemoryBackend(clock), [_STRICT], clock=clock)

    async def run() -> None:
        clock.armed = True
        with pytest.raises(RuntimeError):
            await guard.acquire("vendor", timeout=60)
        assert not guard._turns._queues, "the failed caller is still in line"
        assert (await asyncio.wait_for(guard.acquire("vendor", timeout=None), 30)).allowed

    asyncio.run(run())


def test_a_call_the_guard_refuses_is_refused_before_the_line() -> None:
    """Scenario: a thread holds its turn (its unit a second away); a second thread calls
    ``acquire`` on the same key with a cost the guard refuses unasked (``cost=-1``; so too
    ``user=True`` behind ``user=1``, whose line it shared). Before its fix: it waited in line behind
    the head (its whole timeout, or the head's whole wait) before the guard refuses it
    with the ConfigError it raised at once before the turns."""
    clock = GatedClock(START)
    guard = Guard(MemoryBackend(clock), [_STRICT], clock=clock)
    assert guard.hit("vendor").allowed
    got: list[object] = []
    head = _thread(lambda: guard.acquire("vendor", timeout=60), [])
    assert clock.sleeping.wait(timeout=30)
    follower = _thread(lambda: guard.acquire("vendor", timeout=30, cost=-1), got)
    try:
        follower.join(timeout=5)
        assert isinstance(_only(got), ConfigError), got
    finally:
        clock.gate.set()
        head.join(timeout=30)
        follower.join(timeout=60)


def test_a_follower_whose_turn_is_past_its_timeout_is_refused_at_once() -> None:
    """Scenario: 1/day, its unit spent; a thread waits for tomorrow's (``timeout=None``);
    a second calls ``acquire(timeout=30)``. Before the turns the store said at once that
    its turn is a day away (``CapExceeded`` "at once", as ``acquire``'s docstring still
    says). The first design: it waited its whole 30 seconds in line, only to be refused then."""
    clock = GatedClock(START)
    guard = Guard(MemoryBackend(clock), [_DAILY], clock=clock)
    assert guard.hit("daily").allowed
    got: list[object] = []
    head = _thread(lambda: guard.acquire("daily", timeout=None), [])
    assert clock.sleeping.wait(timeout=30)
    follower = _thread(lambda: guard.acquire("daily", timeout=30), got)
    try:
        follower.join(timeout=5)
        assert isinstance(_only(got), CapExceeded), got
    finally:
        clock.gate.set()
        head.join(timeout=30)
        follower.join(timeout=60)


class SlowStore(MemoryBackend):
    """A memory store whose first call waits on a gate: a round trip in flight."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.calling, self.gate = threading.Event(), threading.Event()
        self._first = True

    def execute(self, call: ScriptCall) -> Reply:
        if self._first:
            self._first = False
            self.calling.set()
            assert self.gate.wait(timeout=60)
        return super().execute(call)


def test_an_acquire_the_store_admits_at_once_does_not_wait_for_another_round_trip() -> None:
    """Scenario: 100/second with a burst of 100, nothing spent; one thread's ``acquire``
    is in its store call (a round trip in flight); a second ``acquire`` on the key.
    Before its fix: the second waits in line until the first's reply is back, though the store
    would admit both at once: a process's admitted ``acquire`` calls on one key are one
    round trip each, in series (at most 1/RTT a second: 100/s on a 10 ms link), where
    they ran side by side before ("the rate unchanged", the commit says)."""
    clock = ManualClock(START)
    backend = SlowStore(clock)
    guard = Guard(backend, [_ROOMY], clock=clock)
    got: list[object] = []
    first = _thread(lambda: guard.acquire("roomy", timeout=60), [])
    assert backend.calling.wait(timeout=30)
    second = _thread(lambda: guard.acquire("roomy", timeout=60), got)
    try:
        second.join(timeout=5)
        decision = _only(got)
        assert isinstance(decision, Decision), got
        assert decision.allowed
    finally:
        backend.gate.set()
        first.join(timeout=30)
        second.join(timeout=60)


class AcquiringObserver:
    """An observer that, told of a denial, waits for the key's next turn itself (a
    retry scheduled where the denial is seen), once."""

    def __init__(self) -> None:
        self.guard: Guard | None = None
        self.got: list[object] = []

    def decided(self, decision: Decision, context: object, seconds: float) -> None:
        if not decision.allowed and self.guard is not None and not self.got:
            self.got.append(self.guard.acquire("vendor", timeout=None))

    def failed(self, error: object, policy: str, backend: str) -> None:
        return None


def test_an_acquire_within_an_acquires_own_turn_does_not_wait_for_itself() -> None:
    """Scenario: ``acquire(timeout=0.5)`` gives up (its unit a second away); the guard tells
    its observers of the denial inside the caller's turn, and an observer calls
    ``acquire(timeout=None)`` on the same key, in the same thread. Wrong: the inner call
    waits in line behind its own caller, which waits for it: for ever (a finite timeout:
    all of it); before the turns it slept its turn and was admitted."""
    clock = ManualClock(START)
    observer = AcquiringObserver()
    guard = Guard(MemoryBackend(clock), [_STRICT], clock=clock, observers=[observer])
    observer.guard = guard
    assert guard.hit("vendor").allowed
    got: list[object] = []
    caller = _thread(lambda: guard.acquire("vendor", timeout=0.5), got)
    try:
        caller.join(timeout=5)
        assert isinstance(_only(got), CapExceeded), got
        decision = _only(observer.got)
        assert isinstance(decision, Decision), observer.got
        assert decision.allowed
    finally:
        _release(guard)
        caller.join(timeout=30)
