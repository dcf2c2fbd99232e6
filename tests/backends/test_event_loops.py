"""One AsyncGuard on Redis across event loops: one after another (``asyncio.run`` twice)
works; two at once is a clear freqguard error, where it was asyncio's RuntimeError or a
hang until a timeout."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from freqguard import AsyncGuard, ConfigError, MemoryBackend, Policy, Rule, async_backend_from_url
from tests.conftest import flush
from tests.servers import RedisServer

P = Policy("p", Rule("5/minute", by="u"))


@pytest.fixture(params=["redis", "cluster"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        flush([server])
        return f"{server.url}/0?socket_timeout=2"
    nodes: list[RedisServer] = request.getfixturevalue("redis_cluster")
    flush(nodes)
    return f"redis+cluster://127.0.0.1:{nodes[0].port}?socket_timeout=2"


@pytest.fixture
def other_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def test_one_loop_after_another_works(url: str) -> None:
    """Each ``asyncio.run`` closes the guard at its end (its connections belong to that
    loop, which cannot close them once it is gone); the next one reconnects."""
    guard = AsyncGuard(async_backend_from_url(url), [P])

    async def one(policy: str) -> int:
        try:
            decision = await (guard.hit(policy, u="a") if policy else guard.peek("p", u="a"))
            return decision.remaining
        finally:
            await guard.aclose()

    assert [asyncio.run(one("p")) for _ in range(3)] == [4, 3, 2]
    assert asyncio.run(one("")) == 2


def test_two_loops_at_once_is_a_clear_error(
    url: str, other_loop: asyncio.AbstractEventLoop
) -> None:
    guard = AsyncGuard(async_backend_from_url(url), [P])
    there = asyncio.run_coroutine_threadsafe(guard.hit("p", u="b"), other_loop)
    assert there.result(timeout=10).allowed  # the backend now serves that loop

    async def here() -> None:
        await guard.hit("p", u="b")

    with pytest.raises(ConfigError, match=r"one event loop at a time.*per event loop"):
        asyncio.run(asyncio.wait_for(here(), timeout=10))
    # the loop it serves is unharmed
    again = asyncio.run_coroutine_threadsafe(guard.hit("p", u="b"), other_loop)
    assert again.result(timeout=10).allowed
    asyncio.run_coroutine_threadsafe(guard.aclose(), other_loop).result(timeout=10)


def test_the_memory_backend_serves_any_loop(other_loop: asyncio.AbstractEventLoop) -> None:
    guard = AsyncGuard(MemoryBackend(), [P])
    there = asyncio.run_coroutine_threadsafe(guard.hit("p", u="c"), other_loop)
    assert there.result(timeout=10).allowed
    assert asyncio.run(guard.hit("p", u="c")).allowed
