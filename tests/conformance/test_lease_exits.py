"""Calls in flight hold under every exit: a lease goes back whichever way its holder leaves
(the block's end, an exception, a generator closed early or never iterated), and nothing but
``release`` (or ``refund`` of the decision that took it) gives back another caller's lease.

On every store: memory, Redis, Redis with records in bins, Redis without Functions (EVAL
scripts) and a Redis Cluster; time pinned (``ManualClock``), so no lease frees itself while
a test runs.

A cancellation at any await of a lease's entry or exit is in
``test_lease_cancellations.py``; a per-key limit across a deploy that turns a rate rule into
a concurrency rule or back in ``test_lease_deploys.py``; the stores are ``lease_rig.py``'s."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Generator
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    capped,
)
from freqguard.backends.base import SyncBackend
from tests.conformance.lease_rig import LLM
from tests.conformance.lease_rig import every_store as every_store
from tests.conftest import START


def test_a_refund_by_context_on_a_policy_with_leases_points_to_release(
    every_store: SyncBackend,
) -> None:
    guard = Guard(every_store, [LLM], clock=ManualClock(START))
    first = guard.take_lease("llm", user="u")
    second = guard.take_lease("llm", user="u")
    assert first.allowed
    assert second.allowed
    with pytest.raises(ConfigError, match=r"guard\.release\(decision\)"):
        guard.refund("llm", user="u")
    with pytest.raises(ConfigError, match=r"guard\.release\(decision\)"):
        guard.refund("llm", 2, user="u")
    # still two in flight: a third is refused
    assert not guard.take_lease("llm", user="u").allowed
    guard.release(first)
    assert guard.take_lease("llm", user="u").allowed


def test_a_refund_of_the_decision_gives_back_its_own_lease_once() -> None:
    guard = Guard(policies=[LLM], clock=ManualClock(START))
    taken = guard.take_lease("llm", user="u")
    guard.refund(taken)  # exactly that hit: its lease and its rate unit
    with pytest.raises(ConfigError, match="already refunded"):
        guard.release(taken)
    states = {r.rule.id: r.remaining for r in guard.peek("llm", user="u").rules}
    assert states == {"cc.2.60s": 2, "sl.100.60s": 100}


STREAM = Policy("stream", Rule("1 concurrent", lease=60))


def test_a_capped_generator_holds_its_lease_until_it_finishes_or_is_closed() -> None:
    guard = Guard(policies=[STREAM], clock=ManualClock(START))

    @capped("stream", guard=guard, on_exceeded="skip")
    def stream(n: int) -> Generator[int, None, None]:
        yield from range(n)

    first = stream(3)
    assert next(first) == 0  # its lease taken at the first step
    assert list(stream(2)) == []  # skipped: one stream at once
    assert list(first) == [1, 2]  # finished: its lease back
    assert list(stream(2)) == [0, 1]
    closed = stream(3)
    next(closed)
    closed.close()  # closed early: its lease back
    assert list(stream(1)) == [0]
    never = stream(5)  # never iterated: takes nothing
    assert list(stream(1)) == [0]
    del never
    assert guard.peek("stream").remaining == 1


def test_a_capped_generator_that_raises_gives_its_lease_back() -> None:
    guard = Guard(policies=[STREAM], clock=ManualClock(START))

    @capped("stream", guard=guard)
    def stream() -> Generator[int, None, None]:
        yield 1
        raise RuntimeError("the stream broke")

    with pytest.raises(RuntimeError):
        list(stream())
    assert guard.peek("stream").remaining == 1
    held = stream()
    next(held)
    with pytest.raises(Exception, match="stream"):
        next(stream())  # CapExceeded, at the first step
    held.close()


def test_a_capped_async_generator_holds_its_lease_until_it_finishes_or_is_closed() -> None:
    guard = AsyncGuard(policies=[STREAM], clock=ManualClock(START))

    @capped("stream", guard=guard, on_exceeded="skip")
    async def stream(n: int) -> AsyncGenerator[int, None]:
        for i in range(n):
            yield i

    async def main() -> None:
        first = stream(3)
        assert await first.__anext__() == 0
        assert [i async for i in stream(2)] == []
        assert [i async for i in first] == [1, 2]
        assert [i async for i in stream(2)] == [0, 1]
        closed = stream(3)
        await closed.__anext__()
        await closed.aclose()
        assert [i async for i in stream(1)] == [0]
        stream(5)  # never iterated: takes nothing
        assert [i async for i in stream(1)] == [0]
        assert (await guard.peek("stream")).remaining == 1

    asyncio.run(main())


def test_a_rate_capped_generator_is_counted_at_its_call_as_before() -> None:
    guard = Guard(clock=ManualClock(START))

    @capped("2/minute", guard=guard, on_exceeded="skip")
    def numbers() -> Generator[int, None, None]:
        yield 1

    made = [numbers() for _ in range(3)]
    assert [list(g) if g is not None else None for g in made] == [[1], [1], None]


def test_one_lease_block_entered_by_two_tasks_at_once_refuses_the_second() -> None:
    """A block is for one ``with``; the check was made before the take's await, so a second
    task entering the same block meanwhile (``block = guard.lease(...)`` shared as an
    ``asyncio.Semaphore`` is) passed it: both took a lease, both got the first, which went
    back twice ("already refunded" at the second exit) while the other stayed held
    (adversarial review). The second entry is now refused, before it takes anything."""

    async def main() -> tuple[list[str], int]:
        guard = AsyncGuard(policies=[LLM], clock=ManualClock(START))
        block = guard.lease("llm", user="u")
        seen: list[str] = []

        async def worker() -> None:
            try:
                async with block:
                    seen.append("inside")
                    await asyncio.sleep(0)
            except RuntimeError as exc:
                seen.append(str(exc))

        await asyncio.gather(worker(), worker())
        return seen, (await guard.peek("llm", user="u")).rules[0].remaining

    seen, free = asyncio.run(main())
    assert free == 2
    assert seen[0].startswith("a lease block is for one `with` at a time")
    assert seen[1:] == ["inside"]


def test_one_lease_block_entered_by_two_threads_at_once_refuses_the_second() -> None:
    """The sync copy: the second thread tries the block while the first is inside its take
    (an observer holds the first decision until the second has tried)."""
    in_take, tried = threading.Event(), threading.Event()

    class Hold:
        def decided(self, decision: object, context: object, seconds: float) -> None:
            in_take.set()
            tried.wait(5)

        def failed(self, error: object, policy: str, backend: str) -> None:
            pass

    guard = Guard(policies=[LLM], clock=ManualClock(START), observers=[Hold()])
    block = guard.lease("llm", user="u")
    seen: list[object] = []

    def first() -> None:
        with block:
            seen.append("inside")

    thread = threading.Thread(target=first)
    thread.start()
    assert in_take.wait(5)
    try:
        with pytest.raises(RuntimeError, match="for one `with` at a time"), block:
            pass
    finally:
        tried.set()
        thread.join()
    assert seen == ["inside"]
    assert guard.peek("llm", user="u").rules[0].remaining == 2


@pytest.mark.parametrize("way", ["release", "refund"])
def test_a_blocks_lease_given_back_inside_it_leaves_its_exit_quiet(way: str) -> None:
    """``release(decision)`` or ``refund(decision)`` inside ``with guard.lease(...)`` (the
    vendor failed: refund it) gave the lease back; the block's own give-back then claimed
    the spent receipt and raised "already refunded" out of its exit, in place of the
    block's own exception (adversarial review). A lease already given back is not given
    back again."""
    guard = Guard(policies=[LLM], clock=ManualClock(START))

    def failing() -> None:
        with guard.lease("llm", user="u") as decision:
            getattr(guard, way)(decision)
            raise ValueError("the vendor failed")

    with pytest.raises(ValueError, match="the vendor failed"):
        failing()
    with guard.lease("llm", user="u") as decision:
        getattr(guard, way)(decision)
    assert guard.peek("llm", user="u").rules[0].remaining == 2


class _FailingOnce(MemoryBackend):
    """A memory store whose next ``fail`` calls raise ``BackendUnavailable`` (not sent)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = 0

    def execute_many(self, calls: Any) -> Any:
        if self.fail:
            self.fail -= 1
            raise BackendUnavailable("the store is away", sent=False)
        return super().execute_many(calls)


def test_a_block_whose_take_failed_can_be_entered_again() -> None:
    """A block whose take failed (the store away, nothing taken) holds nothing and nobody
    is in it: a retry of the same block takes its lease (review: the one-`with` lock was
    never let go, and the retry was refused as a second task's entry)."""
    backend = _FailingOnce()
    guard = Guard(backend, [LLM], clock=ManualClock(START))
    block = guard.lease("llm", user="u")
    backend.fail = 1
    with pytest.raises(BackendUnavailable), block:
        raise AssertionError("not entered")
    with block as decision:
        assert decision.allowed
    assert guard.peek("llm", user="u").rules[0].remaining == 2
