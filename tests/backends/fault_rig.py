"""The rig of the fault tests (``test_faults.py``, ``test_fault_replies.py``): this suite's
own standalone server and 3-master cluster (never the session's: the tests stop and kill
them), a guard on either by ``on_error``, its breaker on a manual clock, and a tally of what
it decided. The fixtures are the backends folder's (``conftest.py`` imports them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from freqguard.failure import Breaker
from tests import servers
from tests.conftest import flush
from tests.faults import (
    AsyncDriver,
    Tally,
    restart,
)
from tests.servers import RedisServer

TIMEOUT = 0.2  # the clients' socket timeouts: what each call to a hung server costs
FAILURES = 3  # the breaker opens after this many consecutive failures
COOLDOWN = 5.0  # ... for this long, on the test's clock
HITS = 200
CAP = 5
P = Policy("p", Rule(f"{CAP}/day", by="r", name="daily"))
DEGRADED = {"allow": "fail-open", "deny": "fail-closed", "fallback": "fallback"}


@pytest.fixture(scope="module")
def redis_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    with servers.standalone(tmp_path_factory.mktemp("faults")) as server:
        yield [server]


@pytest.fixture(scope="module")
def cluster_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    with servers.cluster(tmp_path_factory.mktemp("faults-cluster")) as nodes:
        for node in nodes:
            # a node stopped or killed for longer than this is failed by the others, and the
            # whole cluster refuses calls until it is back: not the fault under test here
            node.client.config_set("cluster-node-timeout", 120_000)
        yield nodes


@pytest.fixture(params=["redis", "cluster"])
def nodes(request: pytest.FixtureRequest) -> Iterator[list[RedisServer]]:
    """This module's standalone server or cluster, emptied; any node a failed test left dead
    is started again afterwards."""
    found: list[RedisServer] = request.getfixturevalue(f"{request.param}_nodes")
    flush(found)
    yield found
    for node in found:
        if node.process.poll() is not None:
            restart(node, found if len(found) > 1 else None)


def url(nodes: list[RedisServer], timeout: float = TIMEOUT) -> str:
    scheme = "redis" if len(nodes) == 1 else "redis+cluster"
    query = f"socket_timeout={timeout}&socket_connect_timeout={timeout}"
    return f"{scheme}://127.0.0.1:{nodes[0].port}/0?{query}"


@dataclass
class Client:
    """A guard on the store under test (a Guard, or an AsyncGuard behind an AsyncDriver:
    the same calls), its breaker on a manual clock, and a tally of what it decided."""

    guard: Any
    breaker: Breaker
    clock: ManualClock
    tally: Tally
    fallback: MemoryBackend | None


Connect = Callable[..., Client]


@pytest.fixture(params=["sync", "async"])
def connect(request: pytest.FixtureRequest, nodes: list[RedisServer]) -> Iterator[Connect]:
    """Make a :class:`Client` by ``on_error`` ("fallback": a new MemoryBackend)."""
    made: list[Client] = []

    def make(
        on_error: str, policies: tuple[Policy, ...] = (P,), timeout: float = TIMEOUT
    ) -> Client:
        clock, tally = ManualClock(), Tally()
        breaker = Breaker(FAILURES, COOLDOWN, clock=clock.now)
        fallback = MemoryBackend() if on_error == "fallback" else None
        how: Any = on_error if fallback is None else fallback
        options: dict[str, Any] = {"on_error": how, "breaker": breaker, "observers": [tally]}
        guard: Any
        if request.param == "sync":
            guard = Guard(backend_from_url(url(nodes, timeout)), policies, **options)
        else:
            backend = async_backend_from_url(url(nodes, timeout))
            guard = AsyncDriver(AsyncGuard(backend, policies, **options))
        made.append(Client(guard, breaker, clock, tally, fallback))
        return made[-1]

    yield make
    for client in made:
        client.guard.close()


def store_admissions(client: Client, **ctx: str) -> int:
    """Hit until the store denies (at most twice the cap): how many it admitted."""
    admitted = 0
    for _ in range(2 * CAP):
        decision = client.guard.hit("p", **ctx)
        assert decision.source == "backend"
        if not decision.allowed:
            return admitted
        admitted += 1
    raise AssertionError(f"the store admitted {admitted} hits of a cap of {CAP}")
