"""A newcomer's likely mistakes fail where they are made (construction), not at the first hit,
with a message that says what to do instead."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis.asyncio

from freqguard import (
    AsyncGuard,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from tests.servers import RedisServer

POLICY = Policy("p", Rule("5/minute", by="user"))


@pytest.fixture
def async_redis_backend(redis_server: RedisServer) -> Iterator[AsyncRedisBackend]:
    backend = AsyncRedisBackend(redis.asyncio.Redis(port=redis_server.port))
    yield backend
    asyncio.run(backend.aclose())


def test_an_async_only_backend_is_refused_by_guard(
    async_redis_backend: AsyncRedisBackend,
) -> None:
    with pytest.raises(
        TypeError,
        match=r"Guard needs a sync backend \(with execute, execute_many, close and clock\)"
        r".*AsyncRedisBackend.*AsyncGuard",
    ):
        Guard(async_redis_backend, [POLICY])  # type: ignore[arg-type]  # mypy sees it too


def test_a_sync_only_backend_is_refused_by_async_guard(redis_backend: RedisBackend) -> None:
    with pytest.raises(
        TypeError,
        match=r"AsyncGuard needs an async backend \(with aexecute, aexecute_many, aclose and"
        r" clock\).*RedisBackend.*Guard",
    ):
        AsyncGuard(redis_backend, [POLICY])  # type: ignore[arg-type]


def test_the_memory_backend_serves_both() -> None:
    memory = MemoryBackend()
    assert Guard(memory, [POLICY]).hit("p", user="u").allowed
    assert asyncio.run(AsyncGuard(memory, [POLICY]).hit("p", user="u")).remaining == 3


@pytest.mark.parametrize("guard_class", [Guard, AsyncGuard])
@pytest.mark.parametrize(
    ("first", "message"),
    [
        ([POLICY], r"got a list of policies: pass policies=\[\.\.\.\]"),
        ((POLICY,), r"got a tuple of policies: pass policies=\[\.\.\.\]"),
        (POLICY, r"got a Policy: pass policies=\[\.\.\.\]"),
        ("redis://localhost:6379", r"got the string 'redis://localhost:6379'.*backend_from_url"),
        (42, r"got 42"),
    ],
)
def test_the_first_argument_is_the_backend(
    guard_class: type[Guard | AsyncGuard], first: object, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        guard_class(first)  # type: ignore[arg-type]


@pytest.mark.parametrize("guard_class", [Guard, AsyncGuard])
def test_a_single_policy_must_come_in_a_list(guard_class: type[Guard | AsyncGuard]) -> None:
    with pytest.raises(TypeError, match=r"policies=\[policy\]"):
        guard_class(MemoryBackend(), POLICY)  # type: ignore[arg-type]


def test_manual_clock_refuses_to_go_back() -> None:
    clock = ManualClock(100)
    clock.set(100)  # staying put is fine
    clock.set(150.5)
    with pytest.raises(ConfigError, match=r"ManualClock.set\(120\).*earlier than now \(150.5\)"):
        clock.set(120)
    assert clock.now() == 150.5  # unchanged


def test_manual_clock_refuses_to_advance_backwards() -> None:
    clock = ManualClock(100)
    with pytest.raises(ConfigError, match=r"advance takes seconds >= 0 \(or a timedelta\), got -1"):
        clock.advance(-1)
    assert clock.now() == 100


def test_the_redis_backends_work_with_their_own_guards(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    """The checks accept what the protocols promise: no false alarms on the real backends."""
    assert Guard(redis_backend, [POLICY]).hit("p", user="u").allowed

    async def main() -> int:
        async with AsyncGuard(
            AsyncRedisBackend(redis.asyncio.Redis(port=redis_server.port)), [POLICY]
        ) as guard:
            return (await guard.hit("p", user="u")).remaining

    assert asyncio.run(main()) == 3


NO_REDIS = """
import importlib.abc, importlib.machinery, sys

class Missing(importlib.abc.Loader):
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        raise ModuleNotFoundError("No module named 'redis'", name="redis")

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "redis" or name.startswith("redis."):
            return importlib.machinery.ModuleSpec(name, Missing())
        return None

sys.meta_path.insert(0, Block())
try:
    from freqguard import RedisBackend
except ImportError as exc:
    print(type(exc).__name__, exc)
"""


def test_the_redis_backends_without_the_extra_say_how_to_get_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_REDIS], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == (
        "ImportError freqguard's Redis backends need redis-py, an optional extra: "
        "pip install -e '.[redis]' in a checkout of freqguard (it is not on PyPI yet)"
    )


def test_a_backend_for_the_other_guard_says_so_first() -> None:
    with pytest.raises(TypeError) as raised:
        Guard(AsyncRedisBackend(redis.asyncio.Redis(port=1)))  # type: ignore[arg-type]
    message = str(raised.value)
    assert "got AsyncRedisBackend, which serves AsyncGuard, not Guard" in message
    assert "from a URL: backend_from_url" in message  # found by a new user's first hour
    assert len(message) < 300


@pytest.mark.parametrize(
    ("contexts", "said"),
    [
        ({"user": "u"}, r"hit_many takes a list of contexts .* got one dict"),
        ("user=u", r"hit_many takes a list of contexts .* got one str"),
        (["user=u"], r"hit_many's context 0 must be a dict of dimension values, got str"),
        ([{"user": "u"}, None], r"context 1 must be a dict .* got NoneType"),
    ],
)
def test_hit_many_given_the_wrong_shape_says_what_it_takes(contexts: object, said: str) -> None:
    """Found by a new user's first hour: one dict, or a list of strings, raised an
    AttributeError from inside the guard."""
    guard = Guard(MemoryBackend(), [Policy("p", Rule("5/minute", by="user"))])
    with pytest.raises(ConfigError, match=said):
        guard.hit_many("p", contexts)  # type: ignore[arg-type]
    assert guard.peek("p", user="u").remaining == 5  # nothing counted
