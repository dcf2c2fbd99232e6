"""Faults on real redis-server processes, sync and async, standalone and a 3-master cluster.

The suite starts its own servers (never the session's: it stops and kills them) and injects:
a hung server (SIGSTOP: every call waits for its socket timeout), a crash (SIGKILL) and a
restart on the same port, ``FUNCTION FLUSH`` storms, and a full server under ``noeviction``.
Each test asserts what ``on_error`` answers, how many store calls the fault cost (counted by
an observer, not timed), that the store never admits past its cap, and that the same guard
finds the store again without being made anew. The breaker's clock is a ``ManualClock``: a
test ends the cool-down by advancing it (the rig: ``tests/backends/fault_rig.py``; a node
hung under a cluster's batch, and replies lost: ``test_fault_replies.py``).

What the faults showed, in numbers, is in the report of issue 12 and benchmarks/README.md
("Outage latency").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from time import perf_counter
from typing import Any

import pytest

from freqguard import (
    BackendUnavailable,
    Guard,
    Policy,
    Rule,
    backend_from_url,
)
from freqguard.backends import _lanes
from freqguard.failure import CircuitOpen
from tests import servers
from tests.backends.fault_rig import (
    CAP,
    COOLDOWN,
    DEGRADED,
    FAILURES,
    HITS,
    TIMEOUT,
    Client,
    Connect,
    P,
    store_admissions,
    url,
)
from tests.faults import (
    at_once,
    flushing,
    hammering,
    kill,
    owner,
    pause,
    restart,
    resume,
    stopped,
)
from tests.servers import RedisServer

pytestmark = pytest.mark.slow  # fault drills: servers hung, killed and restarted


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
    store_admissions(client, r="a")
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
    assert store_admissions(raising, r="a") == CAP
    victim = owner(nodes, P, r="a")
    kill(victim)
    errors = _hits_while_dead(raising, failing_open)
    for client in (raising, failing_open):
        # refused connections fail fast; the breaker still spares the store the reconnections
        # (redis-py before 8 may say so as its cluster client's failure to learn its nodes;
        # a loaded machine may not run a refused connect within the 0.2 s connect timeout:
        # a TimeoutError, CI's slow job once; what counts is FAILURES of them and no more)
        failures = client.tally.failures
        assert sum(failures.values()) == FAILURES
        assert set(failures) <= {"ConnectionError", "RedisClusterException", "TimeoutError"}
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
