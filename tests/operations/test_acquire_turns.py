"""``acquire``'s waiters on one key ask the store in turn (a new user's finding: eight
threads sent 8.9 store calls per admitted call, 32 sent 26, each woken waiter racing for
the freed unit). In one process the first asks, sleeps and asks again; the others wait
for it, first come first served; one that waits its whole timeout asks at once. Time is
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


def test_async_waiters_ask_in_turn_first_come_first_served() -> None:
    """Eight tasks at once under a strict 1/second: the first is admitted at once, each
    next asks once (denied: its turn is a second on), sleeps, and asks again: 1 + 2 x 7
    store calls, admitted in the order they came. Racing, every woken waiter asked."""
    clock = ManualClock(START)
    backend = Counting(clock)
    guard = AsyncGuard(backend, [_STRICT], clock=clock)
    order: list[int] = []

    async def send(n: int) -> None:
        await guard.acquire("vendor", timeout=60)
        order.append(n)

    async def run() -> None:
        await asyncio.gather(*(send(n) for n in range(8)))

    asyncio.run(run())
    assert order == list(range(8))
    assert backend.calls == 1 + 2 * 7
    assert clock.now() - START == pytest.approx(7.0)  # one a second, none lost
    assert not guard._turns._queues  # every queue gone with its last waiter


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
    assert backend.calls == 1 + 2 * 3
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
    """Three tasks; the second is cancelled while it waits for the first: the third is
    admitted after the first, and no queue is left."""
    clock = ManualClock(START)
    guard = AsyncGuard(MemoryBackend(clock), [_STRICT], clock=clock)
    done: list[str] = []

    async def send(name: str) -> None:
        await guard.acquire("vendor", timeout=60)
        done.append(name)

    async def run() -> None:
        assert (await guard.hit("vendor")).allowed  # the unit of this second is spent
        first = asyncio.ensure_future(send("first"))
        second = asyncio.ensure_future(send("second"))
        third = asyncio.ensure_future(send("third"))
        await asyncio.sleep(0)  # each has asked for its turn; the first holds it
        second.cancel()
        await asyncio.gather(first, third)
        with pytest.raises(asyncio.CancelledError):
            await second

    asyncio.run(run())
    assert done == ["first", "third"]
    assert not guard._turns._queues
