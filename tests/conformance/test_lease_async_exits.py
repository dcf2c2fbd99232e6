"""Leases on the async side under exits the other lease tests left out, each a failing test
of an adversarial pass before its fix: a lease is given back exactly once, whatever way its
holder leaves, and not before its call has ended (docs/strategies/concurrency.md, "Calls
and requests in flight": a capped generator's lease is "given back when it ends, raises
or is closed").

Time is pinned (``ManualClock``): no lease lapses while a test runs, so what ``peek``
reports held is held. The stores are ``lease_rig.py``'s."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from freqguard import AsyncGuard, Guard, ManualClock, MemoryBackend, capped
from tests.conformance.lease_rig import LLM, async_backend
from tests.conftest import START


def _run_to_its_end(
    main: Coroutine[Any, Any, None], finish: Callable[[], Awaitable[None]]
) -> list[object]:
    """``main`` run as ``asyncio.run`` runs it, its end too (every task left cancelled, then
    every async generator left open closed at once: ``loop.shutdown_asyncgens``), then
    ``finish()`` in the same loop (connections belong to their loop). Returns what the loop
    reported as errors nobody handled."""
    reported: list[object] = []
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _, context: reported.append(context.get("exception")))
    try:
        loop.run_until_complete(main)
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(finish())
    finally:
        loop.close()
    return reported


@pytest.mark.parametrize("in_task", [False, True], ids=["suspended", "in-a-task"])
@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_capped_async_generator_open_at_asyncio_runs_end_ends_its_body_then_its_lease(
    request: pytest.FixtureRequest, store: str, in_task: bool
) -> None:
    """A capped async generator left open when ``asyncio.run`` ends (a stream whose consumer
    stopped without closing it): the loop closes every async generator it saw first
    iterated, at once, and saw the body's generator besides the capped wrapper. Both were
    closed together: one close failed ("aclose(): asynchronous generator is already
    running", reported to the loop as an error an uncapped generator never makes), and
    when the body's came first, the wrapper gave the lease back while the body's
    ``finally`` still ran. The wrapper alone closes its body now, then gives the lease
    back: held as the body ends, free after, nothing reported.

    In a task: the stream a task iterates, the task cancelled at the end, is closed when it
    is collected, by a task the loop's end never waits for (it waits for the generators it
    closes): on Redis the store was closed after the end with the release still out, and
    the lease stayed held. The loop's end now waits for that close too."""
    backend = async_backend(request, store)
    guard = AsyncGuard(backend, [LLM], clock=ManualClock(START))
    held: list[int] = []  # as the body's finally ends, then after the end

    async def leases() -> int:
        return 2 - (await guard.peek("llm", user="u")).rules[0].remaining

    @capped("llm", key="user", guard=guard)
    async def stream(user: str) -> Any:
        try:
            yield 1
            yield 2
        finally:
            await asyncio.sleep(0)  # a body's own cleanup: it awaits
            held.append(await leases())

    kept: list[object] = []
    inside = asyncio.Event()

    async def consume() -> None:
        async for _ in stream("u"):
            inside.set()
            await asyncio.Event().wait()  # cancelled here at the end, the stream left open

    async def main() -> None:
        if in_task:
            kept.append(asyncio.create_task(consume()))
            await inside.wait()
            return
        opened = stream("u")
        kept.append(opened)  # suspended, never closed: the end closes it
        await opened.__anext__()

    async def finish() -> None:
        held.append(await leases())
        await backend.aclose()

    reported = _run_to_its_end(main(), finish)
    assert (held, reported) == ([1, 0], [])


@pytest.mark.parametrize("in_task", [False, True], ids=["suspended", "in-a-task"])
def test_a_capped_async_generator_open_at_asyncio_runs_end_reports_nothing(in_task: bool) -> None:
    """The same under ``asyncio.run`` itself, on the memory store: nothing reported, the
    lease free (in a task, the body's cleanup of five awaits outlasted the loop's end)."""
    backend = MemoryBackend()
    guard = AsyncGuard(backend, [LLM], clock=ManualClock(START))
    reported: list[object] = []

    @capped("llm", key="user", guard=guard)
    async def stream(user: str) -> Any:
        try:
            yield 1
        finally:
            for _ in range(5):
                await asyncio.sleep(0)

    kept: list[object] = []

    async def consume() -> None:
        async for _ in stream("u"):
            await asyncio.Event().wait()

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: reported.append(context.get("exception"))
        )
        if in_task:
            kept.append(asyncio.create_task(consume()))
            for _ in range(5):
                await asyncio.sleep(0)
            return
        opened = stream("u")
        kept.append(opened)
        await opened.__anext__()

    asyncio.run(main())
    free = Guard(backend, [LLM], clock=ManualClock(START)).peek("llm", user="u")
    assert (reported, free.rules[0].remaining) == ([], 2)


@pytest.mark.parametrize("first", ["allowed", "denied"])
def test_a_lease_block_that_ended_can_be_entered_again(first: str) -> None:
    """A block is one ``with`` at a time (docs/strategies/concurrency.md), so one that has
    ended may be entered again, as an ``asyncio.Semaphore`` is (a retry of a denied block,
    a block kept for a loop's calls): it was refused "for one `with` at a time" though
    nobody was in it, its one-`with` lock never let go once a take had answered. Each
    entry takes its own lease and its exit gives back that one, once: a lease taken
    beside them (at the same µs) stays held."""

    async def main() -> tuple[list[bool], int]:
        guard = AsyncGuard(policies=[LLM], clock=ManualClock(START))
        beside = await guard.take_lease("llm", user="u")
        other = await guard.take_lease("llm", user="u") if first == "denied" else None
        block = guard.lease("llm", user="u")
        seen: list[bool] = []
        async with block as decision:
            seen.append(decision.allowed)
        if other is not None:
            await guard.release(other)
        for _ in range(2):
            async with block as decision:
                seen.append(decision.allowed)
                assert (await guard.peek("llm", user="u")).rules[0].remaining == 0
        assert beside.allowed
        return seen, (await guard.peek("llm", user="u")).rules[0].remaining

    assert asyncio.run(main()) == ([first == "allowed", True, True], 1)


def test_a_sync_lease_block_that_ended_can_be_entered_again() -> None:
    """The sync copy: a block entered again once it ended takes and gives back its own."""
    guard = Guard(policies=[LLM], clock=ManualClock(START))
    guard.take_lease("llm", user="u")
    block = guard.lease("llm", user="u")
    seen = []
    for _ in range(3):
        with block as decision:
            seen.append(decision.allowed)
            assert guard.peek("llm", user="u").rules[0].remaining == 0
    assert (seen, guard.peek("llm", user="u").rules[0].remaining) == ([True] * 3, 1)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_lease_block_whose_entry_was_interrupted_after_its_take_may_be_entered_again(
    face: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C just after a block's take: the entry gives the lease back and raises; the
    block, nobody in it, may then be entered again (it stayed locked: "one `with` at a
    time" for good). Each entry's lease goes back once: the capacity is whole after."""
    import freqguard._async.leases as async_leases
    import freqguard._sync.leases as sync_leases

    module: Any = sync_leases if face == "sync" else async_leases
    real = module.take

    def interrupted_sync(*args: Any) -> Any:
        real(*args)  # the take answered (``taken`` filled), then the Ctrl-C
        raise KeyboardInterrupt

    async def interrupted_async(*args: Any) -> Any:
        await real(*args)
        raise KeyboardInterrupt

    if face == "sync":
        guard = Guard(policies=[LLM], clock=ManualClock(START))
        block = guard.lease("llm", user="u")
        monkeypatch.setattr(module, "take", interrupted_sync)
        with pytest.raises(KeyboardInterrupt), block:
            pass
        monkeypatch.setattr(module, "take", real)
        assert guard.peek("llm", user="u").rules[0].remaining == 2
        with block as decision:
            assert decision.allowed
        assert guard.peek("llm", user="u").rules[0].remaining == 2
        return

    async def main() -> None:
        guard = AsyncGuard(policies=[LLM], clock=ManualClock(START))
        block = guard.lease("llm", user="u")
        monkeypatch.setattr(module, "take", interrupted_async)
        with pytest.raises(KeyboardInterrupt):
            async with block:
                pass
        monkeypatch.setattr(module, "take", real)
        assert (await guard.peek("llm", user="u")).rules[0].remaining == 2
        async with block as decision:
            assert decision.allowed
        assert (await guard.peek("llm", user="u")).rules[0].remaining == 2

    asyncio.run(main())
