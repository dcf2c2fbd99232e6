"""``wait_replicas`` on a cluster whose target node lacks the library (a node just added and
resharded onto: Redis Functions are not copied between masters). Real redis-server
processes, no mocks, no sleeps. Written failing by a second adversarial review.

Without ``wait_replicas`` the long way (``_command``) loads the library and tries again.
With it, the call is sent again on a lane (``_asking`` for ASK, ``_send_all`` for MOVED);
"Function not found" from there was raised as it was (BackendUnavailable); now the library
is loaded there and the call sent again.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.crc import key_slot

from freqguard import BackendUnavailable
from freqguard.backends._resp import record_key
from freqguard.engine.plan import PolicyPlan
from freqguard.script.contract import HIT
from tests import servers
from tests.backends.test_cluster_edges import P, _guard, _hand_over, _myid, _setslot, kind  # noqa: F401
from tests.conftest import flush
from tests.faults import owner
from tests.servers import RedisServer


def _masters(nodes: list[RedisServer]) -> list[RedisServer]:
    return [n for n in nodes if n.client.info("replication")["role"] == "master"]


def _setup(nodes: list[RedisServer], tag: str) -> tuple[Any, ...]:
    servers.wait_for(lambda: servers.cluster_settled(nodes), "the replicated cluster")
    masters = _masters(nodes)
    flush(masters)
    r = f"{tag}-lib"
    source = owner(nodes, P, r=r)
    target = next(n for n in masters if n is not source)
    warm = next(f"w{n}" for n in range(10_000) if owner(nodes, P, r=f"w{n}") is source)
    plan = PolicyPlan(P, "fg")
    slot = key_slot(record_key(plan.call(plan.texts({"r": r}), None, 1, HIT)))
    ids = {n.port: _myid(n) for n in masters}
    return masters, r, source, target, warm, slot, ids


def _everyone_says(nodes: list[RedisServer], slot: int, master: RedisServer) -> bool:
    """Every node's CLUSTER SLOTS gives ``slot`` to ``master`` (gossip has reached them)."""
    for node in nodes:
        table = node.client.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
        owner_port = next(int(m[1]) for start, end, m, *_ in table if start <= slot <= end)
        if owner_port != master.port:
            return False
    return True


def _hit(guard: Any, r: str) -> object:
    try:
        return guard.hit("p", r=r).allowed
    except BackendUnavailable as exc:
        return f"BackendUnavailable: {exc}"


@pytest.mark.slow  # the replicated cluster
def test_wait_replicas_ask_to_a_node_without_the_library_is_decided(
    replicated_cluster: list[RedisServer],
    kind: str,  # noqa: F811
) -> None:
    nodes = replicated_cluster
    masters, r, source, target, warm, slot, ids = _setup(nodes, f"ask-{kind}")
    query = "socket_timeout=2&socket_connect_timeout=2"
    base = f"redis+cluster://127.0.0.1:{source.port}/0?{query}"
    durable = _guard(kind, f"{base}&wait_replicas=1&wait_timeout=0.5", breaker=None)
    plain = _guard(kind, base, breaker=None)
    try:
        assert durable.hit("p", r=warm).allowed  # the library loaded on the source only
        target.client.function_flush()  # the target: a node just added (no library)
        _setslot(target, slot, "IMPORTING", ids[source.port])
        _setslot(source, slot, "MIGRATING", ids[target.port])
        try:
            got = _hit(durable, r)
            control = _hit(plain, r)  # the same key the long way: loaded, decided
            assert (got, control) == (True, True)  # got: "Function not found"
        finally:
            _hand_over(nodes, masters, slot, ids[target.port])
    finally:
        durable.close()
        plain.close()


@pytest.mark.slow  # the replicated cluster
def test_wait_replicas_moved_to_a_node_without_the_library_is_decided(
    replicated_cluster: list[RedisServer],
    kind: str,  # noqa: F811
) -> None:
    nodes = replicated_cluster
    masters, r, source, target, warm, slot, ids = _setup(nodes, f"moved-{kind}")
    query = "socket_timeout=2&socket_connect_timeout=2"
    base = f"redis+cluster://127.0.0.1:{source.port}/0?{query}"
    durable = _guard(kind, f"{base}&wait_replicas=1&wait_timeout=0.5", breaker=None)
    plain = _guard(kind, base, breaker=None)
    try:
        assert durable.hit("p", r=warm).allowed  # its map says the slot is the source's
        assert plain.hit("p", r=warm).allowed
        target.client.function_flush()  # the target: a node just added (no library)
        for node in masters:  # the slot handed over (a resharding completed)
            _setslot(node, slot, "NODE", ids[target.port])
        servers.wait_for(lambda: _everyone_says(nodes, slot, target), "every node's map")
        got = _hit(durable, r)  # MOVED, sent again on a lane to the target
        control = _hit(plain, r)  # MOVED, the long way: loaded, decided
        assert (got, control) == (True, True)  # got: "... Function not found"
    finally:
        durable.close()
        plain.close()
