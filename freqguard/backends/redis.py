"""Redis and Redis Cluster backends, sync and async.

Each runs the policy function of ``freqguard/lua/policy.lua`` by FCALL, one call per slot of
a hit. The library is loaded with FUNCTION LOAD under a name that carries a digest of its
code (so versions side by side never clash), on first use and again whenever a server answers
that it lacks it: after ``FUNCTION FLUSH``, or on a new node; inside pipelines too, and in a
way no concurrent flush can defeat (see :func:`_again`). Redis persists and replicates
functions, so a failover keeps them. Redis 7.0 or newer is required.

Calls are framed here (:func:`encode`) and sent on connections borrowed from the redis-py
client's pool (``freqguard.backends._lanes``), not through its command API, which costs
more on the client than the rest of a decision. They go straight to the node that owns their
slot: redis-py would otherwise ask the server for an FCALL's keys (``COMMAND GETKEYS``) first,
one more round trip per call. ``hit_many`` sends one batch per node, all before reading any
reply; replies come back in input order, and calls on one key keep their order because one
node receives them in order. A redirection or a lost node falls back to the cluster client,
which follows it and refreshes its slot map.

Replies are binary (see the script's header) and read without decoding, so clients made
with ``decode_responses=True`` work too. Every redis-py error becomes
:class:`~freqguard.BackendUnavailable` in one place (:func:`_unavailable`), with the original
as its cause; a standalone client aimed at a cluster node is a :class:`~freqguard.ConfigError`
(asked once, before the first call, and known from a MOVED reply). That first question also
reads the server's ``maxmemory-policy`` and warns of one that can evict. Calls that never grow
what is stored (peek, refund, reset) go to a twin of the function that runs when the server
is out of memory (:data:`FUNCTION_NOGROW`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any, TypeVar

from redis import Redis
from redis import exceptions as rex
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster
from redis.connection import Connection
from redis.crc import key_slot

from freqguard.backends._lanes import AsyncLane, Lane
from freqguard.backends.base import Reply, ScriptCall
from freqguard.clock import Clock, SystemClock
from freqguard.errors import BackendUnavailable, ConfigError, FreqGuardError
from freqguard.script import HIT, unpack
from freqguard.strategies.base import Mark

__all__ = ["FUNCTION", "FUNCTION_NOGROW", "LIBRARY", "AsyncRedisBackend", "RedisBackend"]

_SOURCE = resources.files("freqguard.lua").joinpath("policy.lua").read_text(encoding="utf-8")
#: the name of the library and of its function, for hits
FUNCTION = "freqguard_" + hashlib.sha1(_SOURCE.encode("utf-8")).hexdigest()[:12]
#: the same function flagged allow-oom, for the calls that never grow what is stored (CHECK,
#: REFUND, RESET, a HIT of cost 0): Redis runs them when used memory is past maxmemory
FUNCTION_NOGROW = FUNCTION + "_nogrow"
#: the library's code, as FUNCTION LOAD takes it
LIBRARY = _SOURCE.replace("__LIBRARY__", FUNCTION)

_L = TypeVar("_L")  # a lane, sync or async
# Errors that mean "ask the cluster client, which follows redirections and refreshes slots".
_REROUTE = (rex.MovedError, rex.AskError, rex.TryAgainError, rex.ConnectionError)
# What redis-py raises: its cluster client's own errors (unreachable at start, a slot no node
# serves) derive from Exception, not RedisError.
_ERRORS = (rex.RedisError, rex.RedisClusterException)
# What sends a call the long way round: a reroute, or a slot missing from the client's map
# (which the long way learns again).
_REMAP = (*_REROUTE, rex.SlotNotCoveredError)
_CLUSTERS = (RedisCluster, AsyncRedisCluster)
_RAW = {NEVER_DECODE: True}


def _record_and_fields(call: ScriptCall) -> tuple[str, list[bytes]]:
    """The record key and the field of each state: every key of one call is a field of one
    record (same partition, same policy)."""
    texts, layouts = call.texts, call.plan.layouts
    return layouts[0].record(texts), [layout.field(texts) for layout in layouts]


def function_args(call: ScriptCall) -> tuple[Any, ...]:
    """FCALL's arguments, for redis-py's ``execute_command``: the function, numkeys, the
    record key, then ARGV (see the script header)."""
    record, fields = _record_and_fields(call)
    now = "" if call.now is None else call.now
    name = FUNCTION if call.mode == HIT and call.cost else FUNCTION_NOGROW
    args = ("FCALL", name, 1, record, now, call.cost, call.mode, call.plan.text, *fields)
    return args + _marks(call)


def _marks(call: ScriptCall) -> tuple[bytes, ...]:
    """A refund's marks as ARGV (see the script header): none, or one per state."""
    if call.marks is None:
        return ()
    return tuple([_mark(m) for m in call.marks])


def _mark(mark: Mark | None) -> bytes:
    if mark is None:
        return b""
    if isinstance(mark, tuple):  # a bucket's: tat, back, born
        return b":".join([b"%d" % v for v in mark])
    return b"%d" % mark


_CHUNK = 16  # calls per write when a batch is streamed (see Lane.stream)
# Per plan text: the wire frames of FCALL's constant arguments (see encode), the last one
# naming FUNCTION_NOGROW.
_FRAMES: dict[str, tuple[bytes, bytes, bytes]] = {}


def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def encode(call: ScriptCall) -> tuple[bytes, bytes]:
    """FCALL in the wire protocol (RESP), and the record key it touches.

    Built here rather than by redis-py's packer, which encodes and frames every argument on
    every call; only the record, time, cost, mode and fields change between calls of one
    plan, and the rest is framed once.
    """
    text = call.plan.text
    frame = _FRAMES.get(text)
    marks = _marks(call)
    if frame is None or marks:
        count = 8 + len(call.plan.layouts) + len(marks)
        head = b"*%d\r\n%s%s%s" % (count, _bulk(b"FCALL"), _bulk(FUNCTION.encode()), _bulk(b"1"))
        nogrow = head.replace(_bulk(FUNCTION.encode()), _bulk(FUNCTION_NOGROW.encode()))
        frame = (head, _bulk(text.encode()), nogrow)
        if not marks:  # a refund's frame counts its marks: not the plan's constant one
            _FRAMES.setdefault(text, frame)
    record, fields = _record_and_fields(call)
    key = record.encode("utf-8", "surrogatepass")
    now = b"" if call.now is None else b"%d" % call.now
    cost = b"%d" % call.cost
    packed = b"%s$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$1\r\n%d\r\n%s%s" % (
        frame[0] if call.mode == HIT and call.cost else frame[2],
        len(key),
        key,
        len(now),
        now,
        len(cost),
        cost,
        call.mode,
        frame[1],
        b"".join([b"$%d\r\n%s\r\n" % (len(f), f) for f in (*fields, *marks)]),
    )
    return packed, key


def _chunks(calls: Sequence[ScriptCall]) -> Iterator[bytes]:
    """The calls packed, ``_CHUNK`` to a write (see Lane.stream)."""
    for start in range(0, len(calls), _CHUNK):
        yield b"".join([encode(call)[0] for call in calls[start : start + _CHUNK]])


# "Function not found" (never loaded, FUNCTION FLUSH, a new node): the calls that met it are
# sent again behind the library's load, on the connection they failed on. FUNCTION LOAD goes
# without REPLACE: a library already there is refused before its code is compiled, so many
# callers recovering at once cost one compilation.
_LOAD = b"*3\r\n$8\r\nFUNCTION\r\n$4\r\nLOAD\r\n" + _bulk(LIBRARY.encode())
_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"
_ATOMIC = 64  # calls per transaction: the server runs each whole, serving no one else
_ATTEMPTS = 3  # calls through redis-py's command API: loads and tries in all (see _command)
_Read = Callable[[Sequence[object]], list[object]]


def _again(
    calls: Sequence[tuple[bytes, bytes]], atomic: bool, slot_of: Callable[[bytes], int]
) -> tuple[bytes, int, _Read]:
    """Encoded calls that found the library missing, framed to go again behind its load.

    First the load and then the calls: one load for them all. A flush from another client can
    still come between the two; the calls that meet one go again ``atomic``: in transactions
    (MULTI, the load, the calls, EXEC) that nothing can come between, so they cannot miss
    again. A transaction's keys must share a cluster slot: one (or more, past ``_ATOMIC``
    calls) per slot, by ``slot_of``; calls of one slot keep their order.

    Returns:
        The bytes to send, the number of replies they get, and what turns those replies into
        each call's result, in the order of ``calls``.
    """
    if not atomic:
        return (
            _LOAD + b"".join([packed for packed, _ in calls]),
            1 + len(calls),
            lambda replies: [_after(replies[0], result) for result in replies[1:]],
        )
    runs: list[list[int]] = []  # each transaction's calls, by position in ``calls``
    slots = [slot_of(key) for _, key in calls]
    for index in sorted(range(len(calls)), key=slots.__getitem__):  # stable: order kept
        run = runs[-1] if runs else None
        if run is None or len(run) == _ATOMIC or slots[run[0]] != slots[index]:
            runs.append([index])
        else:
            run.append(index)

    def read(replies: Sequence[object]) -> list[object]:
        results: list[object] = [None] * len(calls)
        at = 0
        for run in runs:
            queued, done = replies[at : at + 2 + len(run)], replies[at + 2 + len(run)]
            at += 3 + len(run)
            if isinstance(done, list):  # it ran: the load's answer, then each call's
                answers = [_after(done[0], result) for result in done[1:]]
            else:  # refused as it was queued (out of memory, a slot that moved): none ran
                refused = next((r for r in queued if isinstance(r, Exception)), done)
                answers = [refused] * len(run)
            for index, answer in zip(run, answers, strict=True):
                results[index] = answer
        return results

    parts: list[bytes] = []
    for run in runs:
        parts += [_MULTI, _LOAD, *[calls[index][0] for index in run], _EXEC]
    return b"".join(parts), len(calls) + 3 * len(runs), read


def _after(loaded: object, result: object) -> object:
    """A call's result after the load: the load's own error where it failed (for another
    reason than being there already) and the call found no library."""
    failed = isinstance(loaded, Exception) and "already exists" not in str(loaded)
    return loaded if failed and _missing(result) else result


def _slot(key: bytes) -> int:
    return 0  # a standalone server: any keys in one transaction


def _by_lane(
    encoded: list[tuple[bytes, bytes]], lane_of: Callable[[bytes], _L]
) -> list[tuple[_L, list[int], list[bytes]]]:
    """Encoded calls grouped by the lane (node) that owns their key: each group's input
    positions and packed calls, in input order."""
    by_lane: dict[int, tuple[_L, list[int], list[bytes]]] = {}
    for index, (packed, key) in enumerate(encoded):
        lane = lane_of(key)
        group = by_lane.get(id(lane))
        if group is None:
            group = by_lane[id(lane)] = (lane, [], [])
        group[1].append(index)
        group[2].append(packed)
    return list(by_lane.values())


def _single_connection(client: object) -> bool:
    """Whether a client keeps one connection to itself (``single_connection_client=True``):
    freqguard then drives it through its own command API instead of borrowing from its pool."""
    return bool(
        getattr(client, "_single_connection_client", False)  # redis.Redis
        or getattr(client, "single_connection_client", False)  # redis.asyncio.Redis
    )


def _missing(result: object) -> bool:
    """Whether a reply says the server lacks the library (never loaded, or flushed)."""
    return isinstance(result, rex.ResponseError) and "Function not found" in str(result)


def _address(client: object) -> str:
    """Where a standalone client connects, as a URL's address part."""
    pool = getattr(client, "connection_pool", None)
    kwargs: dict[str, Any] = getattr(pool, "connection_kwargs", {})
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def _cluster_node(client: object) -> ConfigError:
    """The error for a standalone client (a ``redis://`` URL) aimed at a cluster node: it
    would decide the keys of that node's slots and get MOVED for every other key."""
    where = _address(client)
    return ConfigError(
        f"{where} is a Redis Cluster node: use redis+cluster://{where} (or a RedisCluster "
        "client), which sends each key to the node that owns its slot"
    )


_POLICY = "maxmemory-policy"
_log = logging.getLogger("freqguard")


def _warn_evicting(answer: Mapping[Any, Any], client: object) -> None:
    """Log a warning if CONFIG GET maxmemory-policy's answer (one server's, or one per
    cluster node) names a policy that evicts. Every record has a TTL, so volatile-* policies
    evict them as allkeys-* do, and an evicted record forgets what a recipient was sent."""
    per_node = {_address(client): answer} if _POLICY in answer else answer
    evicting = []
    for node, reply in per_node.items():
        policy = reply.get(_POLICY) if isinstance(reply, Mapping) else None
        if isinstance(policy, bytes):
            policy = policy.decode()
        if policy is not None and policy != "noeviction":
            evicting.append(f"{node} has maxmemory-policy {policy}")
    if evicting:
        _log.warning(
            "%s: when full, Redis evicts keys, and every freqguard record is a key with a "
            "TTL (volatile-* policies evict those too); an evicted record forgets what was "
            "sent and admits what the caps should deny. Set maxmemory-policy noeviction "
            "(see 'When memory runs out' in freqguard's docs/redis.md).",
            "; ".join(evicting),
        )


def _unavailable(exc: Exception, client: object) -> FreqGuardError:
    """The one place redis-py errors become freqguard errors (raised ``from`` them): a
    :class:`~freqguard.BackendUnavailable`, or a :class:`~freqguard.ConfigError` for a MOVED
    reply to a standalone client (a cluster client follows them)."""
    if isinstance(exc, rex.MovedError) and not isinstance(client, _CLUSTERS):
        return _cluster_node(client)
    return BackendUnavailable(f"redis failed: {type(exc).__name__}: {exc}")


@contextmanager
def _boundary(client: object) -> Iterator[None]:
    """Where redis-py errors become freqguard errors (see :func:`_unavailable`)."""
    try:
        yield
    except _ERRORS as exc:
        raise _unavailable(exc, client) from exc


def _inspection(client: Any, cluster: bool) -> Generator[Callable[[], Any], Any, None]:
    """What a backend checks once, before its first call, written once for sync and async:
    it yields each request (a callable whose reply, awaited for async clients, is sent back;
    a redis-py error is thrown in instead). A cluster node behind a standalone client is a
    :func:`_cluster_node` error; a ``maxmemory-policy`` that can evict is warned of
    (:func:`_warn_evicting`)."""
    if not cluster:
        try:
            info = yield lambda: client.info("cluster")
            enabled = info.get("cluster_enabled")
        except rex.ResponseError:  # INFO refused (ACL, renamed): a MOVED reply tells
            enabled = None
        if enabled:
            raise _cluster_node(client)
    try:
        if cluster:
            policies = yield lambda: client.config_get(_POLICY, target_nodes=client.PRIMARIES)
        else:
            policies = yield lambda: client.config_get(_POLICY)
    except _ERRORS as exc:  # CONFIG refused (ACL, renamed, managed): nothing to say;
        if not (isinstance(exc, rex.ResponseError) or cluster):
            raise  # a standalone server that cannot answer cannot decide either
        policies = {}  # one primary down must not fail calls to the others
    _warn_evicting(policies, client)


class RedisBackend:
    """Runs the policy function on a standalone ``redis.Redis`` or a
    ``redis.cluster.RedisCluster``.

    Before its first call it asks the server what it is, once: a standalone client aimed at a
    cluster node raises :class:`~freqguard.ConfigError` on every call, and a
    ``maxmemory-policy`` that can evict records is logged as a warning on the ``freqguard``
    logger (every record has a TTL, so ``volatile-*`` policies evict them too).

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
        self._lanes: dict[int, tuple[Redis, Lane]] = {}
        self._direct = self._cluster or not _single_connection(client)
        self._inspected = False
        self._inspecting = threading.Lock()  # threads that come first together ask once

    def _inspect(self) -> None:
        """Once, before the first call: refuse a cluster node behind a standalone client
        (:func:`_cluster_node`), and warn of a server that may evict (:func:`_warn_evicting`).
        Failing to reach the server leaves it to the next call."""
        with self._inspecting:
            if not self._inspected:
                self._inspection()

    def _inspection(self) -> None:
        steps = _inspection(self.client, self._cluster)
        try:
            step = next(steps)
            while True:
                try:
                    reply = step()
                except _ERRORS as exc:
                    step = steps.throw(exc)
                else:
                    step = steps.send(reply)
        except StopIteration:
            self._inspected = True

    def _load(self) -> None:
        # on a cluster this goes to every primary
        self.client.function_load(LIBRARY, replace=True)

    def _lane(self, key: bytes) -> Lane:
        """The lane to the node that owns ``key`` (the client itself when standalone)."""
        client = self.client
        if isinstance(client, RedisCluster):
            slot = key_slot(key)
            try:
                node = client.nodes_manager.get_node_from_slot(slot)
            except rex.SlotNotCoveredError:  # a hole in the map: learn it again (once)
                client.nodes_manager.initialize()
                node = client.nodes_manager.get_node_from_slot(slot)
            client = client.get_redis_connection(node)
        entry = self._lanes.get(id(client))
        if entry is None or entry[0] is not client:
            entry = self._lanes[id(client)] = (client, Lane(client))
        return entry[1]

    def _forget_lanes(self) -> None:
        lanes, self._lanes = self._lanes, {}
        for _, lane in lanes.values():
            lane.close()

    def _command(self, call: ScriptCall) -> bytes:
        """The call through redis-py's own command API (which also follows redirections). A
        missing library is loaded and the call repeated, :data:`_ATTEMPTS` tries in all: the
        client's API cannot hold the load and the call in one transaction."""
        args = function_args(call)
        attempts = _ATTEMPTS
        while True:
            try:
                return self.client.execute_command(*args, **_RAW)  # type: ignore[no-untyped-call,no-any-return]
            except rex.ResponseError as exc:
                attempts -= 1
                if not (_missing(exc) and attempts):
                    raise
            self._load()

    def _send(self, call: ScriptCall, packed: bytes, key: bytes) -> bytes:
        try:
            results = self._lane(key).exchange(packed, 1)
            if _missing(results[0]):
                self._reload([call], results)
            (result,) = results
            if isinstance(result, Exception):
                raise result
            return result  # type: ignore[return-value]
        except _REROUTE:
            if not self._cluster:
                raise
            self._forget_lanes()  # a slot moved or a node is gone: the cluster client follows
            return self._command(call)

    def execute(self, call: ScriptCall) -> Reply:
        try:  # not _boundary(): a context manager costs a noticeable part of a hit
            if not self._inspected:
                self._inspect()
            if not self._direct:
                return unpack(call.plan, self._command(call))
            packed, key = encode(call)
            return unpack(call.plan, self._send(call, packed, key))
        except _ERRORS as exc:
            raise _unavailable(exc, self.client) from exc

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        if len(calls) <= 1 or not self._direct:
            return [self.execute(call) for call in calls]
        with _boundary(self.client):
            if not self._inspected:
                self._inspect()
            if not self._cluster:  # input order: same-key calls stay in order
                results = self._lane(b"").stream(lambda: _chunks(calls), len(calls))
            else:
                results = self._cluster_batch(calls)
            if any(_missing(result) for result in results):
                self._reload(calls, results)
            data: list[bytes] = []
            for call, result in zip(calls, results, strict=True):
                if self._cluster and isinstance(result, _REROUTE):
                    self._forget_lanes()
                    result = self._command(call)
                elif isinstance(result, Exception):
                    raise result
                data.append(result)  # type: ignore[arg-type]
            return [unpack(call.plan, d) for call, d in zip(calls, data, strict=True)]

    def _reload(self, calls: Sequence[ScriptCall], results: list[object]) -> None:
        """Send again, in place, the calls whose result says the library is missing: each
        node's behind its load, then atomically those that missed again (see :func:`_again`)."""
        slot_of = key_slot if self._cluster else _slot
        for atomic in (False, True):
            missing = [i for i, result in enumerate(results) if _missing(result)]
            encoded = [encode(calls[i]) for i in missing]
            for lane, indices, _ in _by_lane(encoded, self._lane):
                data, count, read = _again([encoded[i] for i in indices], atomic, slot_of)
                try:
                    redone = read(lane.exchange(data, count))
                except _REROUTE as exc:
                    if not self._cluster:
                        raise
                    redone = [exc] * len(indices)  # the long way, in execute_many
                for index, result in zip(indices, redone, strict=True):
                    results[missing[index]] = result

    def _cluster_batch(self, calls: Sequence[ScriptCall]) -> list[object]:
        """One batch per node, in input order within it: same-key calls stay in order."""
        groups = _by_lane([encode(call) for call in calls], self._lane)
        results: list[object] = [None] * len(calls)
        if len(groups) == 1:
            lane, indices, packed_calls = groups[0]
            answers = [lane.exchange(b"".join(packed_calls), len(packed_calls))]
        else:
            answers = self._scatter(groups)
        for (_, indices, _), replies in zip(groups, answers, strict=True):
            for index, reply in zip(indices, replies, strict=True):
                results[index] = reply
        return results

    @staticmethod
    def _scatter(groups: list[tuple[Lane, list[int], list[bytes]]]) -> list[list[object]]:
        """Send every node its batch before reading any reply, so the nodes work at once.
        A node that cannot be reached answers each call with the error; the cluster client
        then redoes them (see execute_many)."""
        sent: list[Connection | BaseException] = []
        for lane, _, packed_calls in groups:
            try:
                sent.append(lane.send(b"".join(packed_calls)))
            except _REROUTE as exc:
                sent.append(exc)
        answers: list[list[object]] = []
        read = 0  # connections handed to receive, which gives them back whatever happens
        try:
            for (lane, indices, _), connection in zip(groups, sent, strict=True):
                read += 1
                if not isinstance(connection, BaseException):
                    try:
                        answers.append(lane.receive(connection, len(indices)))
                        continue
                    except _REROUTE as exc:
                        connection = exc
                answers.append([connection] * len(indices))
        finally:  # an error that ends the batch: the unread connections are out of step
            for (lane, _, _), connection in list(zip(groups, sent, strict=True))[read:]:
                if not isinstance(connection, BaseException):
                    lane.abandon(connection)
        return answers

    def close(self) -> None:
        self._forget_lanes()
        self.client.close()

    def __repr__(self) -> str:
        return f"RedisBackend({self.client!r})"


class AsyncRedisBackend:
    """The asyncio twin of :class:`RedisBackend`, over ``redis.asyncio`` clients; concurrent
    tasks share one connection per node (see :class:`AsyncLane`)."""

    def __init__(
        self, client: AsyncRedis | AsyncRedisCluster, *, clock: Clock | None = None
    ) -> None:
        self.client = client
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._cluster = isinstance(client, AsyncRedisCluster)
        self._lanes: dict[int, tuple[object, AsyncLane]] = {}
        self._direct = self._cluster or not _single_connection(client)
        self._loading: asyncio.Task[object] | None = None
        self._inspected = False
        self._inspecting: asyncio.Task[None] | None = None

    async def _inspect(self) -> None:
        """Once, before the first calls: :meth:`RedisBackend._inspect`, one task for every
        call that comes meanwhile."""
        task = self._inspecting
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            task = self._inspecting = asyncio.ensure_future(self._inspection())
        await asyncio.shield(task)

    async def _inspection(self) -> None:
        steps = _inspection(self.client, self._cluster)
        try:
            step = next(steps)
            while True:
                try:
                    reply = await step()
                except _ERRORS as exc:
                    step = steps.throw(exc)
                else:
                    step = steps.send(reply)
        except StopIteration:
            self._inspected = True

    async def _load(self) -> None:
        """Load the library once for every task that found it missing at the same time."""
        task = self._loading
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            load = self.client.function_load(LIBRARY, replace=True)
            task = self._loading = asyncio.ensure_future(load)
        await asyncio.shield(task)

    def _lane(self, key: bytes) -> AsyncLane:
        client = self.client
        owner: AsyncRedis | AsyncClusterNode
        if isinstance(client, AsyncRedisCluster):
            slot = key_slot(key)
            try:
                owner = client.nodes_manager.get_node_from_slot(slot)
            except KeyError:  # how redis-py's async client says the slot is not in its map
                raise rex.SlotNotCoveredError(
                    f"slot {slot} is not covered by the cluster"
                ) from None
        else:
            owner = client
        entry = self._lanes.get(id(owner))
        if entry is None or entry[0] is not owner:
            entry = self._lanes[id(owner)] = (owner, AsyncLane(owner))
        return entry[1]

    async def _forget_lanes(self) -> None:
        lanes, self._lanes = self._lanes, {}
        for _, lane in lanes.values():
            await lane.aclose()

    async def _command(self, call: ScriptCall) -> bytes:
        """:meth:`RedisBackend._command`, awaited."""
        args = function_args(call)
        attempts = _ATTEMPTS
        while True:
            try:
                return await self.client.execute_command(*args, **_RAW)  # type: ignore[no-any-return]
            except rex.ResponseError as exc:
                attempts -= 1
                if not (_missing(exc) and attempts):
                    raise
            await self._load()

    async def aexecute(self, call: ScriptCall) -> Reply:
        client = self.client
        if not self._inspected:  # the first calls take the long way
            return (await self.aexecute_many([call]))[0]
        if self._direct and not (isinstance(client, AsyncRedisCluster) and client._initialize):
            # the common case first, without a batch's bookkeeping; a redirection or a lost
            # node is redone by aexecute_many
            packed, key = encode(call)
            try:
                results = await self._lane(key).exchange(packed, 1)
                if _missing(results[0]):
                    await self._reload([call], results)
                (result,) = results
            except _ERRORS as exc:
                if not (self._cluster and isinstance(exc, _REMAP)):
                    raise _unavailable(exc, client) from exc
            else:
                if not isinstance(result, Exception):
                    return unpack(call.plan, result)  # type: ignore[arg-type]
                if not (self._cluster and isinstance(result, _REROUTE)):
                    raise _unavailable(result, client) from result
        return (await self.aexecute_many([call]))[0]

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        with _boundary(self.client):
            if not self._inspected:
                await self._inspect()
            if not self._direct:
                return [unpack(call.plan, await self._command(call)) for call in calls]
            client = self.client
            if isinstance(client, AsyncRedisCluster) and client._initialize:
                await client.initialize()  # a new client learns its slot map on first use
            # one batch per node, in input order within it: same-key calls stay in order
            encoded = [encode(call) for call in calls]
            try:
                groups = _by_lane(encoded, self._lane)
            except rex.SlotNotCoveredError:  # a hole in the map: learn it again (once)
                assert isinstance(client, AsyncRedisCluster)
                await client.nodes_manager.initialize()
                groups = _by_lane(encoded, self._lane)
            sent = [lane.exchange(b"".join(packed), len(packed)) for lane, _, packed in groups]
            results: list[object] = [None] * len(calls)
            for (_, indices, _), answer in zip(groups, await self._gather(sent), strict=True):
                if isinstance(answer, BaseException):
                    answer = [answer] * len(indices)  # each redone below
                for index, result in zip(indices, answer, strict=True):
                    results[index] = result
            if any(_missing(result) for result in results):
                await self._reload(calls, results)
            data: list[bytes] = []
            for call, result in zip(calls, results, strict=True):
                if self._cluster and isinstance(result, _REROUTE):
                    await self._forget_lanes()  # a slot moved or a node is gone
                    result = await self._command(call)
                elif isinstance(result, Exception):
                    raise result
                data.append(result)  # type: ignore[arg-type]
            return [unpack(call.plan, d) for call, d in zip(calls, data, strict=True)]

    async def _gather(
        self, sent: Sequence[Awaitable[list[object]]]
    ) -> list[list[object] | BaseException]:
        """The replies of calls sent to several lanes at once. A lane that failed gives its
        error instead, to be redone the long way on a cluster; anything else is raised."""
        answers: list[list[object] | BaseException]
        if len(sent) == 1:  # gather would wrap it in a task, a loop turn later
            try:
                answers = [await sent[0]]
            except _ERRORS as exc:
                answers = [exc]
        else:
            answers = await asyncio.gather(*sent, return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException) and not (
                self._cluster and isinstance(answer, _REROUTE)
            ):
                raise answer
        return answers

    async def _reload(self, calls: Sequence[ScriptCall], results: list[object]) -> None:
        """:meth:`RedisBackend._reload`, every node's at once."""
        slot_of = key_slot if self._cluster else _slot
        for atomic in (False, True):
            missing = [i for i, result in enumerate(results) if _missing(result)]
            encoded = [encode(calls[i]) for i in missing]
            groups = _by_lane(encoded, self._lane)
            framed = [_again([encoded[i] for i in ix], atomic, slot_of) for _, ix, _ in groups]
            sent = [
                lane.exchange(data, count)
                for (lane, _, _), (data, count, _) in zip(groups, framed, strict=True)
            ]
            answers = await self._gather(sent)
            for (_, indices, _), (_, _, read), answer in zip(groups, framed, answers, strict=True):
                redone = (
                    [answer] * len(indices) if isinstance(answer, BaseException) else read(answer)
                )
                for index, result in zip(indices, redone, strict=True):
                    results[missing[index]] = result

    async def aclose(self) -> None:
        await self._forget_lanes()
        await self.client.aclose()

    def __repr__(self) -> str:
        return f"AsyncRedisBackend({self.client!r})"
