"""What freqguard asks of redis-py beyond calling commands, in one place, across the
releases it supports (5.0 to 8.x).

Everything here is found by feature, never by version number. Most of it is public API
whose shape changed between releases (``get_connection`` took a command name until 5.3 and
warns about one since). Four answers are read from redis-py's own state, where the release
keeps it (:data:`PRIVATE`): which node owns a slot (the cluster client's slot map, sparing
the key's re-encoding), whether an async cluster client must learn its slots again (its
``_initialize`` flag), whether an idle asyncio connection was closed by the server (its
stream reader's end of file), and how often a ``Retry`` retries in a release without
``get_retries``. Each has a public fallback, which a release without that state gets, and
which the tests run too (``PRIVATE = False``): the slot from ``get_node_from_key``, the
slots learnt again by the cluster client's own handling of the call sent the long way, the
closed connection found by the connection's own poll, no retries assumed.
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections.abc import Callable
from typing import Any

from redis import Redis
from redis import exceptions as rex
from redis.asyncio import ConnectionPool as AsyncConnectionPool
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.connection import Connection as AsyncConnection
from redis.asyncio.connection import SSLConnection as AsyncSSLConnection
from redis.cluster import RedisCluster
from redis.connection import ConnectionPool, SSLConnection
from redis.crc import key_slot

from freqguard.errors import ConfigError

__all__ = [
    "PRIVATE",
    "NodePool",
    "aclose_client",
    "address",
    "aget_connection",
    "alearn_slots",
    "aserver_closed",
    "async_node_pool",
    "close_client",
    "connected",
    "flag_relearn",
    "get_connection",
    "learn_slots",
    "node_of_key",
    "one_connection",
    "pool_of",
    "sentinel_pools",
    "single_connection",
    "socket_timeout",
    "tls",
    "unmapped",
]

#: Whether redis-py's own state may be read where it is there (see the module's docs); the
#: tests set it False to run every public fallback.
PRIVATE = True


def _takes_name(method: Callable[..., Any]) -> bool:
    """Whether a pool's ``get_connection`` needs a command name (redis-py before 5.3)."""
    parameter = inspect.signature(method).parameters.get("command_name")
    return parameter is not None and parameter.default is inspect.Parameter.empty


_SYNC_NAME = ("FCALL",) if _takes_name(ConnectionPool.get_connection) else ()
_ASYNC_NAME = ("FCALL",) if _takes_name(AsyncConnectionPool.get_connection) else ()


def get_connection(pool: Any) -> Any:
    """A connection from a sync pool, as its release takes it."""
    return pool.get_connection(*_SYNC_NAME)


async def aget_connection(pool: Any) -> Any:
    """A connection from an asyncio pool, as its release takes it."""
    return await pool.get_connection(*_ASYNC_NAME)


def single_connection(client: object) -> bool:
    """Whether a client keeps one connection to itself (``single_connection_client=True``):
    the sync client holds it as ``connection``, the asyncio one says so outright."""
    if isinstance(client, (RedisCluster, AsyncRedisCluster)):
        return False
    return bool(
        getattr(client, "single_connection_client", False)
        or getattr(client, "connection", None) is not None
    )


def one_connection(client: object) -> bool:
    """Whether a client keeps one connection (:func:`single_connection`): the backend then
    sends its calls one by one through the client's own command API.

    Raises:
        ConfigError: such a client retries a command (redis-py's default ``Retry`` does):
            a call whose reply timed out after the server applied it would be sent again,
            one hit counted twice (the backend's own connections send a call once).
    """
    if not single_connection(client):
        return False
    get_retry = getattr(client, "get_retry", None)
    retries = _retries(get_retry() if callable(get_retry) else None)
    if retries > 0:
        raise ConfigError(
            "a redis-py client of one connection (single_connection_client=True) that "
            f"retries a command ({retries} retries) would count a hit whose "
            "reply timed out twice: make it with retry=Retry(NoBackoff(), 0), or leave "
            "out single_connection_client (the backend sends each call once on its own "
            "connections)"
        )
    return True


def _retries(retry: object) -> int:
    """How many times ``retry`` (a redis-py ``Retry``, or None) sends a command again:
    ``get_retries()`` where the release has it, its own count where not (5.2 has none), 0
    where neither can be read (the public fallback: nothing is refused on a guess)."""
    if retry is None:
        return 0
    get_retries = getattr(retry, "get_retries", None)
    if callable(get_retries):
        return int(get_retries())
    return int(getattr(retry, "_retries", 0)) if PRIVATE else 0


# -- cluster nodes ---------------------------------------------------------------------------


def node_of_key(client: RedisCluster | AsyncRedisCluster) -> Callable[[bytes], Any]:
    """What gives the node that owns a key's slot, by the client's slot map; raising
    ``SlotNotCoveredError`` for a slot missing from it."""
    manager = getattr(client, "nodes_manager", None) if PRIVATE else None
    lookup = getattr(manager, "get_node_from_slot", None)
    if lookup is None:
        public: Callable[[Any], Any] = client.get_node_from_key

        def by_key(key: bytes) -> Any:
            try:
                return public(key)
            except (KeyError, IndexError):
                raise rex.SlotNotCoveredError(f"slot {key_slot(key)} is not covered") from None

        return by_key

    def by_slot(key: bytes) -> Any:
        slot = key_slot(key)
        try:
            return lookup(slot)
        except (KeyError, IndexError):  # how the asyncio client says it is not in its map
            raise rex.SlotNotCoveredError(f"slot {slot} is not covered by the cluster") from None

    return by_slot


class NodePool:
    """Connections to one node of an asyncio cluster client, as a pool gives them: the
    node's own (its ``acquire_connection`` and ``release``, shared with the cluster client)
    where the release has both, else a pool of freqguard's own made with the node's
    connection settings (one more connection a node). One a node and client
    (:func:`async_node_pool`)."""

    __slots__ = ("__weakref__", "_node", "_pool")

    def __init__(self, client: AsyncRedisCluster, node: AsyncClusterNode) -> None:
        self._node = node
        self._pool: AsyncConnectionPool | None = None
        if not _NODE_RELEASES:  # the node's own settings (host and port among them)
            kwargs: dict[str, Any] = dict(node.connection_kwargs)
            self._pool = AsyncConnectionPool(connection_class=node.connection_class, **kwargs)

    async def get_connection(self) -> Any:
        if self._pool is not None:
            return await aget_connection(self._pool)
        return self._node.acquire_connection()

    async def release(self, connection: Any) -> None:
        if self._pool is not None:
            await self._pool.release(connection)
        else:
            self._node.release(connection)  # type: ignore[attr-defined,unused-ignore]

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.disconnect()


_NODE_RELEASES = callable(getattr(AsyncClusterNode, "release", None)) and callable(
    getattr(AsyncClusterNode, "acquire_connection", None)
)


_NODE_POOLS: weakref.WeakKeyDictionary[AsyncRedisCluster, dict[str, NodePool]] = (
    weakref.WeakKeyDictionary()
)


def async_node_pool(client: AsyncRedisCluster, node: AsyncClusterNode) -> NodePool:
    """The connections of one node of an asyncio cluster client (see :class:`NodePool`),
    made once a node and client (a node the client replaced gets new ones)."""
    pools = _NODE_POOLS.get(client)
    if pools is None:
        pools = _NODE_POOLS[client] = {}
    found = pools.get(node.name)
    # a node the client replaced (it learnt its slots again) has connections of its own;
    # a pool of freqguard's own serves its address whatever the client's node object
    if found is None or (found._pool is None and found._node is not node):
        found = pools[node.name] = NodePool(client, node)
    return found


def close_client(client: Redis | RedisCluster) -> None:
    """Close a sync client (the sync counterpart of :func:`aclose_client`). A cluster client's
    nodes are clients of their own, closed by its ``close``, but a node's client closes its
    pool only where it made that pool itself: one made by ``RedisCluster.from_url`` (as
    :func:`~freqguard.backends.urls.backend_from_url` makes it) is given its pool, which its
    close leaves open, connections and all; each node's pool is disconnected here."""
    nodes: list[Any] = []
    if isinstance(client, RedisCluster):
        nodes = list(client.get_nodes())  # type: ignore[no-untyped-call]
    client.close()
    for node in nodes:
        pool = getattr(getattr(node, "redis_connection", None), "connection_pool", None)
        if pool is not None:
            pool.disconnect()


async def aclose_client(client: AsyncRedis | AsyncRedisCluster) -> None:
    """Close an asyncio client, and on a cluster what its ``aclose`` may leave open: the
    pools of freqguard's own made for its nodes (none where the nodes' own connections
    serve), and every connection while it is flagged to learn its slots again (after a lost
    node, until its next command, which freqguard's own lanes may never send), when its
    ``aclose`` closes nothing: it learns them first (its own close of everything when no
    node answers)."""
    if isinstance(client, AsyncRedisCluster):
        with contextlib.suppress(rex.RedisError, rex.RedisClusterException, OSError):
            await client.initialize()  # nothing when it is not flagged
    await client.aclose()
    if isinstance(client, AsyncRedisCluster):
        for pool in (_NODE_POOLS.pop(client, None) or {}).values():
            await pool.aclose()


def learn_slots(client: RedisCluster) -> bool:
    """Learn a sync cluster client's slot map again, where its state allows; False when
    it does not (the call then goes the long way, whose errors make the client learn it)."""
    manager = getattr(client, "nodes_manager", None) if PRIVATE else None
    initialize = getattr(manager, "initialize", None)
    if initialize is None:
        return False
    initialize()
    return True


async def alearn_slots(client: AsyncRedisCluster) -> bool:
    """Learn an asyncio cluster client's slot map again, where its state allows; False
    when it does not (the call then goes the long way, whose errors make it learn)."""
    manager = getattr(client, "nodes_manager", None) if PRIVATE else None
    initialize = getattr(manager, "initialize", None)
    if initialize is None:
        return False
    await initialize()
    return True


def unmapped(client: object) -> bool:
    """Whether an asyncio cluster client is flagged to learn its slot map before its next
    command (new, or after a lost node); False where that is not known."""
    return PRIVATE and getattr(client, "_initialize", False) is True


def flag_relearn(client: AsyncRedisCluster) -> None:
    """After a lost node, flag an asyncio cluster client to learn its slots, its default
    node and the node it asks for keys before its next command, as its own handler of a
    lost node does; where its state is not known, the long way's own handling does it."""
    if PRIVATE and hasattr(client, "_initialize"):
        client._initialize = True


def connected(connection: Any) -> bool:
    """Whether a sync connection holds a socket: its own state where the release keeps it,
    else its public ``is_connected`` where it has one; False when neither says (the caller
    then asks ``connect()``, which does nothing on a connected one, at a cost: it goes
    through the connection's ``Retry``)."""
    if PRIVATE and hasattr(connection, "_sock"):
        return connection._sock is not None
    return bool(getattr(connection, "is_connected", False))


async def aserver_closed(connection: Any) -> bool:
    """Whether the server closed an idle asyncio connection (restarted, or timed the client
    out): read from its stream's end of file where the connection keeps one, else asked of
    its poll (which also says there is stray data: reconnect either way)."""
    reader = getattr(connection, "_reader", None) if PRIVATE else None
    if reader is not None:
        return bool(reader.at_eof())
    try:
        return bool(await getattr(connection, _CAN_READ)())
    except (rex.ConnectionError, OSError):
        return True


# the asyncio connection's poll: can_read since 8.0 (can_read_destructive then deprecated)
_CAN_READ = (
    "can_read" if callable(getattr(AsyncConnection, "can_read", None)) else ("can_read_destructive")
)


# -- what a client connects to and how --------------------------------------------------------


def pool_of(client: Redis | AsyncRedis) -> Any:
    """A standalone client's connection pool (a Sentinel client's: to the master it found)."""
    return client.connection_pool


def _settings(client: object) -> dict[str, Any]:
    """The settings a client's connections are made with: its pool's (a Redis or Sentinel
    client) or its nodes' (a cluster client); empty when not known."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None) or getattr(client, "connection_kwargs", None)
    if kwargs is None:
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", None)
    return kwargs if isinstance(kwargs, dict) else {}


_TLS_CONNECTIONS = (SSLConnection, AsyncSSLConnection)


def tls(client: object) -> bool | None:
    """Whether a client's connections speak TLS; None when not known (a cluster client made
    as it connects, before there is one)."""
    pool = getattr(client, "connection_pool", None)
    found = getattr(pool, "connection_class", None) or _settings(client).get("connection_class")
    return issubclass(found, _TLS_CONNECTIONS) if isinstance(found, type) else None


def address(client: object) -> str:
    """Where a standalone client connects, as a URL's address part (for a client of
    redis-py's Sentinel, the master it last found)."""
    master = getattr(getattr(client, "connection_pool", None), "master_address", None)
    if master is not None:
        return f"{master[0]}:{master[1]}"
    kwargs = _settings(client)
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def database(client: object) -> object:
    """The database number a standalone client selects (0 when unset)."""
    return _settings(client).get("db", 0)


def socket_timeout(client: object) -> float | None:
    """The socket timeout (seconds) a client's connections are made with, None when unset
    or not known."""
    value = _settings(client).get("socket_timeout")
    return float(value) if isinstance(value, (int, float)) else None


def sentinel_pools(client: object) -> list[Any]:
    """The connection pools to the sentinels behind a client of redis-py's Sentinel (none for
    other clients): closing the client leaves them open."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return [sentinel.connection_pool for sentinel in getattr(manager, "sentinels", ())]
