"""The in-memory backend: the embedded default, and the reference for the Redis scripts.

It runs the Python twin of the policy script (``freqguard.script``) under one lock, so it is
safe under threads and asyncio and makes exactly the decisions the Lua makes.

Expiry costs nothing per key. Every key belongs to a *lane*: the longest its state can matter
(its rule's window, or a bucket's time to refill). Inside a lane, keys are ordered by their
last write, so the expired ones are always at the front: writes reclaim a few from the front of
their lane, every few calls all lanes are trimmed, and reads drop what has expired. Anything
not written for longer than its lane's duration is therefore gone after the next few calls.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from freqguard.backends.base import Reply, ScriptCall
from freqguard.clock import Clock, SystemClock
from freqguard.script import run

__all__ = ["MemoryBackend"]

_RECLAIM_PER_WRITE = 2  # more than one, so reclaiming outpaces a steady stream of new keys
_SWEEP_EVERY = 64  # calls between trims of every lane
_SWEEP_BUDGET = 256


class _LaneStore:
    """Key → ``(expire_at, state)``, filed by lane, each lane in last-write order."""

    __slots__ = ("lanes",)

    def __init__(self) -> None:
        self.lanes: dict[int, dict[str, tuple[int, Any]]] = {}

    def get(self, key: str, lane: int, now: int) -> Any:
        entries = self.lanes.get(lane)
        if entries is None:
            return None
        entry = entries.get(key)
        if entry is None:
            return None
        if entry[0] <= now:
            del entries[key]
            return None
        return entry[1]

    def put(self, key: str, lane: int, state: Any, expire_at: int, now: int) -> None:
        entries = self.lanes.get(lane)
        if entries is None:
            entries = self.lanes[lane] = {}
        else:
            entries.pop(key, None)  # re-inserted at the end: last-write order
            self._reclaim(entries, now, _RECLAIM_PER_WRITE)
        entries[key] = (expire_at, state)

    def delete(self, key: str, lane: int) -> None:
        entries = self.lanes.get(lane)
        if entries is not None:
            entries.pop(key, None)

    @staticmethod
    def _reclaim(entries: dict[str, tuple[int, Any]], now: int, budget: int) -> int:
        removed = 0
        while removed < budget and entries:
            key = next(iter(entries))
            if entries[key][0] > now:
                break
            del entries[key]
            removed += 1
        return removed

    def sweep(self, now: int, budget: int | None = None) -> int:
        removed = 0
        for entries in self.lanes.values():
            left = None if budget is None else budget - removed
            if left is not None and left <= 0:
                break
            removed += self._reclaim(entries, now, left if left is not None else len(entries))
        return removed

    def __len__(self) -> int:
        return sum(len(entries) for entries in self.lanes.values())


class MemoryBackend:
    """State in this process's memory; sync and async.

    Args:
        clock: the time used when the Guard pins none (default :class:`SystemClock`).
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._store = _LaneStore()
        self._lock = threading.Lock()
        self._calls = 0

    def execute(self, call: ScriptCall) -> Reply:
        now = call.now if call.now is not None else self.clock.now_us()
        with self._lock:
            reply = run(self._store, call.keys, call.plan, now, call.cost, call.mode)
            self._calls += 1
            if self._calls % _SWEEP_EVERY == 0:
                self._store.sweep(now, _SWEEP_BUDGET)
        return reply

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        return [self.execute(call) for call in calls]

    async def aexecute(self, call: ScriptCall) -> Reply:
        return self.execute(call)

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        return self.execute_many(calls)

    def sweep(self, now: float | None = None) -> int:
        """Drop every expired key now; returns how many. Normal traffic does this by itself."""
        now_us = self.clock.now_us() if now is None else round(now * 1_000_000)
        with self._lock:
            return self._store.sweep(now_us)

    def close(self) -> None:
        """Nothing to release; present so every backend closes alike."""

    async def aclose(self) -> None:
        """Nothing to release."""

    def __len__(self) -> int:
        """How many keys are stored (expired ones not yet reclaimed included)."""
        return len(self._store)

    def __repr__(self) -> str:
        return f"MemoryBackend(clock={self.clock!r}, keys={len(self)})"
