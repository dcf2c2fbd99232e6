"""Where each call goes: the node that owns its key's slot.

Calls go straight to the node that owns their slot, by the backend's own look-up in the
redis-py client's slot map: redis-py's cluster client would otherwise ask the server for an
FCALL's keys (``COMMAND GETKEYS``) first, one more round trip per call. A batch is grouped by
node (:func:`per_lane`), in input order within each node, so calls on one key keep their
order. A redirection or a lost node (:data:`REROUTE`) sends the call the long way, through
the cluster client, which follows it and refreshes its slot map; a slot missing from the map
makes the client learn the map again (:func:`learn_slots`). No I/O here but that.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import TypeVar, overload

from redis import Redis
from redis import exceptions as rex
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.crc import key_slot

from freqguard.backends import _redispy
from freqguard.backends._redispy import (
    NodePool,
    async_node_pool,
    flag_relearn,
    node_of_key,
    one_connection,
    single_connection,
    unmapped,
)
from freqguard.backends._resp import record_key
from freqguard.script.calls import ScriptCall

__all__ = [
    "REROUTE",
    "alearn_lost",
    "alearn_slots",
    "learn_lost",
    "learn_slots",
    "node_named",
    "node_names",
    "one_connection",
    "owner_at",
    "owners",
    "per_lane",
    "single_connection",
    "slot_of",
    "unmapped",
]

_L = TypeVar("_L")  # a lane, sync or async
#: Errors that mean "ask the cluster client, which follows redirections and refreshes slots".
REROUTE = (rex.MovedError, rex.AskError, rex.TryAgainError, rex.ConnectionError)


def _standalone(key: bytes) -> int:
    return 0  # a standalone server: any keys in one transaction


def slot_of(cluster: bool) -> Callable[[bytes], int]:
    """A key's slot, for keys that must share one (a transaction's): any on one server."""
    return key_slot if cluster else _standalone


@overload
def owners(client: Redis | RedisCluster) -> Callable[[bytes], Redis]: ...
@overload
def owners(client: AsyncRedis | AsyncRedisCluster) -> Callable[[bytes], AsyncRedis | NodePool]: ...
def owners(client: object) -> Callable[[bytes], object]:
    """What gives, for a key, what reaches the node that owns it: the client itself when
    standalone; on a cluster, the node's own client (sync) or the node's connections
    (asyncio: :class:`~freqguard.backends._redispy.NodePool`, one a node). Made once per
    backend: ``isinstance`` on redis-py's clients goes through typing's protocol checks, too
    slow for every call. The look-up raises ``SlotNotCoveredError`` for a slot missing from
    the client's map."""
    if isinstance(client, RedisCluster):
        sync_cluster, node_of = client, node_of_key(client)

        def node_client(key: bytes) -> Redis:
            return sync_cluster.get_redis_connection(node_of(key))

        return node_client
    if isinstance(client, AsyncRedisCluster):
        async_cluster, async_node_of = client, node_of_key(client)
        return lambda key: async_node_pool(async_cluster, async_node_of(key))
    return lambda key: client


def owner_at(client: object, host: str, port: int) -> object | None:
    """What reaches the cluster node at ``host:port`` (as :func:`owners` gives for a key),
    None when the client does not know it: where an ASK redirection points."""
    if isinstance(client, RedisCluster):
        node = client.get_node(host=host, port=port)  # type: ignore[no-untyped-call]
        return None if node is None else client.get_redis_connection(node)
    if isinstance(client, AsyncRedisCluster):
        node = client.get_node(host=host, port=port)
        return None if node is None else async_node_pool(client, node)
    return None


def node_names(client: RedisCluster | AsyncRedisCluster) -> Callable[[ScriptCall], str | None]:
    """What names, for a call, the cluster node that owns its slot now (``host:port``), by
    the client's slot map; None for a slot missing from it. The guard's breaker keeps one
    circuit per name."""
    node_of = node_of_key(client)

    def named(call: ScriptCall) -> str | None:
        try:
            node = node_of(record_key(call))
        except (KeyError, IndexError, rex.SlotNotCoveredError):
            return None
        return str(node.name)

    return named


def per_lane(
    encoded: list[tuple[bytes, bytes]], lane_of: Callable[[bytes], _L]
) -> list[tuple[_L, list[int], list[bytes]]]:
    """Encoded calls grouped by the lane (node) that owns their key: each group's input
    positions and packed calls, in input order."""
    groups: dict[int, tuple[_L, list[int], list[bytes]]] = {}
    for index, (packed, key) in enumerate(encoded):
        lane = lane_of(key)
        group = groups.get(id(lane))
        if group is None:
            group = groups[id(lane)] = (lane, [], [])
        group[1].append(index)
        group[2].append(packed)
    return list(groups.values())


# Learning the slot map again is the one routing step that does I/O, and the two clients do
# it differently: a hand-written pair.


def learn_slots(client: Redis | RedisCluster) -> bool:
    """Learn a cluster's slot map again (a slot was missing from it); False where the client
    cannot be asked to (the calls then go the long way, which learns it)."""
    if isinstance(client, RedisCluster):
        return _redispy.learn_slots(client)
    return True


async def alearn_slots(client: AsyncRedis | AsyncRedisCluster) -> bool:
    """:func:`learn_slots` for an asyncio client, which learns its map on first use: then
    it initializes as a whole (the map, its command parser, and what ``aclose`` closes)."""
    if isinstance(client, AsyncRedisCluster):
        if unmapped(client):
            await client.initialize()
            return True
        return await _redispy.alearn_slots(client)
    return True


_LOST = (rex.ConnectionError, rex.TimeoutError)  # a node that did not answer


def learn_lost(client: Redis | RedisCluster, error: BaseException) -> None:
    """After a lost node, learn the cluster's slots again before redis-py's cluster client is
    asked to send a call: it finds an FCALL's keys by asking its default node (COMMAND
    GETKEYS), and when that node is the lost one, the question fails outside the handling
    that would replace it, so the client would ask the dead node for ever, past the failover.
    Learning the slots also picks the default node afresh (the first primary)."""
    if isinstance(client, RedisCluster) and isinstance(error, _LOST):
        with suppress(rex.RedisError, rex.RedisClusterException):  # none answers: next time
            _redispy.learn_slots(client)


async def alearn_lost(client: AsyncRedis | AsyncRedisCluster, error: BaseException) -> None:
    """:func:`learn_lost` for redis-py's asyncio cluster client: flag it to learn its slots, its
    default node and the node it asks for keys before its next command, as its own handler
    of a lost node does."""
    if isinstance(client, AsyncRedisCluster) and isinstance(error, _LOST):
        flag_relearn(client)


def node_named(node_of: Callable[[ScriptCall], str | None] | None, call: ScriptCall) -> str | None:
    """The node ``call`` goes to, as ``node_of`` names it (None: a standalone server), for
    its failure to name."""
    return None if node_of is None else node_of(call)
