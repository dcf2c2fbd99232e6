"""Decisions over time, shared by every worker and host of a service: per policy and rule,
how many hits were allowed and denied in each minute of the last hour, and the contexts
denied most (their digests: never their values).

On a Redis store they live beside the policy's record (``script.keys.policy_key``: one
hash per policy per hour, fields ``{minute}|{rule}|a`` and ``|d``, rule empty for the
policy's own; a sorted set per minute of the digests denied most). Each worker adds its
calls' counts up and writes them as one pipeline at once when idle, then at most every
:data:`INTERVAL` seconds, never in a decision's path (a pipeline a call cost ~5x a hit on
the client: ``benchmarks/service_history.py``); they expire by themselves. On
``memory://`` (one worker) they are kept in its memory. A write that fails is logged (at
most once a minute) and dropped; decisions taken without the store are not written.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import freqguard.service.bodies as bodies
import freqguard.service.schema as schema
from freqguard.decision import Decision
from freqguard.guard import AsyncGuard
from freqguard.script.keys import context_digest, policy_key
from freqguard.service.problems import Problem, log

__all__ = [
    "INTERVAL",
    "MINUTES",
    "TOP_KEPT",
    "TOP_MINUTES",
    "History",
    "MemoryHistory",
    "NoHistory",
    "RedisHistory",
    "bounded",
    "denied_keys",
    "history_for",
    "tally",
]

MINUTES = 60  # the minutes the history holds, the current one last
INTERVAL = 0.25  # seconds at least between two writes of one worker's counts
_TTL = 2 * 3600  # seconds an hour's hash is kept after its last write
_WRITTEN = ("backend", "deny-cache")  # the sources of decisions the store took part in
_QUIET_LOG = 60.0  # seconds between two logged write failures
TOP_KEPT = 100  # keys kept per policy and minute: the most denied (a bounded top list)
TOP_MINUTES = bodies.TOP_MINUTES  # the minutes the top keys are kept, the most a read spans
_TOP_TTL = TOP_MINUTES * 60 + 120


def denied_keys(
    decisions: Sequence[Decision], contexts: Sequence[Mapping[str, Any]], dimensions: Sequence[str]
) -> Counter[str]:
    """The denied hits of a call by key: the digest of the context's dimensions, in the
    policy's order (``script.keys.context_digest``: never the values, which may be a
    message's content); decisions not taken on the store left out."""
    keys: Counter[str] = Counter()
    for decision, context in zip(decisions, contexts, strict=True):
        if not decision.allowed and decision.source in _WRITTEN:
            keys[context_digest(context, dimensions)] += 1
    return keys


def bounded(keys: Counter[str]) -> Counter[str]:
    """``keys``, or its :data:`TOP_KEPT` most denied when it holds more: the top list an
    approximate heavy-hitters count (a key pushed out and back starts again from 0)."""
    return keys if len(keys) <= TOP_KEPT else Counter(dict(keys.most_common(TOP_KEPT)))


def _top(
    found: Mapping[str, Counter[str]], minutes: int, digest: Callable[[str], str] | None
) -> schema.TopKeys:
    rows = [(policy, key, count) for policy, keys in found.items() for key, count in keys.items()]
    rows.sort(key=lambda row: (-row[2], row[0], row[1]))
    shown_keys = [
        schema.TopKey(policy, key if digest is None else digest(key), count)
        for policy, key, count in rows[:TOP_LIST]
    ]
    return schema.TopKeys(minutes=minutes, digested=digest is not None, keys=shown_keys)


TOP_LIST = 20  # keys a read answers


def tally(decisions: Sequence[Decision], counts: Counter[tuple[str, str]]) -> None:
    """Add a call's decisions to ``counts`` by (rule, ``a`` or ``d``): rule ``""``, the
    policy's allowed and denied; a rule's, its denials (``denied_by``: a shadow rule's "no"
    is not one). A rule's allowed is the policy's decisions less its denials, made when
    read (a decision's rule states cost more to build than the rest of this). Added in
    place: a hit's counts are a handful, and a Counter of them made to be added costs
    more than adding them."""
    for decision in decisions:
        if decision.source not in _WRITTEN:
            continue
        if decision.allowed:
            counts["", "a"] += 1
        else:
            counts["", "d"] += 1
            for rule in decision.denied_by:
                counts[rule.id, "d"] += 1


def _counted(decisions: Sequence[Decision]) -> bool:
    """Whether any of a call's decisions is counted (taken on the store)."""
    return any(decision.source in _WRITTEN for decision in decisions)


class History(Protocol):
    """Where the service keeps the counts: :meth:`record` a call's (its decisions, and the
    contexts they were for: a denied one's key, by the policy's ``dimensions``), and
    :meth:`read` them."""

    async def record(
        self,
        policy: str,
        decisions: Sequence[Decision],
        contexts: Sequence[Mapping[str, Any]],
        dimensions: Sequence[str],
    ) -> None: ...

    async def read(self, policies: Mapping[str, Sequence[str]]) -> schema.History: ...

    async def top(
        self, policies: Sequence[str], minutes: int, digest: Callable[[str], str] | None
    ) -> schema.TopKeys: ...

    async def denied(self, policy: str, key: str, minutes: int) -> int: ...

    async def aclose(self) -> None: ...


def _answer(
    policies: Mapping[str, Sequence[str]],
    last: int,
    found: dict[str, dict[int, Counter[tuple[str, str]]]],
) -> schema.History:
    """The series of each policy (its own first, then each of its ``rules``) over the
    :data:`MINUTES` minutes that end with minute ``last`` (minutes since the epoch)."""
    minutes = list(range(last - MINUTES + 1, last + 1))
    series: list[schema.Series] = []
    for policy, rules in policies.items():
        by_minute = [found.get(policy, {}).get(m, Counter()) for m in minutes]
        decided = [c["", "a"] + c["", "d"] for c in by_minute]
        series.append(
            schema.Series(
                policy, None, [c["", "a"] for c in by_minute], [c["", "d"] for c in by_minute]
            )
        )
        for rule in rules:
            denied = [c[rule, "d"] for c in by_minute]
            allowed = [n - d for n, d in zip(decided, denied, strict=True)]
            series.append(schema.Series(policy, rule, allowed, denied))
    return schema.History(minutes=[m * 60 for m in minutes], series=series)


class _Clocked:
    def __init__(self, guard: AsyncGuard) -> None:
        self._clock = guard.clock or guard.backend.clock

    def minute(self) -> int:
        """The current minute, since the epoch, on the guard's clock."""
        return int(self._clock.now() // 60)


class MemoryHistory(_Clocked):
    """The counts in this process (``memory://``: one worker), the last hour's only."""

    def __init__(self, guard: AsyncGuard) -> None:
        super().__init__(guard)
        self._counts: dict[str, dict[int, Counter[tuple[str, str]]]] = {}
        self._keys: dict[tuple[str, int], Counter[str]] = {}

    async def record(
        self,
        policy: str,
        decisions: Sequence[Decision],
        contexts: Sequence[Mapping[str, Any]],
        dimensions: Sequence[str],
    ) -> None:
        if not _counted(decisions):
            return
        keys = denied_keys(decisions, contexts, dimensions)
        now = self.minute()
        kept = self._counts.setdefault(policy, {})
        tally(decisions, kept.setdefault(now, Counter()))
        for old in [m for m in kept if m <= now - MINUTES]:
            del kept[old]
        if keys:
            mine = self._keys.get((policy, now), Counter())
            mine.update(keys)
            self._keys[policy, now] = bounded(mine)
            for old_key in [k for k in self._keys if k[1] <= now - TOP_MINUTES]:
                del self._keys[old_key]

    async def top(
        self, policies: Sequence[str], minutes: int, digest: Callable[[str], str] | None
    ) -> schema.TopKeys:
        now = self.minute()
        found = {p: Counter[str]() for p in policies}
        for (policy, minute), keys in self._keys.items():
            if policy in found and minute > now - minutes:
                found[policy].update(keys)
        return _top(found, minutes, digest)

    async def denied(self, policy: str, key: str, minutes: int) -> int:
        now = self.minute()
        return sum(
            keys[key]
            for (name, minute), keys in self._keys.items()
            if name == policy and minute > now - minutes
        )

    async def read(self, policies: Mapping[str, Sequence[str]]) -> schema.History:
        return _answer(policies, self.minute(), self._counts)

    async def aclose(self) -> None:
        """Nothing to send: the counts die with the process, as its store does."""


class RedisHistory(_Clocked):
    """The counts in the guard's Redis store (standalone, cluster or Sentinel), shared by
    every worker and host of the prefix.

    A call's counts are added to this worker's pending counts, and a writer task sends
    them: at once when it is idle, then what gathered meanwhile at most every
    ``interval`` seconds, as one pipeline. A decision never waits for the write; the
    store's counts lag this worker's by at most ``interval`` and a round trip."""

    def __init__(self, guard: AsyncGuard, client: Any, interval: float = INTERVAL) -> None:
        super().__init__(guard)
        self._client, self._prefix, self.interval = client, guard.prefix, interval
        self._pending: dict[tuple[str, int], Counter[tuple[str, str]]] = {}
        self._pending_keys: dict[tuple[str, int], Counter[str]] = {}
        self._writer: asyncio.Task[None] | None = None
        self._failed_at = -_QUIET_LOG

    def _key(self, policy: str, hour: int) -> str:
        return policy_key(self._prefix, policy, "stats", hour)

    def _top_key(self, policy: str, minute: int) -> str:
        return policy_key(self._prefix, policy, "top", minute)

    async def record(
        self,
        policy: str,
        decisions: Sequence[Decision],
        contexts: Sequence[Mapping[str, Any]],
        dimensions: Sequence[str],
    ) -> None:
        if not _counted(decisions):
            return
        keys = denied_keys(decisions, contexts, dimensions)
        now = self.minute()
        pending = self._pending.get((policy, now))
        if pending is None:
            pending = self._pending[policy, now] = Counter()
        tally(decisions, pending)
        if keys:
            mine = self._pending_keys.get((policy, now), Counter())
            mine.update(keys)
            self._pending_keys[policy, now] = bounded(mine)
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_while_pending())

    async def _write_while_pending(self) -> None:
        try:
            while self._pending:
                await self._write()
                await asyncio.sleep(self.interval)  # what gathers meanwhile goes as one
        finally:
            self._writer = None

    async def _write(self) -> None:
        pending, self._pending = self._pending, {}
        pending_keys, self._pending_keys = self._pending_keys, {}
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for (policy, minute), counts in pending.items():
                    key = self._key(policy, minute // 60)
                    for (rule, outcome), count in counts.items():
                        pipe.hincrby(key, f"{minute % 60}|{rule}|{outcome}", count)
                    pipe.expire(key, _TTL)
                for (policy, minute), keys in pending_keys.items():
                    top = self._top_key(policy, minute)
                    for member, count in keys.items():
                        pipe.zincrby(top, count, member)
                    pipe.zremrangebyrank(top, 0, -TOP_KEPT - 1)  # the most denied stay
                    pipe.expire(top, _TOP_TTL)
                await pipe.execute()
        except Exception as exc:  # the counts are a view: a decision never fails on them
            self._quietly(exc)

    async def flush(self) -> None:
        """Send this worker's pending counts now (before a read, and at shutdown)."""
        if self._pending or self._pending_keys:
            await self._write()

    def _quietly(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._failed_at >= _QUIET_LOG:
            self._failed_at = now
            log.warning("freqguard serve: the decisions' history was not written: %r", exc)

    async def aclose(self) -> None:
        """Send what is pending, and stop the writer."""
        writer = self._writer
        if writer is not None:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        await self.flush()

    async def top(
        self, policies: Sequence[str], minutes: int, digest: Callable[[str], str] | None
    ) -> schema.TopKeys:
        await self.flush()
        now = self.minute()
        async with self._client.pipeline(transaction=False) as pipe:
            for policy in policies:
                for minute in range(now - minutes + 1, now + 1):
                    pipe.zrange(self._top_key(policy, minute), 0, -1, withscores=True)
            replies = iter(await pipe.execute())
        found = {p: Counter[str]() for p in policies}
        for policy in policies:
            for _ in range(minutes):
                for member, score in next(replies):
                    found[policy][_text(member)] += int(score)
        return _top(found, minutes, digest)

    async def denied(self, policy: str, key: str, minutes: int) -> int:
        await self.flush()
        now = self.minute()
        async with self._client.pipeline(transaction=False) as pipe:
            for minute in range(now - minutes + 1, now + 1):
                pipe.zscore(self._top_key(policy, minute), key)
            return sum(int(score or 0) for score in await pipe.execute())

    async def read(self, policies: Mapping[str, Sequence[str]]) -> schema.History:
        await self.flush()
        last = self.minute()
        hours = sorted({(last - MINUTES + 1) // 60, last // 60})
        async with self._client.pipeline(transaction=False) as pipe:
            for policy in policies:
                for hour in hours:
                    pipe.hgetall(self._key(policy, hour))
            replies = await pipe.execute()
        found: dict[str, dict[int, Counter[tuple[str, str]]]] = {}
        index = 0
        for policy in policies:
            by_minute = found.setdefault(policy, {})
            for hour in hours:
                for field, value in replies[index].items():
                    minute_text, rule, outcome = _text(field).split("|")
                    minute = hour * 60 + int(minute_text)
                    by_minute.setdefault(minute, Counter())[rule, outcome] += int(value)
                index += 1
        return _answer(policies, last, found)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class NoHistory:
    """No history kept (``freqguard serve --history off``): a call records nothing, and a
    read is a 404 that says the history is off (never an empty chart that looks quiet)."""

    OFF = "the decisions' history is off (freqguard serve --history off)"

    async def record(self, policy: str, *what: object) -> None:
        return None

    async def read(self, *what: object) -> schema.History:
        raise Problem(404, self.OFF)

    async def top(self, *what: object) -> schema.TopKeys:
        raise Problem(404, self.OFF)

    async def denied(self, *what: object) -> int:
        raise Problem(404, self.OFF)

    async def aclose(self) -> None:
        return None


def history_for(guard: AsyncGuard, kept: bool = True) -> History:
    """The history of ``guard``'s store: in Redis when its backend has a redis-py client,
    else in this process; none (:class:`NoHistory`) unless ``kept``."""
    if not kept:
        return NoHistory()
    client = getattr(guard.backend, "client", None)
    return MemoryHistory(guard) if client is None else RedisHistory(guard, client)
