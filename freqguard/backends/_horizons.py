"""The memory backend's store: states filed by their *horizon*, the longest each can matter
(its rule's window, or a bucket's time to refill; ``StateSpec.horizon``), and a record's
per-key limits until none lives.

The keys of one horizon are ordered by their last write, so the expired ones are always at
the front: sweeps trim the fronts, and reads drop what has expired, without a timer thread
or a heap. A state a deploy filed under another horizon (its rules' windows or bursts
changed) is found there and moved where its calls now look.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from freqguard.clock import Clock
from freqguard.script.contract import PINNED_GRACE_MS, STALE_GRACE_US
from freqguard.script.limits import KeyLimit
from freqguard.script.strategies.base import StateSpec
from freqguard.script.twin import whole

__all__ = ["HorizonStore", "Stored"]

_COMPACT_ABOVE = 4096  # queues smaller than this are never worth copying


Stored = tuple[int, int, Any, int]  # an Entry, then when the store may delete it (µs)


class _Queue:
    """The keys of one horizon: key → :data:`Stored` in last-write order.

    An OrderedDict, not a dict: popping from the front of a dict that has had many deletions
    scans the holes they left, while an OrderedDict's front is O(1). A queue that shrank far
    below its peak is copied, so that its hash table is given back too.
    """

    __slots__ = ("entries", "peak")

    def __init__(self) -> None:
        self.entries: OrderedDict[str, Stored] = OrderedDict()
        self.peak = 0

    def reclaim(self, now: int, budget: int, horizon: int, store: HorizonStore) -> int:
        entries = self.entries
        removed = moved = 0
        # a state under a per-key limit longer than its rule's may outlive the states
        # written after it: sent to the back, it does not hold the expired ones behind it
        outlier = now + horizon + STALE_GRACE_US + PINNED_GRACE_MS * 1000
        while removed < budget and entries:
            key = next(iter(entries))
            gone = entries[key][3]
            if gone > now:
                if gone <= outlier or moved >= budget:
                    break
                entries.move_to_end(key)
                moved += 1
                continue
            del entries[key]
            removed += 1
            store.count -= 1  # at once: a Ctrl-C in the sweep leaves count right
        if removed and self.peak > _COMPACT_ABOVE and len(entries) < self.peak // 8:
            self.entries = OrderedDict(entries)
            self.peak = len(entries)
        return removed


class HorizonStore:
    """One queue per horizon (µs); ``count`` keys in all.

    A state is deleted as Redis deletes its field: on the store's own clock, ``STALE_GRACE_US``
    after its expiry. For calls on the backend's time that is the calls' clock. For calls
    whose time a Guard pins (``real`` given), Redis expires a record in real time, for as long
    as its states still matter in pinned time plus ``PINNED_GRACE_MS``; so here, on ``real``:
    a pinned clock that jumps a day ahead and comes back finds every state where it was, in
    both twins (an expired state reads as absent all the same: :func:`~freqguard.script.twin.run`).
    """

    __slots__ = ("count", "limits", "limits_gone", "limits_heap", "queues", "real")

    def __init__(self, real: Clock | None = None) -> None:
        self.queues: dict[int, _Queue] = {}
        self.count = 0
        self.real = real
        # per record (a partition value and policy), its per-key limits, as Redis keeps
        # them in the record's meta field; not states, so never evicted, but deleted once
        # none lives (as Redis expires the record): when (limits_gone, by record; absent:
        # never), and a heap of (when, record) to find them (entries a later change made
        # stale stay until popped, or until the heap is rebuilt)
        self.limits: dict[str, tuple[KeyLimit, ...]] = {}
        self.limits_gone: dict[str, int] = {}
        self.limits_heap: list[tuple[int, str]] = []

    def keep_limits(self, record: str, limits: tuple[KeyLimit, ...], now: int) -> None:
        """A record's limits as a LIMIT call at ``now`` leaves them: kept until none lives
        (plus the stale grace, and in real time for pinned calls, as ``put``), or for ever
        while one has no expiry. Cut part way (a Ctrl-C), it leaves them as they were."""
        kept, gone = self.limits.get(record), self.limits_gone.get(record)
        try:
            self._keep_limits(record, limits, now)
        except BaseException:  # a limit kept without its expiry was held for ever
            whole(lambda: self._put_limits_back(record, kept, gone))
            raise

    def _put_limits_back(
        self, record: str, kept: tuple[KeyLimit, ...] | None, gone: int | None
    ) -> None:
        self.limits.pop(record, None)
        self.limits_gone.pop(record, None)
        if kept is not None:
            self.limits[record] = kept
        if gone is not None:
            self.limits_gone[record] = gone

    def _keep_limits(self, record: str, limits: tuple[KeyLimit, ...], now: int) -> None:
        self.limits_gone.pop(record, None)
        if not limits:
            self.limits.pop(record, None)
            return
        self.limits[record] = limits
        if any(limit.expiry == 0 for limit in limits):
            return
        gone = max(limit.expiry for limit in limits) + STALE_GRACE_US
        if self.real is not None:
            gone = self.real.now_us() + max(gone - now, 0) + PINNED_GRACE_MS * 1000
        self.limits_gone[record] = gone
        heapq.heappush(self.limits_heap, (gone, record))
        if len(self.limits_heap) > 2 * len(self.limits_gone) + _COMPACT_ABOVE:
            heap = [(when, rec) for rec, when in self.limits_gone.items()]
            heapq.heapify(heap)
            self.limits_heap = heap  # whole, or the one it was

    def reclaim_limits(self, now: int, budget: int) -> int:
        """Delete up to ``budget`` records' limits whose time has come (``now`` on the
        store's deletion clock); how many."""
        heap, removed = self.limits_heap, 0
        while heap and heap[0][0] <= now and removed < budget:
            gone, record = heapq.heappop(heap)
            if self.limits_gone.get(record) == gone:  # not a stale entry
                del self.limits_gone[record], self.limits[record]
                removed += 1
        return removed

    def clock(self, now: int) -> int:
        """The time deletions are judged at, for a call at ``now``."""
        return now if self.real is None else self.real.now_us()

    def get(self, key: str, horizon: int, now: int) -> Stored | None:
        found = self.queues.get(horizon)
        entry = None if found is None else found.entries.get(key)
        if entry is None:
            if len(self.queues) <= (found is not None):  # no other horizon to look in
                return None
            entry = self._refile(key, horizon)  # filed under another horizon by a deploy
            if entry is None:
                return None
        if entry[3] <= self.clock(now):
            del self.queues[horizon].entries[key]  # past its deletion time: gone, as from Redis
            self.count -= 1
            return None
        return entry

    def _refile(self, key: str, horizon: int) -> Stored | None:
        """A state filed under another horizon (its policy was deployed again, its rules'
        windows or bursts changed), moved under ``horizon``, where its calls now look: a
        miss of the usual queue looks through the few others."""
        for other, queue in self.queues.items():
            if other != horizon and key in queue.entries:
                target = self.queues.get(horizon)
                if target is None:
                    target = self.queues[horizon] = _Queue()
                entry = queue.entries[key]
                target.entries[key] = entry  # no call between these two: a Ctrl-C
                del queue.entries[key]  # cannot land with the state in neither queue
                return entry
        return None

    def put(self, key: str, horizon: int, state: Any, expire_at: int, latest: int) -> None:
        found = self.queues.get(horizon)
        if found is None:
            found = self.queues[horizon] = _Queue()
        entries = found.entries
        gone = expire_at + STALE_GRACE_US
        if self.real is not None:  # pinned time: a real-time TTL, as policy.lua's record_ttl
            gone = self.real.now_us() + max(gone - latest, 0) + PINNED_GRACE_MS * 1000
        if key in entries:
            entries[key] = (expire_at, latest, state, gone)
            entries.move_to_end(key)
        else:
            entries[key] = (expire_at, latest, state, gone)
            self.count += 1
            if len(entries) > found.peak:
                found.peak = len(entries)

    def put_back(
        self, keys: Sequence[str], specs: Sequence[StateSpec], saved: Sequence[Stored | None]
    ) -> None:
        """``keys`` as :meth:`get` found them (``saved``): a call cut part way (a Ctrl-C)
        leaves its states all as they were, as a script that never ran would. Idempotent:
        cut in turn, it is made again whole (the count is counted anew)."""
        for key, spec, entry in zip(keys, specs, saved, strict=True):
            home = self.queues.get(spec.horizon)
            if entry is not None and home is not None and home.entries.get(key) is entry:
                continue  # untouched: kept in its place in the queue
            for queue in self.queues.values():  # wherever a read or a write filed it
                queue.entries.pop(key, None)
            if entry is not None:
                self.queues.setdefault(spec.horizon, _Queue()).entries[key] = entry
        self.count = sum(len(queue.entries) for queue in self.queues.values())

    def delete(self, key: str, horizon: int) -> None:
        found = self.queues.get(horizon)
        if found is None or key not in found.entries:
            self._refile(key, horizon)
            found = self.queues.get(horizon)
        if found is not None and key in found.entries:
            del found.entries[key]
            self.count -= 1

    def missing(self, keys: Sequence[str], horizons: Sequence[int]) -> int:
        """How many of ``keys`` are not stored (each under its horizon)."""
        absent = 0
        for key, horizon in zip(keys, horizons, strict=True):
            found = self.queues.get(horizon)
            if found is None or key not in found.entries:
                absent += not any(key in queue.entries for queue in self.queues.values())
        return absent

    def evict(self, wanted: int) -> int:
        """Drop up to ``wanted`` keys, those that expire soonest first (queue fronts)."""
        removed = 0
        while removed < wanted:
            fronts = [
                (next(iter(queue.entries.values()))[3], horizon)
                for horizon, queue in self.queues.items()
                if queue.entries
            ]
            if not fronts:
                break
            entries = self.queues[min(fronts)[1]].entries
            del entries[next(iter(entries))]  # ... then count, with no call between
            self.count -= 1
            removed += 1
        return removed

    def sweep(self, now: int, budget: int | None = None) -> int:
        removed = 0
        for horizon in list(self.queues):
            left = len(self.queues[horizon].entries) if budget is None else budget - removed
            if left <= 0 and budget is not None:
                break
            removed += self.queues[horizon].reclaim(now, left, horizon, self)
            if not self.queues[horizon].entries:
                del self.queues[horizon]  # an empty queue is dropped whole
        return removed
