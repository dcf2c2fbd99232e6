"""Faults on real redis-server processes where a reply is what goes wrong: a cluster node
hung under a batch (one circuit per node, the rest of the batch answered), a refund the
server applied after its call timed out, a connection killed after its call ran, a
redirected call whose reply is lost: each decided once, never sent again (design note 90).
The rig: ``tests/backends/fault_rig.py``.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest
from redis import exceptions as rex
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
from freqguard.backends._resp import record_key
from freqguard.backends.redis import AsyncRedisBackend, RedisBackend
from freqguard.engine.plan import PolicyPlan
from freqguard.script.contract import HIT
from tests import servers
from tests.backends.fault_rig import (
    CAP,
    COOLDOWN,
    DEGRADED,
    FAILURES,
    TIMEOUT,
    Connect,
    P,
)
from tests.conftest import flush
from tests.faults import (
    AsyncDriver,
    input_waiting,
    loopback,
    owner,
    owners_of,
    stopped,
    tcp_rows,
)
from tests.servers import RedisServer

pytestmark = pytest.mark.slow  # fault drills: servers hung, killed and restarted


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
        backend = async_backend_from_url(url) if asynchronous else backend_from_url(url)
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
