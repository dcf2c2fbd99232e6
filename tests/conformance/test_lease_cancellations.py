"""A cancellation at any await of a lease's entry or exit leaves nothing held: a task
cancelled after any number of loop steps (once, or again while it gives the lease back), a
timeout around a lease (a TimeoutError, never a cancellation nobody asked for),
``asyncio.run``'s shutdown cancelling tasks with calls out, and a sync guard's async face.
On every store, time pinned (``ManualClock``); the rig is ``lease_rig.py``."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

import pytest
from redis import Redis

from freqguard import AsyncGuard, Guard, ManualClock, Policy, Rule, capped
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import RedisBackend
from freqguard.decorators.adapters import as_async
from tests.conformance.lease_rig import EVERY_STORE, LLM, async_backend, async_store
from tests.conftest import START, flush, run_and_shut_down
from tests.servers import RedisServer

#: leases of two rules, by user and by org: two records, on two nodes of a cluster, so that a
#: lease's calls go to two lanes at once
LLM_WIDE = Policy(
    "llm",
    Rule("2 concurrent", by="user", lease=60),
    Rule("2 concurrent", by="org", lease=60, name="org"),
    Rule("10000/minute", by="user"),
)


async def _cancelled_entries(guard: AsyncGuard, again: int | None) -> int:
    """Enter a lease block in a task and cancel it after 0, 1, 2, ... loop steps (while it
    takes its lease, or inside the block, then, with ``again``, once more that many steps
    later: while it gives the lease back); the leases free at the end."""
    inside = asyncio.Event()

    async def holder() -> None:
        async with guard.lease("llm", user="u") as decision:
            if decision.allowed:
                inside.set()
                await asyncio.Event().wait()  # held until cancelled

    for steps in range(24):
        task = asyncio.create_task(holder())
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        if again is not None:
            for _ in range(again):
                await asyncio.sleep(0)
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return (await guard.peek("llm", user="u")).rules[0].remaining


@pytest.mark.parametrize("again", [None, 0, 1, 2, 3])
@pytest.mark.parametrize("store", EVERY_STORE)
def test_a_lease_cancelled_at_any_await_of_its_entry_or_exit_is_given_back(
    request: pytest.FixtureRequest, store: str, again: int | None
) -> None:
    async def main() -> int:
        async with async_store(request, store) as backend:
            guard = AsyncGuard(backend, [LLM], clock=ManualClock(START))
            return await _cancelled_entries(guard, again)

    assert asyncio.run(main()) == 2


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout came with 3.11")
@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_timeout_around_a_lease_raises_timeout_error_and_frees_it(
    request: pytest.FixtureRequest, store: str
) -> None:
    """``asyncio.timeout`` turns only a ``CancelledError`` itself into ``TimeoutError``: the
    cancellation that came while a lease's calls were out was raised again as a private
    subclass of it, so the caller saw a cancellation nobody asked for (review: 16 of 200
    on memory, 74 on Redis). Timed out after 0 to 23 loop steps: always TimeoutError, and
    the leases free."""

    async def main() -> tuple[set[type[BaseException]], int]:
        async with async_store(request, store) as backend:
            guard = AsyncGuard(backend, [LLM], clock=ManualClock(START))
            seen: set[type[BaseException]] = set()
            for steps in range(24):
                try:
                    async with asyncio.timeout(None) as timeout:  # type: ignore[attr-defined]
                        loop = asyncio.get_running_loop()
                        timeout.reschedule(loop.time() if steps == 0 else None)
                        if steps:
                            loop.call_soon(_after, steps, loop, timeout)
                        async with guard.lease("llm", user="u"):
                            await asyncio.Event().wait()
                except BaseException as exc:  # what the caller sees
                    seen.add(type(exc))
            return seen, (await guard.peek("llm", user="u")).rules[0].remaining

    assert asyncio.run(main()) == ({TimeoutError}, 2)


def _after(steps: int, loop: asyncio.AbstractEventLoop, timeout: Any) -> None:
    """Expire ``timeout`` after ``steps`` more turns of the loop."""
    if steps <= 1:
        timeout.reschedule(loop.time())
    else:
        loop.call_soon(_after, steps - 1, loop, timeout)


async def _left_running(guard: AsyncGuard, extra: int) -> None:
    """Start three tasks that take and give back leases without end, let them run, and
    return ``extra`` loop steps after the sixth lease: ``asyncio.run`` cancels them then,
    with the lane's driver, whatever calls are out."""
    taken = 0

    async def holder() -> None:
        nonlocal taken
        while True:
            async with guard.lease("llm", user="u", org="o"):
                taken += 1
                await asyncio.sleep(0)

    holders = [asyncio.create_task(holder()) for _ in range(3)]
    for _ in range(100_000):  # the first calls connect and load the library
        if taken >= 6:
            break
        await asyncio.sleep(0)
    assert taken >= 6
    for _ in range(extra):
        await asyncio.sleep(0)
    assert not any(holder.done() for holder in holders)  # left running


@pytest.mark.parametrize(  # 40 shutdowns a store: 1.5 to 3 s on Redis, in the slow suite
    "store",
    [
        "redis",
        *(pytest.param(store, marks=pytest.mark.slow) for store in ("binned", "scripts")),
        pytest.param("cluster", marks=pytest.mark.slow),
    ],
)
def test_asyncio_runs_shutdown_gives_back_the_leases_of_the_tasks_it_cancels(
    request: pytest.FixtureRequest, store: str
) -> None:
    """``asyncio.run``, once its main returns, cancels every task left at once: tasks in
    their lease blocks, and the lane's driver with other tasks' calls out. A release queued
    behind that driver failed with it ("the call was cut off"), and the lease stayed held
    until it lapsed. The calls sent are answered before the driver stops, and those not
    sent go to the next driver: every lease goes back, whatever step the shutdown lands
    on. The policy's two leases go to two nodes of a cluster at once (review: a release
    over two lanes was lost when its tasks were cancelled before they ran)."""
    sync_store: SyncBackend = request.getfixturevalue(f"{store}_backend")
    peeker = Guard(sync_store, [LLM_WIDE], clock=ManualClock(START))
    lapsed = []
    for extra in range(40):
        guard = AsyncGuard(async_backend(request, store), [LLM_WIDE], clock=ManualClock(START))
        run_and_shut_down(_left_running(guard, extra), guard.aclose)
        rules = peeker.peek("llm", user="u", org="o").rules
        if held := [2 - rule.remaining for rule in rules[:2] if rule.remaining < 2]:
            lapsed.append((extra, held))
    assert lapsed == []


def test_asyncio_runs_shutdown_through_a_sync_guards_async_face_gives_every_lease_back(
    redis_server: RedisServer,
) -> None:
    """A sync Guard's async face (``@capped`` on an ``async def``, the ASGI middleware given
    a sync Guard) runs the store's calls in a worker thread. ``asyncio.run``'s shutdown
    cancelled the task waiting for that thread, the guard's own that lets a lease's calls
    finish among them, while the thread went on and the store took the lease: nobody read
    its reply, and in 8 to 17 shutdowns of 30 a lease stayed held until it lapsed (found
    by an adversarial review). The thread's calls are now waited for through every
    cancellation, as the async backends' are."""
    flush([redis_server])
    guard = Guard(RedisBackend(Redis(port=redis_server.port)), [LLM_WIDE], clock=ManualClock(START))
    face = as_async(guard)
    lapsed = []
    try:
        for extra in range(20):
            run_and_shut_down(_left_running(face, extra), _nothing)
            rules = guard.peek("llm", user="u", org="o").rules
            if held := [2 - rule.remaining for rule in rules[:2] if rule.remaining < 2]:
                lapsed.append((extra, held))
                flush([redis_server])
    finally:
        guard.close()
    assert lapsed == []


async def _nothing() -> None:
    """The face's store is the sync guard's, closed with it."""


def test_a_lease_cancelled_through_a_sync_guards_async_face_is_given_back(
    redis_server: RedisServer,
) -> None:
    """``@capped`` on an ``async def`` with a sync Guard runs the store's calls in a thread,
    which a cancellation does not stop: what the thread took goes back when it is done."""
    flush([redis_server])
    guard = Guard(RedisBackend(Redis(port=redis_server.port)), [LLM], clock=ManualClock(START))

    @capped("llm", key="user", guard=guard)
    async def call(user: str) -> None:
        await asyncio.Event().wait()

    async def main() -> None:
        for steps in range(24):
            task = asyncio.create_task(call("u"))
            for _ in range(steps):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    try:
        asyncio.run(main())
        assert guard.peek("llm", user="u").rules[0].remaining == 2
    finally:
        guard.close()
