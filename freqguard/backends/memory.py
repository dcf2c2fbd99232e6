"""The in-memory backend: the embedded default, and the reference for the Redis scripts.

It runs the Python twin of the policy script (``freqguard.script.twin``) under one lock, so it is
safe under threads and asyncio and makes exactly the decisions the Lua makes.

Expiry costs nothing per key. Every key is filed under its *horizon*: the longest its state
can matter (its rule's window, or a bucket's time to refill; ``StateSpec.horizon``). The keys
of one horizon are ordered by their last write, so the expired ones are always at the front:
every few calls the fronts of all horizons are trimmed, and reads drop what has expired.
Anything not written for longer than its horizon is therefore gone soon after, without a
timer thread or a heap.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from freqguard.bounds import check_time
from freqguard.clock import Clock, SystemClock
from freqguard.errors import BackendUnavailable, ConfigError
from freqguard.script.calls import Reply, ScriptCall
from freqguard.script.contract import HIT, LIMIT, PINNED_GRACE_MS, STALE_GRACE_US
from freqguard.script.limits import Limit
from freqguard.script.strategies.calendar import OutsidePeriods
from freqguard.script.twin import run

__all__ = ["DEFAULT_MAX_KEYS", "MemoryBackend"]

# Every 16 calls, up to 1024 expired keys go: 64 a call on average, far more than the one or
# two keys a call creates, so expired keys never pile up; at most ~100 µs in any one call.
_SWEEP_EVERY = 16
_SWEEP_BUDGET = 1024
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

    def reclaim(self, now: int, budget: int, horizon: int) -> int:
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
        if removed and self.peak > _COMPACT_ABOVE and len(entries) < self.peak // 8:
            self.entries = OrderedDict(entries)
            self.peak = len(entries)
        return removed


class _HorizonStore:
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
        self.limits: dict[str, tuple[Limit, ...]] = {}
        self.limits_gone: dict[str, int] = {}
        self.limits_heap: list[tuple[int, str]] = []

    def keep_limits(self, record: str, limits: tuple[Limit, ...], now: int) -> None:
        """A record's limits as a LIMIT call at ``now`` leaves them: kept until none lives
        (plus the stale grace, and in real time for pinned calls, as ``put``), or for ever
        while one has no expiry."""
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
            self.limits_heap = [(when, rec) for rec, when in self.limits_gone.items()]
            heapq.heapify(self.limits_heap)

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
        if found is None:
            return None
        entry = found.entries.get(key)
        if entry is not None and entry[3] <= self.clock(now):
            del found.entries[key]  # past its deletion time: gone, as from Redis
            self.count -= 1
            return None
        return entry

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

    def delete(self, key: str, horizon: int) -> None:
        found = self.queues.get(horizon)
        if found is not None and found.entries.pop(key, None) is not None:
            self.count -= 1

    def missing(self, keys: Sequence[str], horizons: Sequence[int]) -> int:
        """How many of ``keys`` are not stored (each under its horizon)."""
        absent = 0
        for key, horizon in zip(keys, horizons, strict=True):
            found = self.queues.get(horizon)
            absent += found is None or key not in found.entries
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
            queue = self.queues[min(fronts)[1]]
            queue.entries.popitem(last=False)
            removed += 1
        self.count -= removed
        return removed

    def sweep(self, now: int, budget: int | None = None) -> int:
        removed = 0
        for horizon in list(self.queues):
            left = len(self.queues[horizon].entries) if budget is None else budget - removed
            if left <= 0 and budget is not None:
                break
            removed += self.queues[horizon].reclaim(now, left, horizon)
            if not self.queues[horizon].entries:
                del self.queues[horizon]  # an empty queue is dropped whole
        self.count -= removed
        return removed


WHEN_FULL = ("reject", "evict")
#: The states a MemoryBackend keeps by default (about 45 MB at ~450 bytes a state).
DEFAULT_MAX_KEYS = 100_000
_UNSET: Any = object()
_log = logging.getLogger("freqguard")


class MemoryBackend:
    """State in this process's memory; sync and async.

    Args:
        clock: the time used when the Guard pins none (default :class:`SystemClock`).
        max_keys: the most states kept at once: :data:`DEFAULT_MAX_KEYS` (100,000, about
            45 MB) unless given; ``None`` for no bound. A policy keeps one state per rule and
            context (rules of one strategy and dimensions may share one), at 100-500 bytes
            each: ``max_keys=1_000_000`` bounds the backend near 450 MB.
        when_full: what a hit that needs a new state does when ``max_keys`` are live:
            ``"evict"`` (the default) drops the states closest to expiry to make room, so
            memory stays bounded under a flood of new keys (a million client addresses) at
            the price of forgetting those states early (their contexts may be admitted
            again before their windows end); the first eviction is logged as a warning, once.
            ``"reject"`` raises :class:`~freqguard.BackendUnavailable` and changes nothing,
            so every cap stays exact (as Redis' ``noeviction``), and ``on_error`` answers.
            Expired states are always reclaimed first.

    Pinned-time calls (a Guard with its own ``clock``) and backend-time calls keep their
    states apart: their times cannot be compared, and expiring one by the other's clock
    would wipe it.

    Raises:
        ConfigError: for a ``max_keys`` that is not None or a positive integer, or an
            unknown ``when_full``.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        max_keys: int | None = _UNSET,
        when_full: str = "evict",
    ) -> None:
        if max_keys is _UNSET:
            max_keys = DEFAULT_MAX_KEYS
        if max_keys is not None and (
            isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1
        ):
            raise ConfigError(f"max_keys must be None or an integer >= 1, got {max_keys!r}")
        if when_full not in WHEN_FULL:
            raise ConfigError(f"when_full must be one of {WHEN_FULL}, got {when_full!r}")
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.max_keys = max_keys
        self.when_full = when_full
        # [0]: calls on the backend's clock, [1]: calls whose time the Guard pinned (their
        # states deleted in real time, the backend's: as Redis deletes pinned records)
        self._stores = (_HorizonStore(), _HorizonStore(self.clock))
        self._lock = threading.Lock()
        self._calls = 0
        self._evicted = False  # the first eviction is logged

    def execute(self, call: ScriptCall) -> Reply:
        pinned = call.now is not None
        store = self._stores[pinned]
        keys = call.keys()
        with self._lock:  # the clock is read inside: calls are judged in the order they run
            now = check_time(self.clock.now_us() if call.now is None else call.now)
            if self.max_keys is not None:
                self._make_room(store, keys, call, now)
            try:
                if store.limits or call.mode == LIMIT:  # the record's per-key limits
                    reply = self._limited(store, keys, call, now, pinned)
                else:
                    reply = run(
                        store, keys, call.part, now, call.cost, call.mode, call.marks, pinned
                    )
            except OutsidePeriods as exc:  # as the Lua's error reply: nothing was written
                raise BackendUnavailable(str(exc), answered=True, sent=False) from None
            self._calls += 1
            if self._calls % _SWEEP_EVERY == 0:
                store.sweep(store.clock(now), _SWEEP_BUDGET)
                store.reclaim_limits(store.clock(now), _SWEEP_BUDGET)
        return reply

    def _limited(
        self, store: _HorizonStore, keys: Sequence[str], call: ScriptCall, now: int, pinned: bool
    ) -> Reply:
        """:func:`run` with the record's per-key limits, kept as the call leaves them."""
        record = call.part.layouts[0].record(call.texts)
        limits = store.limits.get(record, ())
        reply = run(
            store,
            keys,
            call.part,
            now,
            call.cost,
            call.mode,
            call.marks,
            pinned,
            limits,
            call.change,
        )
        if call.mode == LIMIT:
            store.keep_limits(record, reply.limits, now)
        return reply

    def _make_room(
        self, store: _HorizonStore, keys: Sequence[str], call: ScriptCall, now: int
    ) -> None:
        """Before anything is written: room for every state the call could create."""
        assert self.max_keys is not None
        live = self._stores[0].count + self._stores[1].count
        # only a consuming hit creates states (a refund writes only states that exist)
        if live + len(keys) <= self.max_keys or call.mode != HIT or call.cost == 0:
            return
        horizons = [spec.horizon for spec in call.part.specs]
        wanted = live + store.missing(keys, horizons) - self.max_keys
        if wanted <= 0:
            return
        wanted -= store.sweep(store.clock(now), max(wanted, _SWEEP_BUDGET))
        if wanted > 0 and self.when_full == "evict":
            if not self._evicted:
                self._evicted = True
                _log.warning(
                    "freqguard: the memory backend is full (max_keys=%d live states): states "
                    "nearest their expiry are evicted to make room, and their contexts may be "
                    "admitted again early; raise max_keys, or pass when_full='reject' to keep "
                    "every cap exact (logged once)",
                    self.max_keys,
                )
            for other in self._stores:
                wanted -= other.evict(wanted)
        if wanted > 0:
            raise BackendUnavailable(
                f"the memory backend is full: max_keys={self.max_keys} live states "
                f"(when_full={self.when_full!r}); nothing was changed",
                answered=True,
                sent=False,
            )

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        return [self.execute(call) for call in calls]

    async def aexecute(self, call: ScriptCall) -> Reply:
        return self.execute(call)

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        return self.execute_many(calls)

    def sweep(self) -> int:
        """Drop every state past its deletion time now; returns how many. Normal traffic
        does this by itself. States of calls on the backend's time go by its clock; those
        of Guards that pin their own time go in real time (the backend's clock), as Redis
        expires their records (see :class:`_HorizonStore`)."""
        with self._lock:
            removed = 0
            for store in self._stores:
                at = store.clock(self.clock.now_us())
                removed += store.sweep(at)
                store.reclaim_limits(at, len(store.limits_heap))
            return removed

    @property
    def limits_held(self) -> int:
        """How many records hold per-key limits (those none of which lives any more go
        as expired states do, by ordinary traffic or :meth:`sweep`)."""
        return sum(len(store.limits) for store in self._stores)

    def close(self) -> None:
        """Nothing to release; present so every backend closes alike."""

    async def aclose(self) -> None:
        """Nothing to release."""

    def __len__(self) -> int:
        """How many states are stored (expired ones not yet reclaimed included)."""
        return self._stores[0].count + self._stores[1].count

    def __repr__(self) -> str:
        return f"MemoryBackend(clock={self.clock!r}, keys={len(self)})"
