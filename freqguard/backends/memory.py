"""The in-memory backend: the embedded default, and the reference for the Redis scripts.

It runs the Python twin of the policy script (``freqguard.script``) under one lock, so it is
safe under threads and asyncio and makes exactly the decisions the Lua makes.

Expiry costs nothing per key. Every key belongs to a *lane*: the longest its state can matter
(its rule's window, or a bucket's time to refill). Inside a lane, keys are ordered by their
last write, so the expired ones are always at the front: every few calls the fronts of all
lanes are trimmed, and reads drop what has expired. Anything not written for longer than its
lane's duration is therefore gone soon after, without a timer thread or a heap.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from freqguard.backends.base import Reply, ScriptCall
from freqguard.clock import Clock, SystemClock
from freqguard.script import run

__all__ = ["MemoryBackend"]

# Every 16 calls, up to 1024 expired keys go: 64 a call on average, far more than the one or
# two keys a call creates, so expired keys never pile up; at most ~100 µs in any one call.
_SWEEP_EVERY = 16
#: An expired state counts as absent at once, but is deleted only this long (µs) after its
#: expiry, in every backend: a clock that steps back by less (a failover to a server whose
#: clock lags) finds it again, the same in memory and in Redis.
STALE_GRACE_US = 1_000_000
_SWEEP_BUDGET = 1024
_COMPACT_ABOVE = 4096  # lanes smaller than this are never worth copying


class _Lane:
    """The keys of one lane: key → ``(expire_at, state)`` in last-write order.

    An OrderedDict, not a dict: popping from the front of a dict that has had many deletions
    scans the holes they left, while an OrderedDict's front is O(1). A lane that shrank far
    below its peak is copied, so that its hash table is given back too.
    """

    __slots__ = ("entries", "peak")

    def __init__(self) -> None:
        self.entries: OrderedDict[str, tuple[int, Any]] = OrderedDict()
        self.peak = 0

    def reclaim(self, now: int, budget: int) -> int:
        entries = self.entries
        removed = 0
        while removed < budget and entries:
            key = next(iter(entries))
            if entries[key][0] > now - STALE_GRACE_US:
                break
            del entries[key]
            removed += 1
        if removed and self.peak > _COMPACT_ABOVE and len(entries) < self.peak // 8:
            self.entries = OrderedDict(entries)
            self.peak = len(entries)
        return removed


class _LaneStore:
    """Every lane, by its duration in µs."""

    __slots__ = ("lanes",)

    def __init__(self) -> None:
        self.lanes: dict[int, _Lane] = {}

    def get(self, key: str, lane: int, now: int) -> Any:
        found = self.lanes.get(lane)
        if found is None:
            return None
        entry = found.entries.get(key)
        if entry is None:
            return None
        if entry[0] <= now:  # expired: absent, and deleted once past the grace
            if entry[0] <= now - STALE_GRACE_US:
                del found.entries[key]
            return None
        return entry[1]

    def put(self, key: str, lane: int, state: Any, expire_at: int, now: int) -> None:
        found = self.lanes.get(lane)
        if found is None:
            found = self.lanes[lane] = _Lane()
        entries = found.entries
        if key in entries:
            entries[key] = (expire_at, state)
            entries.move_to_end(key)
        else:
            entries[key] = (expire_at, state)
            if len(entries) > found.peak:
                found.peak = len(entries)

    def delete(self, key: str, lane: int) -> None:
        found = self.lanes.get(lane)
        if found is not None:
            found.entries.pop(key, None)

    def sweep(self, now: int, budget: int | None = None) -> int:
        removed = 0
        for lane in list(self.lanes):
            left = len(self.lanes[lane].entries) if budget is None else budget - removed
            if left <= 0 and budget is not None:
                break
            removed += self.lanes[lane].reclaim(now, left)
            if not self.lanes[lane].entries:
                del self.lanes[lane]  # an empty lane is dropped whole
        return removed

    def __len__(self) -> int:
        return sum(len(lane.entries) for lane in self.lanes.values())


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
            reply = run(self._store, call.keys(), call.plan, now, call.cost, call.mode)
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
