"""Faults on real redis-server processes, sync and async, standalone and a 3-master cluster.

The suite starts its own servers (never the session's: it stops and kills them) and injects:
a hung server (SIGSTOP: every call waits for its socket timeout), a crash (SIGKILL) and a
restart on the same port, ``FUNCTION FLUSH`` storms, and a full server under ``noeviction``.
Each test asserts what ``on_error`` answers, how many store calls the fault cost (counted by
an observer, not timed), that the store never admits past its cap, and that the same guard
finds the store again without being made anew. The breaker's clock is a ``ManualClock``: a
test ends the cool-down by advancing it.

What the faults showed, in numbers, is in the report of issue 12 and benchmarks/README.md
("Outage latency").
"""

from __future__ import annotations

import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import pytest
from redis import exceptions as rex
from redis.crc import key_slot

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Guard,
    ManualClock,
    MemoryBackend,
    PartialFailure,
    Policy,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from freqguard.backends import _lanes
from freqguard.backends._resp import record_key
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from freqguard.engine.plan import PolicyPlan
from freqguard.failure import Breaker, CircuitOpen
from freqguard.script.contract import HIT
from tests import servers
from tests.conftest import flush
from tests.faults import (
    AsyncDriver,
    Tally,
    at_once,
    flushing,
    hammering,
    input_waiting,
    kill,
    loopback,
    owner,
    owners_of,
    pause,
    restart,
    resume,
    stopped,
    tcp_rows,
)
from tests.servers import RedisServer

pytestmark = pytest.mark.slow  # fault drills: servers hung, killed and restarted

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


def _store_admissions(client: Client, **ctx: str) -> int:
    """Hit until the store denies (at most twice the cap): how many it admitted."""
    admitted = 0
    for _ in range(2 * CAP):
        decision = client.guard.hit("p", **ctx)
        assert decision.source == "backend"
        if not decision.allowed:
            return admitted
        admitted += 1
    raise AssertionError(f"the store admitted {admitted} hits of a cap of {CAP}")


# -- a hung server ---------------------------------------------------------------------------


def _check_degraded(on_error: str, decisions: list[Any]) -> None:
    """What ``on_error`` answered while the store hung."""
    assert {d.source for d in decisions} == {DEGRADED[on_error]}
    admitted = sum(d.allowed for d in decisions)
    if on_error == "allow":
        assert admitted == len(decisions)
    elif on_error == "deny":
        assert admitted == 0
        assert all(0 < d.retry_after <= COOLDOWN for d in decisions)
    else:  # the fallback's own cap, per process
        assert admitted == CAP


@pytest.mark.parametrize("on_error", ["allow", "deny", "fallback"])
def test_a_hung_server_costs_the_breakers_timeouts_then_decides_again(
    on_error: str, nodes: list[RedisServer], connect: Connect
) -> None:
    client = connect(on_error)
    guard, tally = client.guard, client.tally
    assert guard.hit("p", r="a").source == "backend"  # connected, the server inspected
    with stopped(owner(nodes, P, r="a")):
        start = perf_counter()
        decisions = [guard.hit("p", r="a") for _ in range(HITS)]
        took = perf_counter() - start
        # the store was called until the breaker opened, each call waiting out its timeout;
        # the other hits were answered at once by on_error
        assert tally.failures == {"TimeoutError": FAILURES}
        assert client.breaker.state == "open"
        assert took < HITS * TIMEOUT / 4  # very generous: about FAILURES * TIMEOUT is spent
        _check_degraded(on_error, decisions)
        client.clock.advance(COOLDOWN)
    first = guard.hit("p", r="a")
    assert first.source == "backend"  # the first hit after the cool-down: the store's
    assert client.breaker.state == "closed"
    # never past the cap; under it by at most the hits the server applied after it woke
    # (sent before the timeout, executed on SIGCONT: the callers were answered by on_error)
    _store_admissions(client, r="a")
    assert CAP - FAILURES <= tally.count("backend", True) <= CAP
    assert tally.store_failures == FAILURES


# -- a crash, and a restart on the same port -------------------------------------------------


def _hits_while_dead(raising: Client, failing_open: Client) -> list[BackendUnavailable]:
    """HITS hits on a dead store by each client: the errors the raising one got (never a
    redis-py one); the other's answers, checked."""
    errors = []
    for _ in range(HITS):
        with pytest.raises(BackendUnavailable) as caught:
            raising.guard.hit("p", r="a")
        errors.append(caught.value)
        decision = failing_open.guard.hit("p", r="a")
        assert (decision.source, decision.allowed) == ("fail-open", True)
    return errors


def test_a_killed_server_restarted_on_its_port_is_found_by_the_same_guards(
    nodes: list[RedisServer], connect: Connect
) -> None:
    raising, failing_open = connect("raise"), connect("allow")
    assert _store_admissions(raising, r="a") == CAP
    victim = owner(nodes, P, r="a")
    kill(victim)
    errors = _hits_while_dead(raising, failing_open)
    for client in (raising, failing_open):
        # refused connections fail fast; the breaker still spares the store the reconnections
        # (redis-py before 8 may say so as its cluster client's failure to learn its nodes)
        failures = client.tally.failures
        assert sum(failures.values()) == FAILURES
        assert set(failures) <= {"ConnectionError", "RedisClusterException"}
    assert all(type(e) is BackendUnavailable for e in errors[:FAILURES])
    assert all(type(e) is CircuitOpen for e in errors[FAILURES:])
    assert all(0 < e.retry_after <= COOLDOWN for e in errors[FAILURES:])  # type: ignore[attr-defined]
    restart(victim, nodes if len(nodes) > 1 else None)
    for n, client in enumerate((raising, failing_open)):
        client.clock.advance(COOLDOWN)
        first = client.guard.hit("p", r="a")
        assert first.source == "backend"
        assert client.breaker.state == "closed"
        # the restarted server kept nothing (no persistence here, as in the default config
        # of a cache): the cap starts again; the first call loads the library again
        assert (first.allowed, first.remaining) == (True, CAP - 1 - n)


def test_a_crash_forgets_nothing_with_appendfsync_always(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Persistence is the store's answer to a crash: every write logged before its reply.
    The timeout is long: each write waits for its fsync, which a loaded disk may take longer
    than the module's short timeout over (the claim is about what survives, not speed)."""
    server = servers.RedisServer(
        tmp_path_factory.mktemp("aof"), "--appendonly", "yes", "--appendfsync", "always"
    )
    try:
        guard = Guard(backend_from_url(url([server], 5.0)), [P])
        assert [guard.hit("p", r="a").allowed for _ in range(CAP)] == [True] * CAP
        kill(server)
        with pytest.raises(BackendUnavailable):
            guard.hit("p", r="a")
        restart(server)
        after = guard.hit("p", r="a")
        assert (after.source, after.allowed) == ("backend", False)
        guard.close()
    finally:
        server.stop()


@pytest.mark.parametrize("nodes", ["redis"], indirect=True)  # a cluster client is not affected
def test_the_first_hit_after_a_restart_does_not_fail_on_a_kept_connection(
    nodes: list[RedisServer], connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No call between the crash and the restart: a connection kept from before is dead,
    which the client tells before it sends anything (the socket reads end-of-file), once the
    server's close has reached it. The kernel delivers that close on its own time (on a
    loaded machine, after the restart): until then the kept socket looks alive, the call is
    sent on it and fails as not applied (``on_error`` answers); a call the server may have
    taken is never sent again. So the test waits, bounded, for the close to arrive. A kept
    connection is checked only after it idled ``_CHECK_AFTER`` (a busy lane never pays the
    poll), and a server here can die and answer again within those 10 ms: the test checks
    every time."""
    monkeypatch.setattr(_lanes, "_CHECK_AFTER", 0.0)
    client = connect("raise")
    assert client.guard.hit("p", r="a").source == "backend"
    victim = owner(nodes, P, r="a")
    kill(victim)
    restart(victim, nodes if len(nodes) > 1 else None)
    servers._wait(lambda: _close_reached(client.guard), "the server's close to reach the client")
    assert client.guard.hit("p", r="a").source == "backend"


def _close_reached(guard: Any) -> bool:
    """Whether every connection the guard keeps idle reads end-of-file (or is gone)."""
    backend = getattr(guard, "guard", guard).backend  # a Guard, or an AsyncDriver's guard
    for _, lane in backend._lanes.values():
        for kept in getattr(lane, "_idle", ()):
            connection = kept[0]
            try:
                if connection._sock is not None and not connection.can_read(timeout=0):
                    return False
            except Exception:  # the close itself, as redis-py reads it
                continue
    return True


# -- concurrent callers ----------------------------------------------------------------------

WORKERS = 4  # threads, or tasks


# -- FUNCTION FLUSH mid-stream ---------------------------------------------------------------

FLUSH_CAP = 3
FLUSHED = Policy("f", Rule(f"{FLUSH_CAP}/day", by="r", name="daily"))


def _calls_that_met_a_flush(nodes: list[RedisServer]) -> int:
    """FCALLs the servers failed since their stats were reset ("Function not found")."""
    stats = [node.client.info("commandstats").get("cmdstat_fcall", {}) for node in nodes]
    return sum(int(s.get("failed_calls", 0)) for s in stats)


def test_a_function_flush_mid_stream_is_no_failure_and_admits_no_more(
    nodes: list[RedisServer], connect: Connect
) -> None:
    """tests/backends/test_redis_flush_race.py shows that calls survive a flush storm and are
    decided exactly once, on a pinned clock; here, on the server's clock and the clients of
    backend_from_url (no retries), under a guard that fails closed: the storm is not a store
    failure (nothing degraded, the breaker never counts), and a small cap hit by every worker
    admits exactly its limit. The timeout is long: a library load under a flush storm on a
    machine running the rest of the slow suite took longer than the module's short one (seen
    in CI: two TimeoutErrors), and the claim is about the flush, not speed."""
    client = connect("deny", (FLUSHED,), timeout=5.0)
    recipients = [f"f{n}" for n in range(12)]
    jobs = [
        [
            [{"r": r}] if (w + i) % 2 else [{"r": r}, {"r": recipients[i - 1]}]
            for i, r in enumerate(recipients)
        ]
        * 2
        for w in range(WORKERS)
    ]
    for node in nodes:
        node.client.config_resetstat()
    with flushing(nodes) as rounds:
        decided = at_once(client.guard, "f", jobs)
    assert rounds[0] > 0
    assert _calls_that_met_a_flush(nodes) > 0  # the storm did come between calls
    assert client.tally.failures == {}
    assert {d.source for _, d in decided} == {"backend"}
    assert client.breaker.state == "closed"
    admitted = Counter(ctx["r"] for ctx, d in decided if d.allowed)
    assert admitted == dict.fromkeys(recipients, FLUSH_CAP)


# -- no over-admission across a hang ---------------------------------------------------------

BIG = 100
HOT = Policy("hot", Rule(f"{BIG}/day", by="r", name="daily"))


@pytest.mark.parametrize("on_error", ["allow", "deny", "fallback"])
def test_no_store_admission_past_the_cap_across_a_hang(
    on_error: str, nodes: list[RedisServer], connect: Connect
) -> None:
    """Callers hit one cap without pause; the server hangs at the BIG/4-th admission (in the
    thread that made it), comes back once the breaker is open, and the cool-down ends."""
    client = connect(on_error, (HOT,))
    tally, degraded = client.tally, DEGRADED[on_error]
    victim = owner(nodes, HOT, r="hot")
    tally.when(lambda: tally.count("backend", True) >= BIG // 4, lambda: pause(victim))
    try:
        with hammering(client.guard, "hot", WORKERS, r="hot"):
            tally.wait(
                "the breaker to open",
                lambda: client.breaker.state == "open" and tally.count(degraded) >= 50,
            )
            before = tally.count("backend", True)
            resume(victim)
            client.clock.advance(COOLDOWN)
            tally.wait("the store to fill the cap", lambda: tally.count("backend", False) >= 10)
    finally:
        resume(victim)
    assert before < BIG  # the hang came with the cap half full
    # the store never admits past its cap; it may admit less by the hits it applied after
    # it woke, whose callers had been answered by on_error
    assert BIG - tally.store_failures <= tally.count("backend", True) <= BIG
    assert set(tally.failures) == {"TimeoutError"}
    assert tally.store_failures <= FAILURES + WORKERS  # the calls in flight as it opened
    assert {source for source, _ in tally.decisions} == {"backend", degraded}
    if on_error == "deny":
        assert tally.count(degraded, True) == 0
    elif on_error == "allow":
        assert tally.count(degraded, False) == 0
    else:  # the fallback's own cap, per process
        assert 0 < tally.count(degraded, True) <= BIG


# -- out of memory under noeviction ----------------------------------------------------------


@contextmanager
def _full(nodes: list[RedisServer]) -> Iterator[None]:
    """Every node's maxmemory set to half of what it uses, under ``noeviction`` (Redis's
    default, and what freqguard's docs ask for): a write that may grow is refused."""
    for node in nodes:
        assert node.client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        used = int(node.client.info("memory")["used_memory"])
        node.client.config_set("maxmemory", used // 2)
    try:
        yield
    finally:
        for node in nodes:
            node.client.config_set("maxmemory", 0)


def _refused_hit(client: Client, on_error: str) -> None:
    """A hit of a new recipient on a full store: refused, answered by ``on_error``."""
    if on_error == "raise":
        with pytest.raises(BackendUnavailable, match="OutOfMemoryError"):
            client.guard.hit("p", r="newcomer")
        return
    decision = client.guard.hit("p", r="newcomer")
    assert decision.source == DEGRADED[on_error]
    assert decision.allowed is (on_error != "deny")


@pytest.mark.parametrize("on_error", ["raise", "allow", "deny", "fallback"])
def test_a_full_server_refuses_hits_by_on_error_and_still_peeks_and_refunds(
    on_error: str, nodes: list[RedisServer], connect: Connect
) -> None:
    client = connect(on_error)
    kept = client.guard.hit("p", r="a")
    with _full(nodes):
        for _ in range(FAILURES - 1):  # fewer than open the breaker: see the test below
            _refused_hit(client, on_error)
        assert client.tally.failures == {"OutOfMemoryError": FAILURES - 1}
        peeked = client.guard.peek("p", r="a")
        assert (peeked.source, peeked.remaining) == ("backend", CAP - 1)
        given_back = client.guard.refund(kept)
        assert (given_back.source, given_back.remaining) == ("backend", CAP)
        client.guard.reset("p", r="a")
    after = client.guard.hit("p", r="newcomer")
    assert (after.source, after.allowed) == ("backend", True)


@pytest.mark.parametrize("nodes", ["redis"], indirect=True)  # the guard's logic, not the store's
def test_a_full_server_still_serves_refunds_after_many_refused_hits(
    nodes: list[RedisServer], connect: Connect
) -> None:
    client = connect("allow")
    kept = client.guard.hit("p", r="a")
    with _full(nodes):
        for _ in range(FAILURES):
            _refused_hit(client, "allow")
        assert client.guard.refund(kept).source == "backend"
        assert client.guard.peek("p", r="a").source == "backend"


# -- one circuit per cluster node, and batches across a hung node ---------------------------


@pytest.mark.parametrize("nodes", ["cluster"], indirect=True)
def test_a_hung_cluster_node_opens_the_breaker_for_its_own_slots(
    nodes: list[RedisServer], connect: Connect
) -> None:
    """The hung node's failures open its own circuit, though the other nodes' successes
    come in between; the other nodes go on deciding, and once it answers again the first
    hit on its slots after the cool-down is decided by it."""
    client = connect("allow")
    names = (f"r{n}" for n in range(1000))
    victim = owner(nodes, P, r="a")
    elsewhere = next(r for r in names if owner(nodes, P, r=r) is not victim)
    assert client.guard.hit("p", r="a").source == "backend"
    with stopped(victim):
        for _ in range(2 * FAILURES + 1):
            assert client.guard.hit("p", r="a").source == "fail-open"
            assert client.guard.hit("p", r=elsewhere).source == "backend"  # a node that answers
        assert client.tally.store_failures == FAILURES  # then its circuit answered at once
        assert client.breaker.state_of(f"127.0.0.1:{victim.port}") == "open"
        assert client.breaker.state_of(f"127.0.0.1:{owner(nodes, P, r=elsewhere).port}") == (
            "closed"
        )
    client.clock.advance(COOLDOWN)
    first = client.guard.hit("p", r="a")
    assert first.source == "backend"  # the store's: and hits that timed out may have run
    assert CAP - 2 - FAILURES <= first.remaining <= CAP - 2  # when the node woke, never twice
    assert client.breaker.state == "closed"


def _split(nodes: list[RedisServer]) -> tuple[RedisServer, list[str], set[str]]:
    """A node, a dozen recipients, and those of them whose record that node holds."""
    names = [f"r{n}" for n in range(12)]
    victim = owner(nodes, P, r="a")
    on_victim = {r for r in names if owner(nodes, P, r=r) is victim}
    assert 0 < len(on_victim) < len(names)
    return victim, names, on_victim


@pytest.mark.parametrize("on_error", ["raise", "allow", "deny", "fallback"])
@pytest.mark.parametrize("nodes", ["cluster"], indirect=True)
def test_a_batch_across_a_hung_node_is_answered_by_the_store_where_it_can(
    on_error: str, nodes: list[RedisServer], connect: Connect
) -> None:
    """The hung node's part is answered by on_error (raise: a PartialFailure carrying each
    hit's decision or error), the other nodes' part by the store, each hit counted once."""
    client = connect(on_error)
    victim, names, on_victim = _split(nodes)
    batch = [{"r": r} for r in names]
    assert {d.source for d in client.guard.hit_many("p", batch)} == {"backend"}  # all loaded
    with stopped(victim):
        if on_error == "raise":
            with pytest.raises(PartialFailure) as caught:
                client.guard.hit_many("p", batch)
            got = caught.value.results
        else:
            got = client.guard.hit_many("p", batch)
    for r, result in zip(names, got, strict=True):
        if r in on_victim:
            if on_error == "raise":
                assert isinstance(result, BackendUnavailable)
                assert isinstance(result.__cause__, rex.TimeoutError)
            else:
                assert (result.source, result.allowed) == (DEGRADED[on_error], on_error != "deny")
        else:  # decided by the store, and counted there once
            assert (result.source, result.allowed, result.remaining) == ("backend", True, CAP - 2)
            assert client.guard.peek("p", r=r).remaining == CAP - 2
    assert client.tally.store_failures == 1  # one node failed, once, for all its calls
    for r in on_victim:  # sent before the timeout, the hung node's part may run on waking:
        assert client.guard.peek("p", r=r).remaining in (CAP - 1, CAP - 2)  # never twice


TWO_PARTS = Policy(
    "two",
    Rule(f"{CAP}/day", by="r", name="per-r"),
    Rule(f"{CAP}/day", by="c", name="per-c"),
)


@pytest.mark.parametrize("nodes", ["cluster"], indirect=True)
def test_a_multi_part_batch_across_a_hung_node_decides_the_hits_that_avoid_it(
    nodes: list[RedisServer], connect: Connect
) -> None:
    """A policy on two parts decides hit by hit: a hit with a part on the hung node fails
    (failing closed: denied) and gives back what it took on the others; the rest are the
    store's."""
    client = connect("deny", (TWO_PARTS,))
    victim = owner(nodes, P, r="a")
    keep = next(
        c
        for c in (f"c{n}" for n in range(1000))
        if victim not in owners_of(nodes, TWO_PARTS, r="a", c=c)[1:]
    )  # the per-c record of c=keep is elsewhere: the hits differ by their per-r record
    names = [f"r{n}" for n in range(12)]
    touches = {r for r in names if victim in owners_of(nodes, TWO_PARTS, r=r, c=keep)}
    assert 0 < len(touches) < len(names)
    with stopped(victim):
        got = client.guard.hit_many("two", [{"r": r, "c": keep} for r in names])
    expected = ["fail-closed" if r in touches else "backend" for r in names]
    assert [d.source for d in got] == expected
    decided = len(names) - len(touches)
    per_c = {s.rule.name: s.remaining for s in client.guard.peek("two", r="x", c=keep).rules}
    assert per_c["per-c"] == max(CAP - decided, 0)  # the failed hits gave back what they took


# -- a refund the server applies after it timed out ------------------------------------------


@pytest.mark.parametrize(
    "strategy",
    [
        "sliding-log",
        "token-bucket",
        "gcra",
        "fixed-window",
    ],
)
@pytest.mark.parametrize("nodes", ["redis"], indirect=True)
def test_a_refund_applied_late_and_made_again_gives_back_once(
    strategy: str, nodes: list[RedisServer], connect: Connect
) -> None:
    policy = Policy("q", Rule("3/day", by="r", strategy=strategy))
    client = connect("raise", (policy,))
    taken = [client.guard.hit("q", r="a") for _ in range(3)]
    with stopped(nodes[0]), pytest.raises(BackendUnavailable, match="TimeoutError"):
        client.guard.refund(taken[0])  # sent, never answered: the server runs it on waking
    for _ in range(1000):  # bounded: until the server has run it
        if client.guard.peek("q", r="a").remaining == 1:
            break
    else:
        raise AssertionError("the refund sent before the timeout was never applied")
    # the caller cannot know: it tries again; the receipt stays spent, since the refund may
    # have been applied (a fixed window's decrement would otherwise give back twice)
    with pytest.raises(ConfigError, match="already refunded"):
        client.guard.refund(taken[0])
    assert sum(client.guard.hit("q", r="a").allowed for _ in range(3)) == 1


# -- a connection killed after its call ran ---------------------------------------------------


def _own_client(
    nodes: list[RedisServer],
    asynchronous: bool,
    retries: int | None,
    timeout: float,
    **options: Any,
) -> Any:
    """A redis-py client the user made, with a ``Retry`` of their own (None: redis-py's
    default, 10 more tries in redis-py 8), rather than one :func:`backend_from_url` made
    (no retries)."""
    from redis.backoff import NoBackoff

    if asynchronous:
        from redis.asyncio import Redis, RedisCluster
        from redis.asyncio.retry import Retry
    else:
        from redis import Redis, RedisCluster  # type: ignore[assignment]
        from redis.retry import Retry  # type: ignore[assignment]
    kind = Redis if len(nodes) == 1 else RedisCluster
    if retries is not None:
        options["retry"] = Retry(NoBackoff(), retries)
    return kind(
        host="127.0.0.1",
        port=nodes[0].port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        **options,
    )


@pytest.mark.parametrize("made", ["url", "own"])
def test_a_call_whose_connection_dies_after_it_ran_is_not_sent_again(
    nodes: list[RedisServer], asynchronous: bool, made: str
) -> None:
    """The node runs the call, and its connection is closed before the reply goes out (here
    CLIENT KILL, queued behind the call while the node is stopped: both run in one turn of
    its event loop, and the reply is dropped with the connection). The caller sees the
    connection lost; the call may have been applied, so it must not be sent again (it was,
    the long way, and counted twice): it is answered by on_error, and counted once. Also
    with a client the user made (``own``), whose ``Retry`` tries 3 times more: the lane sent
    the call again under it, and counted it twice."""
    if made == "own" and len(nodes) > 1:
        pytest.skip("a cluster client's node connections have no Retry of their own")
    victim = owner(nodes, P, r="a")
    name = f"dies-{asynchronous}-{made}"  # this guard's connections, by name
    scheme = "redis" if len(nodes) == 1 else "redis+cluster"
    query = f"socket_timeout=5&socket_connect_timeout=5&client_name={name}"
    url = f"{scheme}://127.0.0.1:{victim.port}/0?{query}"
    options: dict[str, Any] = {"on_error": "deny", "breaker": None}
    guard: Any
    if made == "own":
        client = _own_client(nodes, asynchronous, retries=3, client_name=name, timeout=5)
        backend: Any = (AsyncRedisBackend if asynchronous else RedisBackend)(client)
    else:
        backend = (async_backend_from_url if asynchronous else backend_from_url)(url)
    if asynchronous:
        guard = AsyncDriver(AsyncGuard(backend, [P], **options))
    else:
        guard = Guard(backend, [P], **options)
    admin = socket.create_connection(("127.0.0.1", victim.port))
    try:
        assert guard.hit("p", r="a").source == "backend"  # the lane's connection made
        clients = victim.client.client_list()
        lane = [c for c in clients if c["name"] == name and c["cmd"] == "fcall"]
        assert len(lane) == 1
        lane_port = int(lane[0]["addr"].rsplit(":", 1)[1])
        admin_port = admin.getsockname()[1]
        got: list[Any] = []
        with stopped(victim):
            worker = threading.Thread(target=lambda: got.append(guard.hit("p", r="a")))
            worker.start()
            servers.wait_for(lambda: input_waiting(victim, lane_port), "the call, queued")
            admin.sendall(b"CLIENT KILL ADDR 127.0.0.1:%d\r\n" % lane_port)
            servers.wait_for(lambda: input_waiting(victim, admin_port), "the kill, queued")
        worker.join(10)
        assert admin.recv(100) == b":1\r\n"  # one connection killed: the lane's
        # applied once (the call ran before the kill, as epoll hands them over in the order
        # they came) or, were the kill run first, not at all: never twice (CAP - 3)
        assert guard.peek("p", r="a").remaining in (CAP - 2, CAP - 1)
        assert [(d.source, d.allowed) for d in got] == [("fail-closed", False)]
    finally:
        admin.close()
        guard.close()


@pytest.mark.parametrize("nodes", ["cluster"], indirect=True)
def test_a_redirected_call_whose_reply_is_lost_is_not_sent_again(
    nodes: list[RedisServer], asynchronous: bool
) -> None:
    """A call redirected (MOVED: its slot moved) goes again to the slot's new owner; its
    reply lost there (the node stopped: a read timeout), it is not sent again. It went
    through the cluster client's ``execute_command``, whose own retries (10 by default in
    redis-py 8) sent it again, and the node counted it more than once (review)."""
    victim = owner(nodes, P, r="moved")
    target = next(node for node in nodes if node is not victim)
    slot = _slot_of(r="moved")
    client = _own_client(nodes, asynchronous, retries=None, timeout=TIMEOUT)
    backend: Any = (AsyncRedisBackend if asynchronous else RedisBackend)(client)
    options: dict[str, Any] = {"on_error": "deny", "breaker": None}
    guard: Any = (
        AsyncDriver(AsyncGuard(backend, [P], **options))
        if asynchronous
        else Guard(backend, [P], **options)
    )
    try:
        for n in range(30):  # every node's library loaded, and its lane made
            guard.hit("p", r=f"warm-{n}")
        _move_slot(nodes, slot, target)
        got: list[Any] = []
        with stopped(target):  # MOVED by the old owner; its reply lost at the new one
            worker = threading.Thread(target=lambda: got.append(guard.hit("p", r="moved")))
            worker.start()
            servers.wait_for(lambda: _given_up(target), "the reply, given up on")
        worker.join(30)  # the node answers again: a retry would find it
        assert len(got) == 1  # failed (on_error), or answered when what timed out was not it
        for _ in range(1000):  # bounded: until the new owner has run what it was sent
            if guard.peek("p", r="moved").remaining < CAP:
                break
        assert guard.peek("p", r="moved").remaining == CAP - 1  # run once
    finally:
        guard.close()
        flush([target])  # the slot empty again: it can go back
        _move_slot(nodes, slot, victim)


def _given_up(server: RedisServer) -> bool:
    """Whether a call sent to ``server``, stopped, lies unread on a connection its client
    has closed (the server's end holds data, the client's is in FIN_WAIT1 or 2): the
    client's read of its reply timed out."""
    rows, own = tcp_rows(), loopback(server.port)
    unread = {row[2] for row in rows if row[1] == own and int(row[4].split(":")[1], 16) > 0}
    return any(row[1] in unread and row[3] in ("04", "05") for row in rows if row[2] == own)


def _slot_of(**ctx: str) -> int:
    """The cluster slot of ``P``'s record for ``ctx``."""
    plan = PolicyPlan(P, "fg")
    return key_slot(record_key(plan.call(plan.texts(ctx), None, 1, HIT)))


def _move_slot(nodes: list[RedisServer], slot: int, to: RedisServer) -> None:
    """Hand an empty ``slot`` to ``to`` on every node (what a reshard ends with): clients'
    slot maps are then stale, and the old owner answers MOVED."""
    node_id = to.client.execute_command("CLUSTER MYID")  # type: ignore[no-untyped-call]
    for node in nodes:
        node.client.execute_command("CLUSTER SETSLOT", slot, "NODE", node_id)  # type: ignore[no-untyped-call]
    to.client.execute_command("CLUSTER BUMPEPOCH")  # type: ignore[no-untyped-call]  # its claim wins
