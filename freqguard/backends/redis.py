"""Redis and Redis Cluster backends, sync and async.

Each runs the policy function of ``freqguard/lua/policy.lua`` by FCALL, one call per slot of
a hit. The library is loaded with FUNCTION LOAD under a name that carries a digest of its
code (so versions side by side never clash), on first use and again whenever a server answers
that it lacks it: after ``FUNCTION FLUSH``, or on a new node; inside pipelines too. Redis
persists and replicates functions, so a failover keeps them. Redis 7.0 or newer is required.

Calls go straight to the node that owns their slot, over that node's own connection: redis-py
would otherwise ask the server for an FCALL's keys (``COMMAND GETKEYS``) first, one more round
trip per call. ``hit_many`` sends one pipeline per node; replies come back in input order, and
calls on one key keep their order because one node receives them in order. A redirection or a
lost node falls back to the cluster client, which follows it and refreshes its slot map.

Replies are binary (see the script's header) and read with ``NEVER_DECODE``, so clients made
with ``decode_responses=True`` work too. Every redis-py error becomes
:class:`~freqguard.BackendUnavailable` at one boundary (:func:`_boundary`), with the original
as its cause.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any

from redis import Redis
from redis import exceptions as rex
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import PipelineCommand
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.client import NEVER_DECODE
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from freqguard.backends.base import Reply, ScriptCall
from freqguard.clock import Clock, SystemClock
from freqguard.errors import BackendUnavailable
from freqguard.script import expand

__all__ = ["FUNCTION", "LIBRARY", "AsyncRedisBackend", "RedisBackend"]

_SOURCE = resources.files("freqguard.lua").joinpath("policy.lua").read_text(encoding="utf-8")
#: the name of the library and of its one function
FUNCTION = "freqguard_" + hashlib.sha1(_SOURCE.encode("utf-8")).hexdigest()[:12]
#: the library's code, as FUNCTION LOAD takes it
LIBRARY = _SOURCE.replace("__LIBRARY__", FUNCTION)

# Errors that mean "ask the cluster client, which follows redirections and refreshes slots".
_REROUTE = (rex.MovedError, rex.AskError, rex.TryAgainError, rex.ConnectionError)
_RAW = {NEVER_DECODE: True}


def function_args(call: ScriptCall) -> tuple[Any, ...]:
    """FCALL's arguments: the function, numkeys, the record key, then ARGV (see the script
    header). Every key of one call is a field of one record: same partition, same policy."""
    now = "" if call.now is None else call.now
    fields = []
    record = ""
    for layout, key in zip(call.plan.layouts, call.keys, strict=True):
        record, field = layout.record_and_field(key)
        fields.append(field)
    return ("FCALL", FUNCTION, 1, record, now, call.cost, call.mode, call.plan.text, *fields)


def _missing(result: object) -> bool:
    """Whether a reply says the server lacks the library (never loaded, or flushed)."""
    return isinstance(result, rex.ResponseError) and "Function not found" in str(result)


@contextmanager
def _boundary() -> Iterator[None]:
    """The one place redis-py errors become freqguard errors."""
    try:
        yield
    except rex.RedisError as exc:
        raise BackendUnavailable(f"redis failed: {type(exc).__name__}: {exc}") from exc


def _slot(args: tuple[Any, ...]) -> int:
    return key_slot(args[3].encode("utf-8", "surrogatepass"))


class RedisBackend:
    """Runs the policy function on a standalone ``redis.Redis`` or a
    ``redis.cluster.RedisCluster``.

    Args:
        client: the redis-py client; its timeouts and retries are the caller's to set
            (``backend_from_url`` sets short timeouts and no retries).
        clock: what ``acquire`` sleeps on (default :class:`SystemClock`); decisions use the
            server's time unless the Guard pins one.
    """

    def __init__(self, client: Redis | RedisCluster, *, clock: Clock | None = None) -> None:
        self.client = client
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._cluster = isinstance(client, RedisCluster)

    def _load(self) -> None:
        # on a cluster this goes to every primary
        self.client.function_load(LIBRARY, replace=True)

    def _node(self, args: tuple[Any, ...]) -> Redis:
        assert isinstance(self.client, RedisCluster)
        node = self.client.nodes_manager.get_node_from_slot(_slot(args))
        return self.client.get_redis_connection(node)

    def _fcall(self, client: Redis | RedisCluster, args: tuple[Any, ...]) -> bytes:
        try:
            return client.execute_command(*args, **_RAW)  # type: ignore[no-untyped-call,no-any-return]
        except rex.ResponseError as exc:
            if not _missing(exc):
                raise
        self._load()
        return client.execute_command(*args, **_RAW)  # type: ignore[no-untyped-call,no-any-return]

    def execute(self, call: ScriptCall) -> Reply:
        args = function_args(call)
        with _boundary():
            if not self._cluster:
                return expand(call.plan, self._fcall(self.client, args))
            try:
                data = self._fcall(self._node(args), args)
            except _REROUTE:
                data = self._fcall(self.client, args)
            return expand(call.plan, data)

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        if len(calls) <= 1:
            return [self.execute(call) for call in calls]
        batch = [function_args(call) for call in calls]
        with _boundary():
            if not isinstance(self.client, RedisCluster):
                data = self._pipeline(self.client, batch)
            else:
                data = [b""] * len(calls)
                by_node: dict[str, tuple[ClusterNode, list[int]]] = {}
                for index, args in enumerate(batch):
                    node = self.client.nodes_manager.get_node_from_slot(_slot(args))
                    by_node.setdefault(node.name, (node, []))[1].append(index)
                for node, indices in by_node.values():
                    # input order within a node: same-key calls stay in order
                    connection = self.client.get_redis_connection(node)
                    sub = self._pipeline(connection, [batch[i] for i in indices])
                    for index, reply in zip(indices, sub, strict=True):
                        data[index] = reply
            return [expand(call.plan, d) for call, d in zip(calls, data, strict=True)]

    def _pipeline(self, client: Redis, batch: list[tuple[Any, ...]]) -> list[bytes]:
        pipe = client.pipeline(transaction=False)
        for args in batch:
            pipe.execute_command(*args, **_RAW)  # type: ignore[no-untyped-call]
        results: list[object] = pipe.execute(raise_on_error=False)
        if any(_missing(r) for r in results):
            self._load()
        replies = []
        for args, result in zip(batch, results, strict=True):
            if _missing(result):
                result = self._fcall(client, args)  # in order, after the failed ones' peers
            elif self._cluster and isinstance(result, _REROUTE):
                result = self._fcall(self.client, args)
            elif isinstance(result, Exception):
                raise result
            replies.append(result)
        return replies  # type: ignore[return-value]

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"RedisBackend({self.client!r})"


class AsyncRedisBackend:
    """The asyncio twin of :class:`RedisBackend`, over ``redis.asyncio`` clients."""

    def __init__(
        self, client: AsyncRedis | AsyncRedisCluster, *, clock: Clock | None = None
    ) -> None:
        self.client = client
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._cluster = isinstance(client, AsyncRedisCluster)

    async def _fcall(self, args: tuple[Any, ...]) -> bytes:
        try:
            return await self.client.execute_command(*args, **_RAW)  # type: ignore[no-any-return]
        except rex.ResponseError as exc:
            if not _missing(exc):
                raise
        await self.client.function_load(LIBRARY, replace=True)
        return await self.client.execute_command(*args, **_RAW)  # type: ignore[no-any-return]

    async def aexecute(self, call: ScriptCall) -> Reply:
        return (await self.aexecute_many([call]))[0]

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        batch = [function_args(call) for call in calls]
        with _boundary():
            if isinstance(self.client, AsyncRedisCluster):
                results = await self._cluster_batch(self.client, batch)
            elif len(batch) == 1:
                results = [await self._fcall(batch[0])]
            else:
                pipe = self.client.pipeline(transaction=False)
                for args in batch:
                    pipe.execute_command(*args, **_RAW)
                results = await pipe.execute(raise_on_error=False)
            data = await self._settle(batch, results)
            return [expand(call.plan, d) for call, d in zip(calls, data, strict=True)]

    @staticmethod
    async def _cluster_batch(
        client: AsyncRedisCluster, batch: list[tuple[Any, ...]]
    ) -> list[object]:
        if client._initialize:  # a new client learns its slot map on first use
            await client.initialize()
        by_node: dict[str, tuple[AsyncClusterNode, list[PipelineCommand]]] = {}
        for index, args in enumerate(batch):
            node = client.nodes_manager.get_node_from_slot(_slot(args))
            by_node.setdefault(node.name, (node, []))[1].append(
                PipelineCommand(index, *args, **_RAW)
            )
        nodes = list(by_node.values())
        if len(nodes) == 1:
            await nodes[0][0].execute_pipeline(nodes[0][1])
        else:
            await asyncio.gather(*(node.execute_pipeline(cmds) for node, cmds in nodes))
        results: list[object] = [None] * len(batch)
        for _, commands in nodes:
            for command in commands:
                results[command.position] = command.result
        return results

    async def _settle(self, batch: list[tuple[Any, ...]], results: list[object]) -> list[bytes]:
        """Redo, in order, the calls that met a missing library or a redirection; raise
        other errors."""
        if any(_missing(r) for r in results):
            await self.client.function_load(LIBRARY, replace=True)
        replies = []
        for args, result in zip(batch, results, strict=True):
            if _missing(result) or (self._cluster and isinstance(result, _REROUTE)):
                result = await self._fcall(args)
            elif isinstance(result, Exception):
                raise result
            replies.append(result)
        return replies  # type: ignore[return-value]

    async def aclose(self) -> None:
        await self.client.aclose()

    def __repr__(self) -> str:
        return f"AsyncRedisBackend({self.client!r})"
