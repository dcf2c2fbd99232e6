"""The Redis backend's calls: framed, routed, sent on lanes, reloaded, errors translated (every
public operation raises, from redis-py's error, the one ``_boundary.translate`` gives)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, NoReturn

from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import AskError, ConnectionError, MovedError, SlotNotCoveredError

from freqguard.backends import _routing as routing
from freqguard.backends._boundary import ERRORS, Unreplicated, translate, unconnected
from freqguard.backends._durability import Durability
from freqguard.backends._lanes import AsyncJob, AsyncLane, aexchange_all
from freqguard.backends._library import ATTEMPTS, Read, again, missing
from freqguard.backends._redispy import aclose_client, sentinel_pools
from freqguard.backends._resp import (
    ASKING,
    RAW,
    check_bins,
    check_client,
    chunks,
    encode,
    function_args,
    record_key,
    refuse_renamed,
)
from freqguard.backends._settle import CLAIM, LOAD, Settling, raise_failed
from freqguard.clock import Clock, SystemClock, check_clock
from freqguard.errors import BackendUnavailable, ConfigError, FreqGuardError
from freqguard.script.calls import Reply, ScriptCall, unpack

from .prepare import AsyncPreparation  # the generated sync copy imports its own

__all__ = ["AsyncRedisBackend"]

_Group = tuple[AsyncLane, list[int], list[bytes]]  # a lane, its calls' positions, packed


class AsyncRedisBackend:
    """Runs the policy function on a standalone Redis server or a Redis Cluster.

    Calls go on lanes of the client's own connections (:class:`AsyncLane`), each straight to
    the node that owns its slot; a batch goes as one write per node, the nodes at once.

    Before its first call it asks the server what it is, once (``_inspect``): a standalone
    client aimed at a cluster node is a :class:`~freqguard.ConfigError`, and an evicting
    ``maxmemory-policy`` a warning; and before its first call of each policy, that the
    store's clients keep its records with the same ``bins`` (``_claims``).

    Args:
        client: the redis-py client (``Redis`` or ``RedisCluster``); its timeouts and retries
            are the caller's to set (``backend_from_url`` sets short timeouts, no retries).
        clock: what ``acquire`` sleeps on (default :class:`SystemClock`); decisions use the
            server's time unless the Guard pins one.
        wait_replicas: after an admission, wait until this many replicas hold it (``WAIT``,
            sent with the calls); fewer within ``wait_timeout`` fail the admitted hits with
            :class:`~freqguard.BackendUnavailable`; 0 (default): none. See docs/operations.md.
        wait_timeout: seconds to wait for them (0.001-60, default 0.1; less than the client's
            socket timeout); only with ``wait_replicas``.
        bins: share the records of many partition values in this many hashes a policy (1 to
            2^32; fewer bytes, more server time); 0 (default): a hash each. See docs/redis.md.
        scripts: how calls reach the policy function: ``"functions"`` (Redis Functions,
            Redis 7.0+), ``"eval"`` (EVALSHA scripts, for stores without Functions), or
            ``"auto"`` (default): Functions unless the store refuses them.

    Raises:
        ConfigError: no redis-py client of this kind (a URL: ``backend_from_url``), a bad
            ``wait_replicas``, ``wait_timeout``, ``bins`` or ``scripts``.
    """

    #: On a cluster, the node each call goes to (``host:port``): the guard's circuit
    #: breaker keeps one circuit per node. None on a standalone server (one node).
    node_of: Callable[[ScriptCall], str | None] | None = None

    def __init__(
        self,
        client: AsyncRedis | AsyncRedisCluster,
        *,
        clock: Clock | None = None,
        wait_replicas: int = 0,
        wait_timeout: float | None = None,
        bins: int = 0,
        scripts: str = "auto",
        **renamed: NoReturn,
    ) -> None:
        refuse_renamed(renamed, owner := type(self).__name__)
        check_client(client, (AsyncRedis, AsyncRedisCluster), owner)
        self.bins = check_bins(bins)  # the guard builds its keys by it
        self._durability = durability = Durability(wait_replicas, wait_timeout, client)
        self._wait = durability.wait
        self.client = client
        self.clock: Clock = check_clock(clock, f"{owner}(clock=...)") or SystemClock()
        self._cluster = isinstance(client, AsyncRedisCluster)
        if isinstance(client, AsyncRedisCluster):
            self.node_of = routing.node_names(client)
        self._slot_of = routing.slot_of(self._cluster)
        self._owner_of = routing.owners(client)
        self._lanes: dict[int, tuple[object, AsyncLane]] = {}
        self._direct = self._cluster or not routing.one_connection(client)  # or refused
        # the one-call path sends no WAIT: with wait_replicas, every call goes as a batch
        self._fast = self._direct and not self._wait
        self._ready = AsyncPreparation(client, self._cluster, self.bins, scripts, bool(self._wait))

    async def aexecute(self, call: ScriptCall) -> Reply:
        """Run one call.

        Raises:
            BackendUnavailable: Redis failed (the redis-py error is its ``__cause__``).
            ConfigError: the client is standalone and the server a cluster node.
        """
        calls = (call,)
        try:
            if self._fast and not self._ready.wanted(call) and not routing.unmapped(self.client):
                results = await self._send_one(call)
            else:  # the first calls, the first of a policy's, those that must learn the slots
                await self._ready.prepare(calls)
                results = await self._send(calls)
            if not isinstance(results[0], Exception):  # the common case: nothing to settle
                return unpack(call.part, results[0])  # type: ignore[arg-type]
            return (await self._settle(calls, results))[0]
        except ERRORS as exc:
            raise translate(exc, self.client) from exc

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        """Run calls in order (calls on one key see each other's effects); raises as
        :meth:`aexecute`, and ``PartialFailure`` on a cluster where some nodes answered and
        others failed: each call's reply or error (a failure of every call as it came)."""
        if len(calls) == 1:  # a step of a multi-part operation: the lone call's own path
            return [await self.aexecute(calls[0])]
        if not calls:
            return []
        try:
            await self._ready.prepare(calls)
            return await self._settle(calls, await self._send(calls))
        except ERRORS as exc:
            raise translate(exc, self.client) from exc

    async def aclose(self) -> None:
        """Give the lanes' connections back and close the client."""
        try:
            await self._forget_lanes()
            await aclose_client(self.client)
            for pool in sentinel_pools(self.client):
                await pool.disconnect()
        except ERRORS as exc:
            raise translate(exc, self.client) from exc

    def __repr__(self) -> str:
        return f"AsyncRedisBackend({self.client!r})"

    # One way for every call: framed, routed and sent (_send), then settled (_settle.py).

    async def _send_one(self, call: ScriptCall) -> list[object]:
        """:meth:`_send` for the common case, a lone call, without a batch's bookkeeping."""
        packed, key = encode(call, self._ready.library)
        try:
            return await self._lane(key).exchange(packed, 1)
        except SlotNotCoveredError:  # a hole in the slot map: the batch's way learns it
            return await self._send((call,))
        except routing.REROUTE as exc:  # settled: the long way
            return [exc]

    async def _send(self, calls: Sequence[ScriptCall]) -> list[object]:
        """Each call's result, a reply or an error in its place, in input order: framed,
        grouped by the node that owns its key, each node's in one write, the nodes at once
        (calls on one key keep their order); followed by WAIT where an admission must reach
        the replicas."""
        wait = self._durability.frame(calls)
        if not self._direct:  # one connection: WAIT after the calls counts them
            results: list[object] = [await self._command(call) for call in calls]
            if not wait:
                return results
            try:
                acked = await self.client.execute_command(  # type: ignore[no-untyped-call,unused-ignore]
                    "WAIT", self._durability.replicas, self._durability.timeout_ms
                )
            except ERRORS as exc:  # refused (an ACL without +wait): as over a lane, applied
                acked = exc
            return self._durability.acked([*results, acked], calls)
        library = self._ready.library
        if not self._cluster:  # one lane; framed as the batch is sent
            count = len(calls) + bool(wait)
            streamed = await self._lane(b"").stream(lambda: chunks(calls, wait, library), count)
            return self._durability.acked(streamed, calls) if wait else streamed
        encoded = [encode(call, library) for call in calls]
        return await self._per_node(calls, encoded, lambda ix: (b"".join(ix), len(ix), list))

    async def _settle(self, calls: Sequence[ScriptCall], results: list[object]) -> list[Reply]:
        """Each call's reply, from its result: the steps its error asks for run (a step's
        calls settled again) until every result is a reply or a failure; then the failures
        raised (``_settle.raise_failed``)."""
        results = list(results)
        settling = Settling(self._cluster, self.bins)
        where: dict[int, str | None] = {}  # a rerouted call's node, named before the long way
        while (step := settling.next_step(calls, results)) is not None:
            what, positions = step
            again = [calls[i] for i in positions]
            if what == LOAD:
                redone = await self._reload(again, settling.atomic())
            elif what == CLAIM:
                await self._ready.reclaim(again)
                redone = await self._send(again)
            else:
                for index in positions:
                    where[index] = routing.node_named(self.node_of, calls[index])
                redone = await self._reroute(again, [results[i] for i in positions])
            for index, result in zip(positions, redone, strict=True):
                results[index] = result
        replies: list[Any] = []
        failed: dict[int, FreqGuardError] = {}  # an error a node's calls share: one failure
        for index, (call, result) in enumerate(zip(calls, results, strict=True)):
            if not isinstance(result, Exception):
                replies.append(unpack(call.part, result))  # type: ignore[arg-type]
                continue
            error = failed.get(id(result))
            if error is None:
                node = where[index] if index in where else routing.node_named(self.node_of, call)
                error = failed[id(result)] = self._failed(result, node, call)
            replies.append(error)
        if failed:
            raise_failed(replies, results, self._cluster)
        return replies

    async def _reload(self, calls: Sequence[ScriptCall], atomic: bool) -> list[object]:
        """Calls that found the library missing, again behind its load, each node's at once;
        ``atomic``: in transactions no flush can come between (see ``_library.again``)."""
        library = self._ready.library
        encoded = [encode(call, library) for call in calls]
        slot_of = self._slot_of
        return await self._per_node(
            calls, encoded, lambda ix: again(library, ix, atomic, slot_of), keyed=True
        )

    async def _per_node(
        self,
        calls: Sequence[ScriptCall],
        encoded: list[tuple[bytes, bytes]],
        frame: Callable[[Any], tuple[bytes, int, Read]],
        keyed: bool = False,
    ) -> list[object]:
        """Encoded calls sent to the nodes that own their keys, each node's framed by
        ``frame`` (of its packed calls, or ``keyed``: its calls as encoded) and followed by
        its WAIT, the nodes at once; each call's result in input order (a node's failure:
        given to each of its calls on a cluster, raised on a standalone server)."""
        groups = await self._groups(encoded)
        framed = [frame([encoded[i] for i in ix] if keyed else packed) for _, ix, packed in groups]
        waits = [self._durability.frame([calls[i] for i in ix]) for _, ix, _ in groups]
        jobs = [
            (lane, data + wait, count + bool(wait))
            for (lane, _, _), (data, count, _), wait in zip(groups, framed, waits, strict=True)
        ]
        answers = await self._exchange_all(jobs)
        results: list[object] = [None] * len(calls)
        for (_, indices, _), (_, _, read), wait, answer in zip(
            groups, framed, waits, answers, strict=True
        ):
            part = [calls[i] for i in indices]
            if isinstance(answer, Exception):
                done: list[object] = [answer] * len(indices)  # settled: the long way
            elif wait:
                done = self._durability.acked(answer, part, read)
            else:
                done = read(answer)
            for index, result in zip(indices, done, strict=True):
                results[index] = result
        return results

    async def _reroute(self, calls: Sequence[ScriptCall], errors: list[object]) -> list[object]:
        """Calls a redirection or a lost node stopped, the long way: each call's result (an
        error when the long way failed); an error a node's calls share is what its first
        call got for every other when that failed."""
        results: list[object] = []
        lost: dict[int, Exception] = {}
        for call, error in zip(calls, errors, strict=True):
            if id(error) in lost:
                results.append(lost[id(error)])
                continue
            try:
                results.append(await self._long_way(call, error))  # type: ignore[arg-type]
            except ERRORS as exc:
                lost[id(error)] = exc
                results.append(exc)
        return results

    async def _long_way(self, call: ScriptCall, error: Exception) -> object:
        """A call's result after a redirection or a lost node: the slots learned again, it
        is sent on a lane (with its WAIT, where asked) to the slot's owner as now known, or
        (ASK: a slot being migrated) behind ASKING to where ASK points. Never through the
        cluster client's command API, whose retries send a call again when its reply is
        lost (counted twice), nor again when its connection was lost after it was sent
        (it may have run): that raises."""
        await self._drop_lanes(error)
        if isinstance(error, ConnectionError) and not unconnected(error):
            raise error  # lost after it was sent, maybe applied: sent again, counted twice
        if isinstance(error, MovedError) and not await routing.alearn_slots(self.client):
            # the cluster client follows a MOVED of its own and keeps it: ask it of the key
            await self.client.execute_command("EXISTS", record_key(call))  # type: ignore[no-untyped-call,unused-ignore]
        elif isinstance(error, AskError):
            return await self._asking(call, error)
        return (await self._send((call,)))[0]  # settled again: a new node lacks the library

    async def _asking(self, call: ScriptCall, error: AskError) -> bytes:
        """A call ASK sent elsewhere, sent there behind ASKING, with its WAIT; again behind
        the library's load when that node lacks it (a node new to the cluster)."""
        owner = routing.owner_at(self.client, error.host, error.port)
        if owner is None:  # a node the client does not know yet: learn the cluster
            await routing.alearn_slots(self.client)
            if (owner := routing.owner_at(self.client, error.host, error.port)) is None:
                raise error
        wait, library = self._durability.frame([call]), self._ready.library
        lane, packed = self._lane_of(owner), encode(call, library)[0]
        _, *answer = await lane.exchange(ASKING + packed + wait, 2 + bool(wait))
        (result,) = self._durability.acked(answer, [call]) if wait else answer
        if missing(result):
            n = library.loads
            loaded, *answer = await lane.exchange(
                library.load + ASKING + packed + wait, n + 2 + bool(wait)
            )
            answer = answer[n:]
            (result,) = self._durability.acked(answer, [call]) if wait else answer
            result = library.after_load(loaded, result)
        if isinstance(result, Exception):
            raise result
        return result  # type: ignore[return-value]

    async def _drop_lanes(self, error: Exception) -> None:
        """Before calls go the long way: drop the lanes; after a lost node, learn the slots."""
        if self._lanes:
            await self._forget_lanes()
            await routing.alearn_lost(self.client, error)

    def _failed(self, exc: Exception, where: str | None, call: ScriptCall) -> FreqGuardError:
        """The error of ``call``, which failed on the node ``where`` (its ``__cause__``), or
        the refusal settling put in its place (another bins setting)."""
        if isinstance(exc, ConfigError):
            return exc
        error = translate(exc, self.client, record_key(call))
        error.__cause__ = exc
        if isinstance(error, BackendUnavailable):  # not a ConfigError, which names no node
            error.node = where
            if isinstance(exc, Unreplicated):  # applied: the engine decides with it
                error.applied = unpack(call.part, exc.reply)
        return error

    async def _exchange_all(self, jobs: list[AsyncJob]) -> list[list[object] | Exception]:
        """Every lane's job at once (``aexchange_all``); a lane's failure is raised on a
        standalone server, given on a cluster (its calls go the long way, or fail alone)."""
        answers = await aexchange_all(jobs)
        if not self._cluster:
            for answer in answers:
                if isinstance(answer, Exception):
                    raise answer
        return answers

    async def _groups(self, encoded: list[tuple[bytes, bytes]]) -> list[_Group]:
        """Encoded calls by lane (``per_lane``); a slot the map lacks: learnt again, once.
        A map to learn again after a lost node that cannot be (yet): the map it has."""
        if routing.unmapped(self.client):
            with suppress(*ERRORS):
                await routing.alearn_slots(self.client)
        try:
            return routing.per_lane(encoded, self._lane)
        except SlotNotCoveredError:
            await routing.alearn_slots(self.client)
            return routing.per_lane(encoded, self._lane)

    def _lane(self, key: bytes) -> AsyncLane:  # to the node that owns key (or the server)
        return self._lane_of(self._owner_of(key))

    def _lane_of(self, owner: Any) -> AsyncLane:
        """The lane to a node (what ``owners`` gives for a key, or ``owner_at``)."""
        entry = self._lanes.get(id(owner))
        if entry is None or entry[0] is not owner:
            entry = self._lanes[id(owner)] = (owner, AsyncLane(owner))
        return entry[1]

    async def _forget_lanes(self) -> None:  # each lane's connection given back
        lanes, self._lanes = self._lanes, {}
        for _, lane in lanes.values():
            await lane.aclose()

    async def _command(self, call: ScriptCall) -> object:
        """The call's reply through redis-py's command API (it follows redirections), or its
        refusal in its place. A missing library is loaded (or a bin claimed) and the call
        repeated, ``ATTEMPTS`` tries: the API cannot hold the load and the call together."""
        args = function_args(call, self._ready.library)
        for attempt in range(ATTEMPTS - 1, -1, -1):
            try:
                return await self.client.execute_command(*args, **RAW)  # type: ignore[no-untyped-call,unused-ignore]
            except ERRORS as exc:  # the library missing, the call's bin unclaimed, refused
                mended = await self._ready.recovered(exc, call, attempt > 0)
                if isinstance(mended, Exception):
                    return mended
                if not mended:
                    raise
        raise AssertionError(ATTEMPTS)  # never: the last attempt returns or raises
