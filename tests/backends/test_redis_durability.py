"""``wait_replicas``: a write is answered only once that many replicas hold it (Redis WAIT,
sent behind the calls on their connection). On real processes: a master and its replica,
the replica hung (SIGSTOP) to show the WAIT is there, sync and async, on every path that
writes (the one-call hit, batches, refunds, resets, a single-connection client).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    RedisBackend,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from freqguard.backends._boundary import Unreplicated
from freqguard.failure import Breaker
from tests import servers
from tests.conftest import flush
from tests.faults import AsyncDriver, stopped
from tests.servers import RedisServer

pytestmark = pytest.mark.slow  # replicas and WAIT: a replicated cluster, timeouts

WAIT = 0.3  # seconds a write waits for its replica: a hung one costs each call this; a
# running one on a loaded machine (the slow suite beside it) answers well within it
P = Policy("p", Rule("5/day", by="r", strategy="fixed-window", name="daily"))
TWO = Policy("two", Rule("5/day", by="r", name="per-r"), Rule("9/day", by="c", name="per-c"))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A master and one replica of it, linked and caught up."""
    workdir = tmp_path_factory.mktemp("durability")
    with servers.standalone(workdir) as master:
        replica = RedisServer(workdir, "--replicaof", "127.0.0.1", str(master.port))
        try:
            servers.wait_for(
                lambda: (
                    master.client.info("replication")["connected_slaves"] == 1
                    and replica.client.info("replication")["master_link_status"] == "up"
                ),
                "the replica's link",
            )
            yield master, replica
        finally:
            replica.stop()


@pytest.fixture
def master(pair: tuple[RedisServer, RedisServer]) -> RedisServer:
    flush([pair[0]])
    return pair[0]


@pytest.fixture
def replica(pair: tuple[RedisServer, RedisServer]) -> RedisServer:
    return pair[1]


def _url(server: RedisServer, replicas: int = 1) -> str:
    return f"{server.url}/0?wait_replicas={replicas}&wait_timeout={WAIT}&socket_timeout=1"


@pytest.fixture(params=["sync", "async"])
def guard_of(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """Make a guard on a URL (async: behind an AsyncDriver, the same calls)."""
    made: list[Any] = []

    def make(url: str, **options: Any) -> Any:
        options.setdefault("breaker", None)
        if request.param == "sync":
            made.append(Guard(backend_from_url(url), [P, TWO], **options))
        else:
            backend = async_backend_from_url(url)
            made.append(AsyncDriver(AsyncGuard(backend, [P, TWO], **options)))
        return made[-1]

    yield make
    for guard in made:
        guard.close()


def _not_replicated(error: BackendUnavailable) -> bool:
    """Applied on the master (sent, with its reply kept), counted by the breaker."""
    applied = error.applied is not None and error.applied.allowed
    return isinstance(error.__cause__, Unreplicated) and applied and not error.answered


def test_without_a_replica_to_acknowledge_every_admission_fails_and_the_rest_still_work(
    master: RedisServer, replica: RedisServer, guard_of: Callable[..., Any]
) -> None:
    guard = guard_of(_url(master))
    kept = guard.hit("p", r="a")
    assert kept.allowed
    with stopped(replica):
        admissions: list[Callable[[], object]] = [
            lambda: guard.hit("p", r="a"),
            lambda: guard.hit_many("p", [{"r": "a"}, {"r": "b"}]),
            lambda: guard.hit("two", r="a", c="x"),
        ]
        for admission in admissions:
            with pytest.raises(BackendUnavailable, match="replicas acknowledged") as caught:
                admission()
            errors = getattr(caught.value, "errors", None) or [caught.value]
            assert all(_not_replicated(error) for error in errors)
        # a refund or reset that a failover loses leaves units taken (the strict side): it
        # waits for no replica, nor does a read
        assert guard.refund(kept).source == "backend"
        guard.reset("p", r="b")
        peeked = guard.peek("p", r="a")
        # the master applied what it could not replicate: three hits of "a" counted, and
        # the refund of one given back
        assert (peeked.source, peeked.remaining) == ("backend", 5 - 3 + 1)
        assert guard.peek("p", r="b").remaining == 5
    assert guard.hit("p", r="c").allowed  # the replica is back: admissions are answered again


def test_with_its_replica_up_a_write_is_answered_once_the_replica_holds_it(
    master: RedisServer, replica: RedisServer, guard_of: Callable[..., Any]
) -> None:
    guard = guard_of(_url(master))
    for n in range(20):
        assert guard.hit("p", r=f"u{n}").allowed
        (key,) = master.client.keys(f"*{{u{n}}}*")
        assert replica.client.exists(key)  # acknowledged: the replica has it already
    assert [d.allowed for d in guard.hit_many("p", [{"r": "v"}] * 6)] == [True] * 5 + [False]


def test_on_error_answers_an_unreplicated_write(
    master: RedisServer, replica: RedisServer, guard_of: Callable[..., Any]
) -> None:
    guard = guard_of(_url(master), on_error="deny")
    with stopped(replica):
        decisions = [guard.hit("p", r="a") for _ in range(3)]
    assert [(d.source, d.allowed) for d in decisions] == [("fail-closed", False)] * 3
    assert guard.hit("p", r="a").remaining == 5 - 4  # denied, yet counted on the master


@pytest.mark.parametrize("on_error", ["allow", "deny", "fallback"])
def test_a_denial_needs_no_acknowledgement_whatever_on_error_says(
    master: RedisServer, replica: RedisServer, guard_of: Callable[..., Any], on_error: str
) -> None:
    """A hit the master denied wrote nothing: there is nothing for a replica to hold, so a
    lagging replica must not turn it into a store failure (which ``on_error="allow"`` would
    admit, and a fallback re-decide on its own empty state)."""
    how: object = MemoryBackend() if on_error == "fallback" else on_error
    guard = guard_of(_url(master), on_error=how)
    assert [guard.hit("p", r="a").allowed for _ in range(5)] == [True] * 5  # the day's 5
    with stopped(replica):
        denied = [guard.hit("p", r="a") for _ in range(4)]
        batch = guard.hit_many("p", [{"r": "a"}] * 3)
    for decision in [*denied, *batch]:
        assert (decision.allowed, decision.source) == (False, "backend")
        assert [rule.id for rule in decision.denied_by] == ["daily"]
    assert guard.peek("p", r="a").remaining == 0


def test_a_denial_on_one_slot_of_two_is_answered_by_the_store(
    master: RedisServer, replica: RedisServer, guard_of: Callable[..., Any]
) -> None:
    guard = guard_of(_url(master), on_error="allow")
    for n in range(9):  # rule per-c of c="full" is used up by nine recipients
        assert guard.hit("two", r=f"u{n}", c="full").allowed
    with stopped(replica):
        decision = guard.hit("two", r="new", c="full")
    assert (decision.allowed, decision.source) == (False, "backend")
    assert [rule.id for rule in decision.denied_by] == ["per-c"]


def test_unreplicated_writes_open_the_breaker_so_each_stops_costing_a_wait(
    master: RedisServer, replica: RedisServer, guard_of: Callable[..., Any]
) -> None:
    """A master whose writes cannot reach their replicas fails what ``wait_replicas`` asks
    for, every write after a ``wait_timeout``: the breaker counts it as a failure of that
    node, and while it is open ``on_error`` answers at once."""
    clock = ManualClock(1000.0)
    breaker = Breaker(failures=2, cooldown=5, clock=clock)
    guard = guard_of(_url(master), on_error="deny", breaker=breaker)
    with stopped(replica):
        assert [guard.hit("p", r=f"n{n}").source for n in range(3)] == ["fail-closed"] * 3
        assert breaker.state == "open"
    clock.advance(5)  # the probe finds the replica back: closed again
    assert guard.hit("p", r="probe").allowed
    assert breaker.state == "closed"


def test_a_single_connection_client_waits_for_its_replica_too(
    master: RedisServer, replica: RedisServer
) -> None:
    client = redis.Redis(
        port=master.port,
        socket_timeout=1,
        single_connection_client=True,
        retry=Retry(NoBackoff(), 0),  # one that retries is refused: it would count twice
    )
    with Guard(RedisBackend(client, wait_replicas=1, wait_timeout=WAIT), [P]) as guard:
        assert guard.hit("p", r="a").allowed
        with stopped(replica), pytest.raises(BackendUnavailable) as caught:
            guard.hit("p", r="a")
        assert _not_replicated(caught.value)


def test_more_replicas_than_there_are_is_never_acknowledged(
    master: RedisServer, guard_of: Callable[..., Any]
) -> None:
    guard = guard_of(_url(master, replicas=2))
    with pytest.raises(BackendUnavailable, match="only 1 of 2 replicas"):
        guard.hit("p", r="a")


def test_without_wait_replicas_nothing_waits(
    master: RedisServer, replica: RedisServer, guard_of: Callable[..., Any]
) -> None:
    guard = guard_of(f"{master.url}/0")
    with stopped(replica):
        assert guard.hit("p", r="a").allowed


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"wait_replicas": -1}, "wait_replicas must be an integer from 0"),
        ({"wait_replicas": 1.0}, "wait_replicas must be an integer"),
        ({"wait_replicas": 101}, "wait_replicas must be an integer from 0"),
        ({"wait_replicas": 1, "wait_timeout": 0}, "WAIT's 0 blocks for ever"),
        ({"wait_replicas": 1, "wait_timeout": float("nan")}, "wait_timeout must be from"),
        ({"wait_replicas": 1, "wait_timeout": "1"}, "wait_timeout must be seconds"),
    ],
)
def test_bad_durability_settings_are_refused_at_construction(
    options: dict[str, Any], message: str
) -> None:
    client = redis.Redis(port=servers.free_port())  # never connected
    with pytest.raises(ConfigError, match=message):
        RedisBackend(client, **options)


def test_the_async_backend_refuses_them_too() -> None:
    from redis.asyncio import Redis as AsyncRedis

    from freqguard import AsyncRedisBackend

    async def main() -> None:
        client = AsyncRedis(port=servers.free_port())
        with pytest.raises(ConfigError, match="wait_replicas"):
            AsyncRedisBackend(client, wait_replicas=-1)
        await client.aclose()

    asyncio.run(main())


def test_a_wait_longer_than_the_clients_socket_timeout_is_refused() -> None:
    """Every write would time out first, as a store failure (the breaker would open)."""
    client = redis.Redis(port=servers.free_port(), socket_timeout=0.2)  # never connected
    with pytest.raises(ConfigError, match=r"wait_timeout \(1\.0 s\) must be shorter"):
        RedisBackend(client, wait_replicas=1, wait_timeout=1.0)
    RedisBackend(client, wait_replicas=1, wait_timeout=0.1)  # shorter: fine
