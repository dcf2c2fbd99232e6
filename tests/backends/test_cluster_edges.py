"""Edges of partial failures and ``wait_replicas`` on real redis-server processes (the suite's
helpers; no mocks, no sleeps). Each test was written, failing, by an adversarial review of
the first per-node breaker and WAIT: the "got" comments say what they did then.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from redis.crc import key_slot

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Guard,
    PartialFailure,
    Policy,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from freqguard.backends import _redispy
from freqguard.backends._resp import record_key
from freqguard.engine.plan import PolicyPlan
from freqguard.script.contract import HIT
from tests import servers
from tests.backends.test_redis_durability import pair  # noqa: F401 (a master and its replica)
from tests.conftest import flush
from tests.faults import AsyncDriver, kill, owner, owners_of, restart, stopped
from tests.servers import RedisServer

pytestmark = pytest.mark.slow  # dead and hung cluster nodes: timeouts and failovers

TIMEOUT = 0.5
TWO = Policy(
    "two",
    Rule("3/day", by="r", name="per-r", strategy="fixed-window"),
    Rule("2/day", by="c", name="per-c", strategy="fixed-window"),
)
P = Policy("p", Rule("2/day", by="r", strategy="fixed-window", name="daily"))


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _guard(kind: str, url: str, **options: Any) -> Any:
    if kind == "sync":
        return Guard(backend_from_url(url), [P, TWO], **options)
    return AsyncDriver(AsyncGuard(async_backend_from_url(url), [P, TWO], **options))


# -- 1. a refund applied on the nodes that answered is accepted again ---------------------------


@pytest.fixture(scope="module")
def cluster_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RedisServer]]:
    with servers.cluster(tmp_path_factory.mktemp("edges-cluster")) as nodes:
        for node in nodes:  # a killed node is not failed by the others: they go on serving
            node.client.config_set("cluster-node-timeout", 120_000)
        yield nodes


@pytest.fixture
def cluster(cluster_nodes: list[RedisServer]) -> Iterator[list[RedisServer]]:
    flush(cluster_nodes)
    yield cluster_nodes
    for node in cluster_nodes:
        if node.process.poll() is not None:
            restart(node, cluster_nodes)


def test_a_refund_half_applied_across_a_dead_node_is_not_given_back_twice(
    cluster: list[RedisServer], kind: str
) -> None:
    """refund(decision) of a policy on two nodes, one of them dead (connection refused):
    the cluster backend raises a PartialFailure whose only error says sent=False, so the
    PartialFailure says sent=False though the other node applied its half; Guard.refund
    hands the receipt back, and the caller's retry gives the per-c unit back twice."""
    victim = owners_of(cluster, TWO, r="a", c="c")[0]  # per-r record of r=a
    names = [f"n{n}" for n in range(1000)]
    c = next(c for c in names if owners_of(cluster, TWO, r="a", c=c)[1] is not victim)
    r2 = next(r for r in names if owners_of(cluster, TWO, r=r, c=c)[0] is victim)
    seed = next(node for node in cluster if node is not victim)
    query = f"socket_timeout={TIMEOUT}&socket_connect_timeout={TIMEOUT}"
    guard = _guard(kind, f"redis+cluster://127.0.0.1:{seed.port}/0?{query}", breaker=None)
    try:
        mine = guard.hit("two", r="a", c=c)
        theirs = guard.hit("two", r=r2, c=c)
        assert mine.allowed
        assert theirs.allowed
        assert not guard.hit("two", r="x", c=c).allowed  # per-c (2) is full
        kill(victim)
        with pytest.raises(PartialFailure) as caught:
            guard.refund(mine)  # per-c given back on the live node, per-r refused
        partial = caught.value
        restart(victim, cluster)
        with contextlib.suppress(ConfigError):
            guard.refund(mine)  # the caller retries the refund that "failed"
        admitted = sum(guard.hit("two", r=f"y{n}", c=c).allowed for n in range(3))
        # one unit of c given back once: one more admitted (got 2, and partial.sent False)
        assert (admitted, partial.sent) == (1, True)
    finally:
        guard.close()


def _myid(node: RedisServer) -> str:
    found = node.client.execute_command("CLUSTER MYID")  # type: ignore[no-untyped-call]
    return found.decode() if isinstance(found, bytes) else str(found)


def _setslot(node: RedisServer, slot: int, *args: str) -> None:
    node.client.execute_command("CLUSTER SETSLOT", slot, *args)  # type: ignore[no-untyped-call]


def _hand_over(nodes: list[RedisServer], masters: list[RedisServer], slot: int, to: str) -> None:
    """End a migration: ``slot`` is the node ``to``'s (its id) on every master, settled."""
    for node in masters:
        _setslot(node, slot, "NODE", to)
    servers.wait_for(lambda: servers.cluster_settled(nodes), "the cluster after it")


# -- 2. wait_replicas: a slot being migrated (ASK) is never followed ------------------------------


@pytest.mark.slow  # the replicated cluster: started for the slow run only
def test_with_wait_replicas_a_hit_on_a_slot_being_migrated_is_decided(
    replicated_cluster: list[RedisServer], kind: str
) -> None:
    """During a resharding (redis-cli --cluster reshard/rebalance), a key of a slot being
    migrated that is not on the source gets ASK. Without wait_replicas, _settle goes the
    long way (the cluster client sends ASKING to the target). With it, _settle sends the
    call again on a lane to the slot's owner as mapped, i.e. the source again (only MOVED
    relearns the map, and ASK must not): ASK again, raised as BackendUnavailable. Every hit
    on a migrating slot's moved keys fails for the whole migration."""
    nodes = replicated_cluster
    servers.wait_for(lambda: servers.cluster_settled(nodes), "the replicated cluster")
    flush(n for n in nodes if n.client.info("replication")["role"] == "master")
    r = f"ask-{kind}"
    source = owner(nodes, P, r=r)
    masters = [n for n in nodes if n.client.info("replication")["role"] == "master"]
    target = next(n for n in masters if n is not source)
    plan = PolicyPlan(P, "fg")
    slot = key_slot(record_key(plan.call(plan.texts({"r": r}), None, 1, HIT)))
    ids = {n.port: _myid(n) for n in masters}
    query = "socket_timeout=2&socket_connect_timeout=2"
    base = f"redis+cluster://127.0.0.1:{source.port}/0?{query}"
    durable = _guard(kind, f"{base}&wait_replicas=1&wait_timeout=0.5", breaker=None)
    plain = _guard(kind, base, breaker=None)
    try:
        assert durable.hit("p", r="warm").allowed  # loaded, lanes made
        assert plain.hit("p", r="warm2").allowed
        _setslot(target, slot, "IMPORTING", ids[source.port])
        _setslot(source, slot, "MIGRATING", ids[target.port])
        try:
            assert plain.hit("p", r=r).allowed  # ASK followed: decided on the target
            try:
                got = durable.hit("p", r=r).allowed
            except BackendUnavailable as exc:
                got = f"{exc}"
            assert got is True  # got: BackendUnavailable "redis failed: AskError: ..."
        finally:  # the migration completed: the slot is the target's
            _hand_over(nodes, masters, slot, ids[target.port])
    finally:
        durable.close()
        plain.close()


# -- 3. wait_replicas: an error reply to WAIT says "applied nothing" of applied writes ----------


def test_a_write_whose_wait_is_refused_is_known_applied(
    pair: tuple[RedisServer, RedisServer],  # noqa: F811
    kind: str,
) -> None:
    """WAIT refused with an error reply (here an ACL without +wait; a proxy that does not
    know WAIT alike) once made each call's result that ResponseError, which says "applied
    nothing" (sent=False) of applied writes: a refund was handed back unspent, and its retry
    gave back twice. Now an admission is a failure that was sent, its reply kept, and a
    refund waits for no replica (a lost one errs on the strict side): it is applied once.
    (The ACL narrowed under a running backend: one refused WAIT from the start is refused
    before the first write, ``test_redis_wait_refused``.)"""
    master = pair[0]
    flush([master])
    user = ("nowait", "on", "nopass", "~*", "&*", "+@all")
    master.client.execute_command("ACL", "SETUSER", *user)  # type: ignore[no-untyped-call]
    query = "socket_timeout=1&wait_replicas=1&wait_timeout=0.1"
    plain = _guard(kind, f"{master.url}/0", breaker=None)
    durable = _guard(kind, f"redis://nowait@127.0.0.1:{master.port}/0?{query}", breaker=None)
    try:
        durable.peek("p", r="a")  # the backend's checks made, WAIT allowed then
        master.client.execute_command("ACL", "SETUSER", "nowait", "-wait")  # type: ignore[no-untyped-call]
        mine = plain.hit("p", r="a")
        assert mine.allowed
        with pytest.raises(BackendUnavailable, match="WAIT was refused") as caught:
            durable.hit("p", r="a")  # the second of two: applied on the master
        assert caught.value.sent
        assert caught.value.applied.allowed
        assert not plain.hit("p", r="a").allowed  # full (2)
        outcome: list[object] = []
        for _ in range(2):  # a refund, and a caller's retry
            try:
                outcome.append(durable.refund(mine).source)
            except BackendUnavailable as exc:
                outcome.append(exc.sent)
            except ConfigError:
                outcome.append("already refunded")
        admitted = sum(plain.hit("p", r="a").allowed for _ in range(3))
        assert (admitted, outcome) == (1, ["backend", "already refunded"])
    finally:
        plain.close()
        durable.close()
        master.client.execute_command("ACL", "DELUSER", "nowait")  # type: ignore[no-untyped-call]


# -- 4. wait_replicas on a cluster: a node that fails raises ValueError --------------------------


def test_with_wait_replicas_a_hung_cluster_node_is_a_backend_failure(
    cluster: list[RedisServer], kind: str
) -> None:
    """_send_all: a lane that failed (a hung or lost node) gives one error, spread to each of
    its calls, and then, with wait_replicas, goes through _acked, which takes the last item
    as WAIT's reply and drops it: one result short, and zip(strict=True) raises ValueError
    out of the backend. on_error never answers, the breaker is never told (sync and async;
    the long way after a lost node never runs)."""
    victim = owner(cluster, P, r="a")
    seed = next(node for node in cluster if node is not victim)
    query = f"socket_timeout={TIMEOUT}&socket_connect_timeout={TIMEOUT}"
    query += "&wait_replicas=1&wait_timeout=0.1"  # this cluster has no replicas: Unreplicated
    guard = _guard(kind, f"redis+cluster://127.0.0.1:{seed.port}/0?{query}", on_error="allow")
    try:
        assert guard.hit("p", r="a").source == "fail-open"  # unreplicated, answered by on_error
        with stopped(victim):
            got = guard.hit("p", r="a")  # got: ValueError: zip() argument 2 is shorter ...
        assert got.source == "fail-open"
    finally:
        guard.close()


# -- 5. wait_replicas: a hit of cost 0 (a check) waits for the replicas ------------------------


def test_a_hit_of_cost_zero_waits_for_no_replica_as_a_peek(
    pair: tuple[RedisServer, RedisServer],  # noqa: F811
    kind: str,
) -> None:
    """hit(cost=0) "only checks (as peek)" and runs as the no-grow function, as CHECK does;
    _durable sends WAIT behind any call whose mode is not CHECK, so with the replica away a
    cost-0 hit fails (Unreplicated) where peek answers: docs/operations.md says reads wait
    for no replica."""
    master, replica = pair
    flush([master])
    guard = _guard(kind, f"{master.url}/0?socket_timeout=1&wait_replicas=1&wait_timeout=0.05")
    try:
        assert guard.hit("p", r="a").allowed
        with stopped(replica):
            assert guard.peek("p", r="a").remaining == 1
            assert guard.hit("p", cost=0, r="a").remaining == 1  # got: BackendUnavailable
    finally:
        guard.close()


# -- 6. closing after a lost node closes every connection -----------------------------------------


def _clients(node: RedisServer) -> int:
    """Connections of normal clients to ``node``, the asking one left out."""
    listed = node.client.execute_command("CLIENT LIST TYPE normal")  # type: ignore[no-untyped-call]
    text = listed.decode() if isinstance(listed, bytes) else str(listed)
    return len([line for line in text.splitlines() if line.strip()]) - 1


@pytest.mark.parametrize("public", [False, True], ids=["private", "public"])
def test_an_async_cluster_backend_closed_after_a_lost_node_leaves_no_connection_open(
    cluster: list[RedisServer], public: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py's asyncio cluster client closes nothing while it is marked to learn its slots
    again (after a lost node, until its next command): aclose of the backend after a lost
    node, with the calls going by freqguard's own lanes since, left the nodes' connections
    open (a ResourceWarning each, and sockets held until the process ends)."""
    monkeypatch.setattr(_redispy, "PRIVATE", not public)
    victim = owner(cluster, P, r="a")
    seed = next(node for node in cluster if node is not victim)
    before = {node.port: _clients(node) for node in cluster}
    query = f"socket_timeout={TIMEOUT}&socket_connect_timeout={TIMEOUT}"
    guard = _guard("async", f"redis+cluster://127.0.0.1:{seed.port}/0?{query}", on_error="allow")
    try:
        others = [f"o{n}" for n in range(40)]
        for r in ["a", *others]:
            assert guard.hit("p", r=r).allowed
        kill(victim)
        assert guard.hit("p", r="a").source == "fail-open"
        restart(victim, cluster)
        for r in others:
            guard.hit("p", r=r)
    finally:
        guard.close()
    servers.wait_for(  # bounded polling: each node sees its clients' FIN
        lambda: all(_clients(node) <= before[node.port] for node in cluster), "closed"
    )
