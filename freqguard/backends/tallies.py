"""Tallies: counts a store keeps beside the policies' records for views of them (the
decision service's decisions per minute, its keys denied most), never for a decision.

A tally is a key holding counters by field, which a write adds to and a read returns;
a *top* tally keeps only its ``kept`` highest counters (an approximate heavy-hitters list).
Each expires by itself ``ttl`` seconds after its last write. :func:`tallies_of` gives a
backend's: in its Redis store (standalone, Cluster or Sentinel; a hash or a sorted set,
each write one pipeline of ``HINCRBY``/``ZINCRBY``), or in this process, expired on the
backend's clock, for any other backend. The keys are the caller's, built by
``script.keys.policy_key`` as every key beside a policy's records is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from freqguard.clock import Clock

__all__ = ["MemoryTallies", "RedisTallies", "Tallies", "tallies_of"]

#: Tallies to add, by key: each counter's increment by field.
Adds = Mapping[str, Mapping[str, int]]


class Tallies(Protocol):
    async def add(self, adds: Adds, ttl: int, tops: Adds, top_ttl: int, kept: int) -> None:
        """Add to tallies (``adds``) and to top tallies (``tops``, each then cut to its
        ``kept`` highest), each to expire ``ttl`` (``top_ttl``) seconds from now."""

    async def read(self, keys: Sequence[str], top: bool = False) -> list[dict[str, int]]:
        """Each key's counters (empty for a key not kept), top tallies when ``top``."""


class MemoryTallies:
    """Tallies in this process, expired on ``clock``; one writer at a time (asyncio)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._kept: dict[str, tuple[float, Counter[str]]] = {}

    async def add(self, adds: Adds, ttl: int, tops: Adds, top_ttl: int, kept: int) -> None:
        now = self._clock.now()
        for key in [key for key, (until, _) in self._kept.items() if until <= now]:
            del self._kept[key]
        for found, lasts, top in ((adds, ttl, False), (tops, top_ttl, True)):
            for key, counts in found.items():
                tally = self._kept.get(key, (0.0, Counter[str]()))[1]
                tally.update(counts)
                if top and len(tally) > kept:  # as ZREMRANGEBYRANK: ties keep the later member
                    ranked = sorted(tally.items(), key=lambda item: (item[1], item[0]))
                    tally = Counter(dict(ranked[len(ranked) - kept :] if kept > 0 else []))
                self._kept[key] = (now + lasts, tally)

    async def read(self, keys: Sequence[str], top: bool = False) -> list[dict[str, int]]:
        now = self._clock.now()
        kept = [self._kept.get(key) for key in keys]
        return [dict(found[1]) if found and found[0] > now else {} for found in kept]


class RedisTallies:
    """Tallies in a Redis store: a hash each, or a sorted set for a top tally."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def add(self, adds: Adds, ttl: int, tops: Adds, top_ttl: int, kept: int) -> None:
        async with self._client.pipeline(transaction=False) as pipe:
            for key, counts in adds.items():
                for field, n in counts.items():
                    pipe.hincrby(key, field, n)
                pipe.expire(key, ttl)
            for key, counts in tops.items():
                for member, n in counts.items():
                    pipe.zincrby(key, n, member)
                pipe.zremrangebyrank(key, 0, -kept - 1)  # the highest stay
                pipe.expire(key, top_ttl)
            await pipe.execute()

    async def read(self, keys: Sequence[str], top: bool = False) -> list[dict[str, int]]:
        async with self._client.pipeline(transaction=False) as pipe:
            for key in keys:
                if top:
                    pipe.zrange(key, 0, -1, withscores=True)
                else:
                    pipe.hgetall(key)
            replies = await pipe.execute()
        pairs = [reply if top else reply.items() for reply in replies]
        return [{_text(name): int(n) for name, n in found} for found in pairs]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def tallies_of(backend: object, clock: Clock) -> Tallies:
    """The tallies of ``backend``'s store: in Redis when it is an asyncio Redis backend,
    else in this process on ``clock``."""
    try:
        from freqguard.backends._async.backend import AsyncRedisBackend
    except ImportError:  # no redis-py: no Redis backend either
        return MemoryTallies(clock)
    if isinstance(backend, AsyncRedisBackend):
        return RedisTallies(backend.client)
    return MemoryTallies(clock)
