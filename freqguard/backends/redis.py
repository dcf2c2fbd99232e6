"""Redis and Redis Cluster backends, sync and async.

Each runs ``freqguard/lua/policy.lua`` by EVALSHA, one call per slot of a hit, and reloads the
script on NOSCRIPT (after ``SCRIPT FLUSH``, a restart or a failover), inside pipelines too.
``hit_many`` sends one pipeline per node, built here: calls are grouped by the node that owns
their slot and sent over that node's plain connection, so the batch costs one round trip per
node. Replies come back in input order, and calls on one key keep their order because one
node receives them in order.

Every redis-py error becomes :class:`~freqguard.BackendUnavailable` at one boundary
(:func:`_boundary`), with the original as its cause.
"""

from __future__ import annotations

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
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from freqguard.backends.base import Reply, ScriptCall
from freqguard.clock import Clock, SystemClock
from freqguard.errors import BackendUnavailable

__all__ = ["SCRIPT", "SCRIPT_SHA", "AsyncRedisBackend", "RedisBackend"]

SCRIPT = resources.files("freqguard.lua").joinpath("policy.lua").read_text(encoding="utf-8")
SCRIPT_SHA = hashlib.sha1(SCRIPT.encode("utf-8")).hexdigest()

# Errors that mean "ask the cluster client, which follows redirections and refreshes slots".
_REROUTE = (rex.MovedError, rex.AskError, rex.TryAgainError, rex.ConnectionError)


def script_args(call: ScriptCall) -> tuple[Any, ...]:
    """EVALSHA's arguments after the sha: numkeys, the record key, then ARGV (see the script
    header). Every key of one call is a field of one record: same partition, same policy."""
    now = "" if call.now is None else call.now
    fields = []
    record = ""
    for layout, key in zip(call.plan.layouts, call.keys, strict=True):
        record, field = layout.record_and_field(key)
        fields.append(field)
    return (1, record, now, call.cost, call.mode, *call.plan.argv, *fields)


@contextmanager
def _boundary() -> Iterator[None]:
    """The one place redis-py errors become freqguard errors."""
    try:
        yield
    except rex.RedisError as exc:
        raise BackendUnavailable(f"redis failed: {type(exc).__name__}: {exc}") from exc


def _reply(result: object) -> Reply:
    if isinstance(result, Exception):
        raise result
    return result  # type: ignore[return-value]


def _group_by_slot(calls: Sequence[ScriptCall]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for index, call in enumerate(calls):
        groups.setdefault(key_slot(call.keys[0].encode("utf-8", "surrogatepass")), []).append(index)
    return groups


class RedisBackend:
    """Runs the policy script on a standalone ``redis.Redis`` or a ``redis.cluster.RedisCluster``.

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

    def _eval(self, client: Redis | RedisCluster, call: ScriptCall) -> Reply:
        args = script_args(call)
        try:
            return client.evalsha(SCRIPT_SHA, *args)  # type: ignore[no-any-return]
        except rex.NoScriptError:
            client.script_load(SCRIPT)
            return client.evalsha(SCRIPT_SHA, *args)  # type: ignore[no-any-return]

    def execute(self, call: ScriptCall) -> Reply:
        with _boundary():
            return self._eval(self.client, call)

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        if len(calls) <= 1:
            return [self.execute(call) for call in calls]
        with _boundary():
            if not isinstance(self.client, RedisCluster):
                return self._pipeline(self.client, calls)
            replies: list[Reply] = [[] for _ in calls]
            by_node: dict[str, tuple[ClusterNode, list[int]]] = {}
            for slot, indices in _group_by_slot(calls).items():
                node = self.client.nodes_manager.get_node_from_slot(slot)
                by_node.setdefault(node.name, (node, []))[1].extend(indices)
            for node, indices in by_node.values():
                indices.sort()  # input order within a node: same-key calls stay in order
                connection = self.client.get_redis_connection(node)
                sub = self._pipeline(connection, [calls[i] for i in indices])
                for index, reply in zip(indices, sub, strict=True):
                    replies[index] = reply
            return replies

    def _pipeline(self, client: Redis, calls: Sequence[ScriptCall]) -> list[Reply]:
        pipe = client.pipeline(transaction=False)
        for call in calls:
            pipe.evalsha(SCRIPT_SHA, *script_args(call))
        results: list[object] = pipe.execute(raise_on_error=False)
        if any(isinstance(r, rex.NoScriptError) for r in results):
            client.script_load(SCRIPT)
        replies = []
        for call, result in zip(calls, results, strict=True):
            if isinstance(result, rex.NoScriptError):
                result = self._eval(client, call)  # in order, after the failed ones' peers
            elif self._cluster and isinstance(result, _REROUTE):
                result = self._eval(self.client, call)
            replies.append(_reply(result))
        return replies

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

    async def _eval(self, call: ScriptCall) -> Reply:
        args = script_args(call)
        try:
            return await self.client.evalsha(SCRIPT_SHA, *args)  # type: ignore[no-any-return]
        except rex.NoScriptError:
            await self.client.script_load(SCRIPT)
            return await self.client.evalsha(SCRIPT_SHA, *args)  # type: ignore[no-any-return]

    async def aexecute(self, call: ScriptCall) -> Reply:
        with _boundary():
            return await self._eval(call)

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        if len(calls) <= 1:
            return [await self.aexecute(call) for call in calls]
        with _boundary():
            if isinstance(self.client, AsyncRedisCluster):
                return await self._cluster_batch(self.client, calls)
            pipe = self.client.pipeline(transaction=False)
            for call in calls:
                pipe.evalsha(SCRIPT_SHA, *script_args(call))
            results: list[object] = await pipe.execute(raise_on_error=False)
            return await self._settle(calls, results)

    async def _cluster_batch(
        self, client: AsyncRedisCluster, calls: Sequence[ScriptCall]
    ) -> list[Reply]:
        import asyncio

        by_node: dict[str, tuple[AsyncClusterNode, list[PipelineCommand]]] = {}
        for slot, indices in _group_by_slot(calls).items():
            node = client.nodes_manager.get_node_from_slot(slot)
            commands = by_node.setdefault(node.name, (node, []))[1]
            commands.extend(
                PipelineCommand(i, "EVALSHA", SCRIPT_SHA, *script_args(calls[i])) for i in indices
            )
        for _, commands in by_node.values():
            commands.sort(key=lambda command: command.position)
        await asyncio.gather(*(node.execute_pipeline(cmds) for node, cmds in by_node.values()))
        results: list[object] = [None] * len(calls)
        for _, commands in by_node.values():
            for command in commands:
                results[command.position] = command.result
        return await self._settle(calls, results)

    async def _settle(self, calls: Sequence[ScriptCall], results: list[object]) -> list[Reply]:
        """Redo, in order, the calls that met NOSCRIPT or a redirection; raise other errors."""
        if any(isinstance(r, rex.NoScriptError) for r in results):
            await self.client.script_load(SCRIPT)
        replies = []
        for call, result in zip(calls, results, strict=True):
            if isinstance(result, rex.NoScriptError) or (
                self._cluster and isinstance(result, _REROUTE)
            ):
                result = await self._eval(call)
            replies.append(_reply(result))
        return replies

    async def aclose(self) -> None:
        await self.client.aclose()

    def __repr__(self) -> str:
        return f"AsyncRedisBackend({self.client!r})"
