"""Shared fixtures: a pinned clock and the matrix every behaviour test runs on: each backend
(memory, Redis, Redis Cluster) and, with :func:`make_any_guard`, each side (Guard, AsyncGuard)."""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from freqguard import AsyncGuard, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from tests import servers
from tests.servers import RedisServer

# pytest caches each test module as it rewrote its asserts, in __pycache__, unless told not
# to write bytecode: where PYTHONDONTWRITEBYTECODE is set, every run (every xdist worker)
# would rewrite 27,000 lines of tests again, ~12 s of CPU each. The cache is pytest's own.
sys.dont_write_bytecode = False

if os.environ.get("FREQGUARD_REDISPY_PUBLIC"):  # run redis-py's public fallbacks only
    from freqguard.backends import _redispy

    _redispy.PRIVATE = False

# Profiles: "default" sizes the quick run (a property test that names no count of its own
# runs 40 examples); "ci", which CI's slow job loads (``-m "slow or properties"``), raises
# every property test to five times its quick count (200 for the unnamed); "thorough", to
# thousands, for a search by hand.
settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    max_examples=40,
)
settings.register_profile("ci", parent=settings.get_profile("default"), max_examples=200)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=3000)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
settings.load_profile(PROFILE)


def examples(quick: int, thorough: int | None = None) -> int:
    """How many examples a property test runs: ``quick`` in the quick run; ``thorough``
    (default five times as many) in the "ci" profile (CI's slow job); at least the
    profile's in "thorough"; ``FREQGUARD_EXAMPLES=N`` sets it outright. (An explicit
    ``max_examples`` would otherwise override the profile.)"""
    wanted = os.environ.get("FREQGUARD_EXAMPLES")
    if wanted:
        return int(wanted)
    if PROFILE == "ci":
        return thorough if thorough is not None else 5 * quick
    if PROFILE == "thorough":
        return max(quick, settings.get_profile("thorough").max_examples)
    return quick


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every Hypothesis test is marked ``properties``: CI's slow job runs them again in the
    "ci" profile, with :func:`examples`' larger counts."""
    for item in items:
        function = getattr(item, "function", None)
        if getattr(function, "is_hypothesis_test", False):
            item.add_marker(pytest.mark.properties)


START = 1_700_000_000.0  # a realistic epoch second, so that µs values are of production size

SMS = Policy(
    "sms",
    Rule("15/minute", by="recipient", name="rcpt-1m"),
    Rule("50/day", by="recipient", name="rcpt-1d"),
    Rule("2 per 59 seconds", by=("recipient", "content"), name="content-59s"),
    Rule("5 per 59 minutes", by=("recipient", "content"), name="content-59m"),
)

GuardFactory = Callable[[Iterable[Policy]], Guard]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with servers.standalone(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    with servers.cluster(tmp_path_factory.mktemp("cluster")) as nodes:
        yield nodes


@pytest.fixture(scope="session")
def sentinel_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.SentinelGroup]:
    """A master, two replicas and three sentinels (started when first asked for). Tests that
    kill a server leave the group to the next test's ``heal()``."""
    with servers.sentinel_group(tmp_path_factory.mktemp("sentinel")) as group:
        yield group


@pytest.fixture(scope="session")
def replicated_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    """Six nodes, three primaries with a replica each (``--cluster-replicas 1``), failing a
    node over after 1 s without an answer. Tests that kill a node leave the cluster to the
    next test's ``servers.heal_cluster``."""
    with servers.cluster(
        tmp_path_factory.mktemp("replicated"), 3, replicas=1, node_timeout_ms=1000
    ) as nodes:
        yield nodes


def flush(nodes: Iterable[RedisServer]) -> None:
    for node in nodes:
        node.client.flushall()
        node.client.function_flush()


def store_nodes(request: pytest.FixtureRequest, kind: str) -> tuple[str, list[RedisServer]]:
    """A fixture parametrized over ``"redis"`` and ``"cluster"``: its URL scheme and the
    suite's nodes of that kind (the standalone server's, or the cluster's), emptied."""
    if kind == "cluster":
        nodes: list[RedisServer] = request.getfixturevalue("redis_cluster")
        scheme = "redis+cluster"
    else:
        nodes, scheme = [request.getfixturevalue("redis_server")], "redis"
    flush(nodes)
    return scheme, nodes


@pytest.fixture(scope="session")
def scripts_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A standalone server without Redis Functions (FUNCTION and FCALL renamed away)."""
    with servers.standalone(tmp_path_factory.mktemp("scripts"), *servers.NO_FUNCTIONS) as server:
        yield server


@pytest.fixture(scope="session")
def scripts_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    """A 3-master cluster without Redis Functions."""
    with servers.cluster(tmp_path_factory.mktemp("scripts-c"), extra=servers.NO_FUNCTIONS) as nodes:
        yield nodes


#: A Redis 6.2 redis-server (no Redis Functions, globals of scripts read-only since 6.2.7):
#: the store ``scripts="eval"`` is for, run for real where this names one (.ci/run builds
#: it); CI sets ``FREQGUARD_REQUIRE_REDIS_6_2`` so that its tests fail rather than skip.
REDIS_6_2 = "FREQGUARD_REDIS_6_2"


@pytest.fixture(scope="session")
def redis62_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A standalone Redis 6.2 (the binary :data:`REDIS_6_2` names)."""
    binary = os.environ.get(REDIS_6_2)
    if not binary:
        why = f"no Redis 6.2: set {REDIS_6_2} to its redis-server (.ci/run builds one)"
        if os.environ.get("FREQGUARD_REQUIRE_REDIS_6_2"):
            pytest.fail(why)
        pytest.skip(why)
    with servers.standalone(tmp_path_factory.mktemp("redis62"), binary=binary) as server:
        version = server.client.info("server")["redis_version"]
        assert str(version).startswith("6.2."), f"{binary} is Redis {version}, not 6.2"
        yield server


def flush_scripts(nodes: Iterable[RedisServer]) -> None:
    """:func:`flush` for servers without Functions: their scripts go instead."""
    for node in nodes:
        node.client.flushall()
        node.client.script_flush()


@pytest.fixture
def scripts_backend(scripts_server: RedisServer) -> Iterator[RedisBackend]:
    """A backend that finds, at its first call, that the store runs no Functions."""
    flush_scripts([scripts_server])
    backend = RedisBackend(Redis(port=scripts_server.port, socket_timeout=5))
    yield backend
    backend.close()


@pytest.fixture
def scripts_binned_backend(scripts_server: RedisServer) -> Iterator[RedisBackend]:
    """The store without Functions, records shared in bins (the binned EVAL scripts, whose
    body is the whole library; the unbinned ones leave ``lua/bins.lua`` out); db 1."""
    flush_scripts([scripts_server])
    backend = RedisBackend(Redis(port=scripts_server.port, db=1, socket_timeout=5), bins=2)
    yield backend
    backend.close()


@pytest.fixture
def scripts_cluster_backend(scripts_cluster: list[RedisServer]) -> Iterator[RedisBackend]:
    flush_scripts(scripts_cluster)
    client = RedisCluster(host="127.0.0.1", port=scripts_cluster[0].port, socket_timeout=5)
    backend = RedisBackend(client)
    yield backend
    backend.close()


@pytest.fixture
def redis_backend(redis_server: RedisServer) -> Iterator[RedisBackend]:
    flush([redis_server])
    backend = RedisBackend(Redis(port=redis_server.port, socket_timeout=5))
    yield backend
    backend.close()


@pytest.fixture
def binned_backend(redis_server: RedisServer) -> Iterator[RedisBackend]:
    """The standalone server with records shared in bins: two a policy, so that the few
    partition values of a test share them; in db 1, so that a test may use it beside
    ``redis_backend`` (a key of no partition, which no bin holds, would be shared)."""
    flush([redis_server])
    client = Redis(port=redis_server.port, db=1, socket_timeout=5)
    backend = RedisBackend(client, bins=2)
    yield backend
    backend.close()


@pytest.fixture
def cluster_backend(redis_cluster: list[RedisServer]) -> Iterator[RedisBackend]:
    flush(redis_cluster)
    client = RedisCluster(host="127.0.0.1", port=redis_cluster[0].port, socket_timeout=5)
    backend = RedisBackend(client)
    yield backend
    backend.close()


BACKENDS = ("memory", "redis", "cluster")
#: BACKENDS, and Redis with records in bins (``RedisBackend(bins=2)``)
STORES = ("memory", "redis", "binned", "cluster")


@pytest.fixture(params=STORES)
def any_store(request: pytest.FixtureRequest) -> SyncBackend:
    """Every store a sync guard runs on, bins included, each test on empty stores."""
    return store_named(request)


def store_named(request: pytest.FixtureRequest) -> SyncBackend:
    """The sync store ``request.param`` names: a new MemoryBackend, or the ``<name>_backend``
    fixture's, on empty servers."""
    if request.param == "memory":
        return MemoryBackend()
    found: SyncBackend = request.getfixturevalue(f"{request.param}_backend")
    return found


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> SyncBackend:
    """The behaviour suite runs on every backend: memory, Redis, and Redis Cluster."""
    return store_named(request)


@pytest.fixture
def make_guard(backend: SyncBackend, clock: ManualClock) -> GuardFactory:
    def make(policies: Iterable[Policy]) -> Guard:
        return Guard(backend, list(policies), clock=clock)

    return make


SIDES = ("sync", "async")


@pytest.fixture(params=SIDES)
def side(request: pytest.FixtureRequest) -> str:
    """The sync/async axis, for tests that build their own guards: ``"sync"`` (Guard) or
    ``"async"`` (AsyncGuard)."""
    return str(request.param)


@pytest.fixture
def asynchronous(side: str) -> bool:
    """:func:`side` as a flag: True for AsyncGuard."""
    return side == "async"


class Driven:
    """A Guard or an AsyncGuard, called alike: an AsyncGuard's coroutines are run to the end
    on the side's own event loop, so one test body checks both sides."""

    def __init__(self, guard: Guard | AsyncGuard, loop: asyncio.AbstractEventLoop | None) -> None:
        self.guard, self._loop = guard, loop

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.guard, name)
        loop = self._loop
        if loop is None or not inspect.iscoroutinefunction(found):
            return found
        return lambda *args, **kwargs: loop.run_until_complete(found(*args, **kwargs))


AnyGuardFactory = Callable[..., Driven]


@pytest.fixture(
    params=[(backend, side) for backend in BACKENDS for side in SIDES],
    ids=lambda param: f"{param[0]}-{param[1]}",
)
def make_any_guard(request: pytest.FixtureRequest, clock: ManualClock) -> Iterator[AnyGuardFactory]:
    """The backend x side matrix in one fixture: ``make_any_guard(policies, **options)``
    makes a :class:`Driven` guard, sync or async, on memory, Redis or Redis Cluster (each
    test on empty stores)."""
    backend, side = request.param
    loop = asyncio.new_event_loop() if side == "async" else None
    store: Any
    if backend == "memory":
        store = MemoryBackend()
    elif loop is None:
        store = request.getfixturevalue(f"{backend}_backend")
    elif backend == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        flush([server])
        store = AsyncRedisBackend(AsyncRedis(port=server.port, socket_timeout=5))
    else:
        nodes: list[RedisServer] = request.getfixturevalue("redis_cluster")
        flush(nodes)
        client = AsyncRedisCluster(host="127.0.0.1", port=nodes[0].port, socket_timeout=5)
        store = AsyncRedisBackend(client)

    def make(policies: Iterable[Policy], **options: Any) -> Driven:
        kind = Guard if loop is None else AsyncGuard
        return Driven(kind(store, list(policies), clock, **options), loop)

    yield make
    if loop is not None:
        if isinstance(store, AsyncRedisBackend):
            loop.run_until_complete(store.aclose())
        loop.close()


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads every microsecond so that unlocked read-modify-writes would interleave."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def run_and_shut_down(
    main: Coroutine[Any, Any, None], close: Callable[[], Awaitable[None]]
) -> None:
    """``asyncio.run(main)``, ``close()`` awaited at the end in the same loop (connections
    belong to their loop): main run, then what ``asyncio.run`` does once it returns (every
    task left cancelled at once, and awaited), then ``close()``."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main)
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(close())
    finally:
        loop.close()


def in_threads(worker: Callable[[int], object], count: int) -> None:
    """``worker(0)`` ... ``worker(count - 1)``, each in a thread of its own, all joined (use
    with :func:`fast_switching`)."""
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
