"""A cancelled operation leaves nothing behind: what its earlier calls consumed goes back, and
so does what its call under way consumed when the store answers it after the cancellation.

A :class:`Gate` holds one call of the operation (the first call passes through to the real
store, a later one waits on an event) so that the caller's task is cancelled exactly there,
with no sleep and no race: as ``asyncio.wait_for`` or a client disconnect would cancel it.
On a real Redis server, and on the memory backend.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from redis.asyncio import Redis as AsyncRedis

from freqguard import (
    AsyncGuard,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    backend_from_url,
)
from freqguard.backends.redis import AsyncRedisBackend
from freqguard.decorators.adapters import as_async
from freqguard.script.calls import Reply, ScriptCall
from tests.conftest import flush
from tests.faults import Gate
from tests.servers import RedisServer

# rules that share no dimension: one part each, two calls a hit
TWO = Policy("two", Rule("2/minute", by="r", name="per-r"), Rule("5/minute", by="c", name="per-c"))
ONE = Policy("one", Rule("3/minute", by="r", name="per-r"))


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> str:
    if request.param == "redis":
        flush([request.getfixturevalue("redis_server")])
    name: str = request.param
    return name


def _inner(store: str, server: RedisServer | None) -> Any:
    if store == "memory":
        return MemoryBackend()
    assert server is not None
    return AsyncRedisBackend(AsyncRedis(port=server.port))


def _server(request: pytest.FixtureRequest, store: str) -> RedisServer | None:
    return request.getfixturevalue("redis_server") if store == "redis" else None


async def _cancel_at_the_gate(gate: Gate, work: Any) -> None:
    """Run ``work`` until the gate holds its call, cancel it there, then let the call go on
    (its answer comes after the cancellation)."""
    task = asyncio.ensure_future(work)
    await gate.reached.wait()
    task.cancel()
    await asyncio.sleep(0)  # the cancellation is delivered before the call goes on
    gate.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _remaining(guard: AsyncGuard, policy: str, **ctx: Any) -> list[int]:
    return [state.remaining for state in (await guard.peek(policy, **ctx)).rules]


@pytest.mark.parametrize("sent_first", [False, True])
def test_a_hit_cancelled_on_its_second_part_gives_back_the_first(
    request: pytest.FixtureRequest, store: str, sent_first: bool
) -> None:
    """Cancelled while its second call is out (not yet sent, or sent and answered after the
    cancellation): every part is as it was, where the first part's unit was lost."""

    async def main() -> list[int]:
        gate = Gate(_inner(store, _server(request, store)), hold=2, sent_first=sent_first)
        guard = AsyncGuard(gate, [TWO], clock=ManualClock(1000))
        await _cancel_at_the_gate(gate, guard.hit("two", r="bob", c="hello"))
        left = await _remaining(guard, "two", r="bob", c="hello")
        await guard.aclose()
        return left

    assert asyncio.run(main()) == [2, 5]


def test_a_hit_cancelled_through_wait_for_gives_back_what_it_took(
    request: pytest.FixtureRequest, store: str
) -> None:
    async def main() -> list[int]:
        gate = Gate(_inner(store, _server(request, store)), hold=2)
        guard = AsyncGuard(gate, [TWO], clock=ManualClock(1000))
        bounded = asyncio.wait_for(guard.hit("two", r="bob", c="hello"), timeout=3600)
        await _cancel_at_the_gate(gate, bounded)
        left = await _remaining(guard, "two", r="bob", c="hello")
        await guard.aclose()
        return left

    assert asyncio.run(main()) == [2, 5]


@pytest.mark.parametrize(("policy", "hold"), [("two", 4), ("one", 1)])
def test_a_batch_cancelled_midway_leaves_nothing_behind(
    request: pytest.FixtureRequest, store: str, policy: str, hold: int
) -> None:
    """``hit_many``: on two parts, two contexts decided and the third's first call out; on
    one, the whole batch out and answered after the cancellation. The caller never sees
    those decisions: what they took goes back."""

    async def main() -> list[list[int]]:
        gate = Gate(_inner(store, _server(request, store)), hold=hold, sent_first=True)
        guard = AsyncGuard(gate, [TWO, ONE], clock=ManualClock(1000))
        contexts = [{"r": f"u{n}", "c": f"text{n}"} for n in range(3)]
        if policy == "one":
            contexts = [{"r": f"u{n}"} for n in range(3)]
        await _cancel_at_the_gate(gate, guard.hit_many(policy, contexts))
        left = [await _remaining(guard, policy, **ctx) for ctx in contexts]
        await guard.aclose()
        return left

    full = [2, 5] if policy == "two" else [3]
    assert asyncio.run(main()) == [full] * 3


def test_an_acquire_cancelled_on_its_second_part_gives_back_the_first(
    request: pytest.FixtureRequest, store: str
) -> None:
    async def main() -> list[int]:
        gate = Gate(_inner(store, _server(request, store)), hold=2, sent_first=True)
        guard = AsyncGuard(gate, [TWO], clock=ManualClock(1000))
        await _cancel_at_the_gate(gate, guard.acquire("two", timeout=1, r="bob", c="hi"))
        left = await _remaining(guard, "two", r="bob", c="hi")
        await guard.aclose()
        return left

    assert asyncio.run(main()) == [2, 5]


class _ThreadGate:
    """A sync backend that holds its ``hold``-th batch in its worker thread until released."""

    def __init__(self, inner: Any, hold: int) -> None:
        self.inner, self.hold, self.clock = inner, hold, inner.clock
        self.batches = 0
        self.reached = threading.Event()
        self.release = threading.Event()

    def execute(self, call: ScriptCall) -> Reply:
        return self.execute_many([call])[0]

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        self.batches += 1
        if self.batches == self.hold:
            self.reached.set()
            assert self.release.wait(10)
        replies: list[Reply] = self.inner.execute_many(calls)
        return replies

    def close(self) -> None:
        self.inner.close()


def test_through_async_view_the_cancelled_hit_is_given_back_once_its_thread_is_done(
    redis_server: RedisServer,
) -> None:
    """An async face runs a sync backend's calls in worker threads, which a cancellation
    cannot stop: the second part's call runs to its end after the caller is gone. What it
    and the first took both go back."""
    flush([redis_server])
    gate = _ThreadGate(backend_from_url(redis_server.url), hold=2)
    guard = Guard(gate, [TWO], clock=ManualClock(1000))
    view = as_async(guard)

    async def main() -> None:
        task = asyncio.ensure_future(view.hit("two", r="bob", c="hello"))
        assert await asyncio.to_thread(gate.reached.wait, 10)  # the worker thread is there
        task.cancel()
        gate.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [s.remaining for s in guard.peek("two", r="bob", c="hello").rules] == [2, 5]
    guard.close()
