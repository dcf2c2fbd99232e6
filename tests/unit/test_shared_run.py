"""Work that callers arriving together do once (the backends' first-call inspection and
library loads): threads and tasks that ask while a run is under way share it."""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading

import pytest

from freqguard.backends._shared_run import AsyncSharedRun, SharedRun

_LOCK_LINE = next(
    start + n
    for lines, start in [inspect.getsourcelines(SharedRun.run)]
    for n, line in enumerate(lines)
    if "with self._lock" in line
)


def _waits_for_the_lock(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident or 0)
    return (
        frame is not None
        and frame.f_code is SharedRun.run.__code__
        and frame.f_lineno == _LOCK_LINE
    )


def test_threads_that_wait_for_a_run_share_it() -> None:
    shared, runs = SharedRun(), []
    inside, release = threading.Event(), threading.Event()

    def first() -> None:
        runs.append("first")
        inside.set()
        assert release.wait(10)

    owner = threading.Thread(target=shared.run, args=(first,))
    owner.start()
    assert inside.wait(10)
    waiter = threading.Thread(target=shared.run, args=(lambda: runs.append("waiter"),))
    waiter.start()
    for _ in range(100_000):  # bounded: the waiter blocks on the lock the first run holds
        if _waits_for_the_lock(waiter):
            break
    else:
        raise AssertionError("the waiter never reached the lock")
    release.set()
    owner.join(10)
    waiter.join(10)
    assert runs == ["first"]
    shared.run(lambda: runs.append("later"))  # a caller after the run: a run of its own
    assert runs == ["first", "later"]


def test_a_failed_run_is_its_callers_and_the_next_caller_runs_again() -> None:
    shared, runs = SharedRun(), []

    def fail() -> None:
        raise RuntimeError("down")

    with pytest.raises(RuntimeError):
        shared.run(fail)
    shared.run(lambda: runs.append("again"))
    assert runs == ["again"]


def test_tasks_share_one_run_and_a_cancelled_one_does_not_cancel_it() -> None:
    async def main() -> None:
        shared, runs = AsyncSharedRun(), []
        started, release = asyncio.Event(), asyncio.Event()

        async def work() -> None:
            runs.append("run")
            started.set()
            await release.wait()

        tasks = [asyncio.ensure_future(shared.run(work)) for _ in range(3)]
        await started.wait()  # the first task's run is under way; the others await it
        tasks[0].cancel()
        release.set()
        await asyncio.gather(*tasks[1:])
        assert tasks[0].cancelled()
        assert runs == ["run"]
        await shared.run(work)  # after it finished: a run of its own
        assert runs == ["run", "run"]

    asyncio.run(asyncio.wait_for(main(), 10))
