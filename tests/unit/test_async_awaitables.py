"""An AsyncGuard answer whose ``await`` was forgotten is not a truth value: ``if
guard.hit(...):`` raises, where a coroutine object was always true and every message
counted as sent. It is still a coroutine to asyncio, warns when never awaited, and awaiting
it costs no more per step; the sync guard's decisions stay true or false."""

from __future__ import annotations

import asyncio
import gc
import inspect
import sys
from collections.abc import Callable
from typing import Any

import pytest

from freqguard import AsyncGuard, Decision, Guard, ManualClock, MemoryBackend, Policy, Rule
from tests.conftest import START
from tests.faults import Gate

POLICY = Policy("sms", Rule("5/minute", by="recipient"))


def make_guard(backend: Any = None) -> AsyncGuard:
    return AsyncGuard(backend or MemoryBackend(), [POLICY], ManualClock(START))


#: every AsyncGuard method that answers decisions: (name, a call of it, the answer's word)
CALLS: list[tuple[str, Callable[[AsyncGuard], Any], str]] = [
    ("hit", lambda g: g.hit("sms", recipient="a"), "decision"),
    ("peek", lambda g: g.peek("sms", recipient="a"), "decision"),
    ("hit_many", lambda g: g.hit_many("sms", [{"recipient": "a"}]), "decisions"),
    ("acquire", lambda g: g.acquire("sms", recipient="a"), "decision"),
    ("refund", lambda g: g.refund("sms", recipient="a"), "decision"),
]


@pytest.mark.parametrize(("name", "call", "answer"), CALLS, ids=[c[0] for c in CALLS])
def test_an_unawaited_answer_refuses_to_be_true_or_false(
    name: str, call: Callable[[AsyncGuard], Any], answer: str
) -> None:
    pending = call(make_guard())
    message = (
        rf"^AsyncGuard\.{name}\(\.\.\.\) returns an awaitable, which is neither true nor "
        rf"false: write `{answer} = await guard\.{name}\(\.\.\.\)`$"
    )
    try:
        with pytest.raises(TypeError, match=message):
            bool(pending)
        with pytest.raises(TypeError, match=message):
            assert not pending
    finally:
        pending.close()  # never awaited, on purpose: no warning


def test_the_forgotten_await_no_longer_counts_every_message_as_sent() -> None:
    guard = make_guard()
    sent: list[str] = []

    async def send_all() -> None:
        for recipient in ["a"] * 7:
            pending = guard.hit("sms", recipient=recipient)
            try:
                if pending:  # the bug: `await` forgotten
                    sent.append(recipient)
            finally:
                pending.close()

    with pytest.raises(TypeError, match=r"await guard\.hit"):
        asyncio.run(send_all())
    assert sent == []
    assert asyncio.run(guard.peek("sms", recipient="a")).remaining == 5  # nothing ran


def test_awaited_it_answers_as_before() -> None:
    guard = make_guard()

    async def main() -> tuple[Decision, Decision, list[Decision], Decision, Decision]:
        hit = await guard.hit("sms", recipient="a")
        peek = await guard.peek("sms", recipient="a")
        many = await guard.hit_many("sms", [{"recipient": "a"}, {"recipient": "b"}])
        acquired = await guard.acquire("sms", recipient="a")
        refunded = await guard.refund(acquired)
        return hit, peek, many, acquired, refunded

    hit, peek, many, acquired, refunded = asyncio.run(main())
    assert type(hit) is Decision
    assert [hit.remaining, peek.remaining, many[0].remaining, many[1].remaining] == [4, 4, 3, 4]
    assert (acquired.remaining, refunded.remaining) == (2, 3)
    assert hit  # the decisions themselves are true or false, as ever
    assert acquired


def test_asyncio_takes_it_for_a_coroutine() -> None:
    guard = make_guard()
    pending = guard.hit("sms", recipient="a")
    assert asyncio.iscoroutine(pending)
    assert inspect.isawaitable(pending)
    pending.close()

    async def main() -> list[int]:
        task = asyncio.create_task(guard.hit("sms", recipient="a"))
        first = (await task).remaining
        both = await asyncio.gather(
            guard.hit("sms", recipient="a"), guard.peek("sms", recipient="a")
        )
        within = await asyncio.wait_for(guard.hit("sms", recipient="a"), timeout=5)
        many = await asyncio.ensure_future(guard.hit_many("sms", [{"recipient": "a"}]))
        shielded = await asyncio.shield(guard.hit("sms", recipient="a"))
        return [
            first,
            both[0].remaining,
            both[1].remaining,
            within.remaining,
            many[0].remaining,
            shielded.remaining,
        ]

    assert asyncio.run(main()) == [4, 3, 3, 2, 1, 0]
    assert asyncio.run(guard.hit("sms", recipient="a")).allowed is False  # asyncio.run too


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.TaskGroup is Python 3.11's")
def test_a_task_group_takes_it() -> None:
    guard = make_guard()

    async def main() -> list[int]:
        if sys.version_info < (3, 11):  # for mypy, which checks as Python 3.10
            raise NotImplementedError
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(guard.hit("sms", recipient="a")) for _ in range(3)]
        return sorted(task.result().remaining for task in tasks)

    assert asyncio.run(main()) == [2, 3, 4]


def test_a_task_of_it_is_cancelled_part_way_and_before_it_starts() -> None:
    gate = Gate(MemoryBackend(), hold=1)  # the first call waits in the backend
    guard = make_guard(gate)

    async def main() -> tuple[bool, bool, int]:
        under_way = asyncio.create_task(guard.hit("sms", recipient="a"))
        unstarted = asyncio.create_task(guard.hit("sms", recipient="a"))
        unstarted.cancel()  # thrown into it before its first step
        await gate.reached.wait()
        under_way.cancel()  # thrown in where it waits
        for task in (under_way, unstarted):
            with pytest.raises(asyncio.CancelledError):
                await task
        after = await guard.hit("sms", recipient="a")
        return under_way.cancelled(), unstarted.cancelled(), after.remaining

    assert asyncio.run(main()) == (True, True, 4)  # neither cancelled hit took a unit


def test_a_task_of_it_has_the_coroutines_name() -> None:
    guard = make_guard()

    async def main() -> str:
        task = asyncio.create_task(guard.hit("sms", recipient="a"))
        shown = repr(task)
        await task
        return shown

    assert "coro=<AsyncGuard.hit() running at" in asyncio.run(main())


def test_asyncio_itself_still_gets_a_coroutines_answer() -> None:
    """Python 3.12's task repr asks ``if task._coro:``: asyncio gets true, as of any
    coroutine; the callers' code gets the error."""
    pending = make_guard().hit("sms", recipient="a")
    try:
        assert eval("bool(pending)", {"__name__": "asyncio.base_tasks", "pending": pending})
        with pytest.raises(TypeError, match="returns an awaitable"):
            eval("bool(pending)", {"__name__": "app.sms", "pending": pending})
    finally:
        pending.close()


def test_never_awaited_it_still_warns() -> None:
    guard = make_guard()

    def drop() -> None:
        pending = guard.hit("sms", recipient="a")
        del pending  # never awaited
        gc.collect()

    with pytest.warns(RuntimeWarning, match=r"coroutine 'AsyncGuard\.hit' was never awaited"):
        drop()


def test_the_methods_are_still_coroutine_functions_with_their_signatures() -> None:
    guard = make_guard()

    async def hit(policy: str, cost: int = 1, **ctx: object) -> Decision:
        raise NotImplementedError

    for method in (guard.hit, AsyncGuard.hit):
        assert inspect.iscoroutinefunction(method)
        assert asyncio.iscoroutinefunction(method)
    assert inspect.signature(guard.hit) == inspect.signature(hit)
    assert AsyncGuard.hit.__qualname__ == "AsyncGuard.hit"
    assert (AsyncGuard.hit.__doc__ or "").startswith("Check and consume")


def test_the_sync_guard_answers_decisions_that_are_true_or_false() -> None:
    guard = Guard(MemoryBackend(), [Policy("one", Rule("1/minute", by="recipient"))])
    first, second = guard.hit("one", recipient="a"), guard.hit("one", recipient="a")
    assert type(first) is Decision
    assert first
    assert not second
    assert not inspect.iscoroutinefunction(Guard.hit)
    assert not hasattr(Guard.hit, "__wrapped__")  # no decorator, no wrapper: nothing in the way
