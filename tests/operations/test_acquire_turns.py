"""``acquire``'s callers of one key that the store denied wait in line (a new user's
finding: eight threads sent 8.9 store calls per admitted call, 32 sent 26, each woken
waiter racing for the freed unit). Each asks at once as it comes; once denied, in one
process the first in line sleeps and asks again, the others wait for it, first come
first served; one whose deadline passes in line asks once more. Time is
a ManualClock (its sleep advances at once); a clock whose sleep waits on a gate holds a
waiter in its turn where a test needs one held."""

from __future__ import annotations

import asyncio
import threading

import pytest

from freqguard import AsyncGuard, CapExceeded, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.script.calls import Reply, ScriptCall
from tests.conftest import START

_STRICT = Policy("vendor", Rule("1/second", strategy="gcra", burst=1, name="vendor"))


class Counting(MemoryBackend):
    """A memory store that counts the calls it answers."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.calls = 0

    def execute(self, call: ScriptCall) -> Reply:  # every other way to it comes here
        self.calls += 1
        return super().execute(call)


class AsyncGated(ManualClock):
    """A ManualClock whose ``asleep`` waits until the test opens its gate (an asyncio
    event made in the test's loop), so that every caller is in line before time moves."""

    def __init__(self, start: float) -> None:
        super().__init__(start)
        self.gate: asyncio.Event | None = None

    async def asleep(self, seconds: float) -> None:
        assert self.gate is not None
        await self.gate.wait()
        await super().asleep(seconds)


def test_async_waiters_denied_wait_in_line_first_come_first_served() -> None:
    """The unit of this second spent; four tasks ask at once, each denied (4 calls), and
    line up: the first sleeps to its unit and is admitted (1), each next asks once
    (denied: its turn is a second on), sleeps and asks again (2 each): 4 + 1 + 2 x 3 store
    calls, admitted in the order they lined up, one a second. Racing, every woken waiter
    asked (and the order was the race's)."""
    clock = AsyncGated(START)
    backend = Counting(clock)
    guard = AsyncGuard(backend, [_STRICT], clock=clock)
    order: list[int] = []

    async def send(n: int) -> None:
        await guard.acquire("vendor", timeout=60)
        order.append(n)

    async def run() -> None:
        clock.gate = asyncio.Event()
        assert (await guard.hit("vendor")).allowed
        tasks = [asyncio.ensure_future(send(n)) for n in range(4)]
        for _ in range(100):  # bounded: each task's first ask takes a turn of the loop
            await asyncio.sleep(0)
        [line] = guard._turns._queues.values()
        assert len(line) == 4
        clock.gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(run())
    assert order == [0, 1, 2, 3]
    assert backend.calls == 1 + 4 + 1 + 2 * 3
    assert clock.now() - START == pytest.approx(4.0)  # one a second, none lost
    assert not guard._turns._queues  # every line gone with its last waiter


def test_many_async_waiters_cost_the_store_a_few_calls_each_and_lose_no_turn() -> None:
    """Eight tasks at once under a strict 1/second (a ManualClock: time moves as the first
    in line sleeps, so a newcomer may take a unit before one in line): all admitted, one
    a second, and the store asked at most once as each came and twice an admitted one in
    line (racing, each woken waiter asked: 30 and more)."""
    clock = ManualClock(START)
    backend = Counting(clock)
    guard = AsyncGuard(backend, [_STRICT], clock=clock)

    async def run() -> None:
        await asyncio.gather(*(guard.acquire("vendor", timeout=60) for _ in range(8)))

    asyncio.run(run())
    assert backend.calls <= 8 + 2 * 7
    assert clock.now() - START == pytest.approx(7.0)
    assert not guard._turns._queues


def test_threads_ask_in_turn() -> None:
    """The same with four threads on a sync guard."""
    clock = ManualClock(START)
    backend = Counting(clock)
    guard = Guard(backend, [_STRICT], clock=clock)
    threads = [
        threading.Thread(target=lambda: guard.acquire("vendor", timeout=60)) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert backend.calls <= 4 + 2 * 3  # each asks once as it comes, then in line
    assert not guard._turns._queues


class GatedClock(ManualClock):
    """A ManualClock whose sleep, in a thread, waits until the test opens its gate."""

    def __init__(self, start: float) -> None:
        super().__init__(start)
        self.sleeping, self.gate = threading.Event(), threading.Event()

    def sleep(self, seconds: float) -> None:
        self.sleeping.set()
        self.gate.wait()
        super().sleep(seconds)


def test_a_waiter_with_no_time_to_wait_asks_at_once_beside_one_in_its_turn() -> None:
    """A thread holds its turn, asleep until its unit frees; a caller with ``timeout=0``
    does not wait behind it: it asks at once and is refused (its turn is a second on)."""
    clock = GatedClock(START)
    guard = Guard(MemoryBackend(clock), [_STRICT], clock=clock)
    assert guard.hit("vendor").allowed
    head = threading.Thread(target=lambda: guard.acquire("vendor", timeout=60))
    head.start()
    assert clock.sleeping.wait(timeout=30)  # bounded: the thread is asleep in its turn
    try:
        with pytest.raises(CapExceeded):
            guard.acquire("vendor", timeout=0)
    finally:
        clock.gate.set()
        head.join()
    assert not guard._turns._queues


def test_a_cancelled_waiter_leaves_its_place_and_the_next_has_its_turn() -> None:
    """Three tasks in line; the second is cancelled while it waits for the first: the
    third is admitted after the first, and no line is left."""
    clock = AsyncGated(START)
    guard = AsyncGuard(MemoryBackend(clock), [_STRICT], clock=clock)
    done: list[str] = []

    async def send(name: str) -> None:
        await guard.acquire("vendor", timeout=60)
        done.append(name)

    async def run() -> None:
        clock.gate = asyncio.Event()
        assert (await guard.hit("vendor")).allowed  # the unit of this second is spent
        first = asyncio.ensure_future(send("first"))
        second = asyncio.ensure_future(send("second"))
        third = asyncio.ensure_future(send("third"))
        for _ in range(100):  # bounded: each is denied and lines up
            await asyncio.sleep(0)
        second.cancel()
        clock.gate.set()
        await asyncio.gather(first, third)
        with pytest.raises(asyncio.CancelledError):
            await second

    asyncio.run(run())
    assert done == ["first", "third"]
    assert not guard._turns._queues
