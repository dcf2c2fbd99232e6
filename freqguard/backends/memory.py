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

import logging
import threading
from collections.abc import Sequence
from typing import Any

from freqguard.backends._horizons import HorizonStore
from freqguard.bounds import check_time
from freqguard.clock import Clock, SystemClock, check_clock
from freqguard.errors import BackendUnavailable, ConfigError, shown
from freqguard.script.calls import Reply, ScriptCall
from freqguard.script.contract import HIT, LIMIT
from freqguard.script.strategies.calendar import OutsidePeriods
from freqguard.script.twin import run

__all__ = ["DEFAULT_MAX_KEYS", "MemoryBackend"]

# Every 16 calls, up to 1024 expired keys go: 64 a call on average, far more than the one or
# two keys a call creates, so expired keys never pile up; at most ~100 µs in any one call.
_SWEEP_EVERY = 16
_SWEEP_BUDGET = 1024


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
            raise ConfigError(f"max_keys must be None or an integer >= 1, got {shown(max_keys)}")
        if not isinstance(when_full, str) or when_full not in WHEN_FULL:
            raise ConfigError(f"when_full must be one of {WHEN_FULL}, got {shown(when_full)}")
        self.clock: Clock = check_clock(clock, f"{type(self).__name__}(clock=...)") or SystemClock()
        self.max_keys = max_keys
        self.when_full = when_full
        # [0]: calls on the backend's clock, [1]: calls whose time the Guard pinned (their
        # states deleted in real time, the backend's: as Redis deletes pinned records)
        self._stores = (HorizonStore(), HorizonStore(self.clock))
        self._lock = threading.Lock()
        self._calls = 0
        self._evicted = False  # the first eviction is logged

    def execute(self, call: ScriptCall) -> Reply:
        pinned = call.now is not None
        store = self._stores[pinned]
        keys = call.keys()
        with self._lock:  # the clock is read inside: calls are judged in the order they run
            now = check_time(self.clock.now_us() if call.now is None else call.now)
            self._calls += 1
            if self._calls % _SWEEP_EVERY == 0:  # before the call: nothing after its write
                store.sweep(store.clock(now), _SWEEP_BUDGET)
                store.reclaim_limits(store.clock(now), _SWEEP_BUDGET)
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
        return reply

    def _limited(
        self, store: HorizonStore, keys: Sequence[str], call: ScriptCall, now: int, pinned: bool
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
        self, store: HorizonStore, keys: Sequence[str], call: ScriptCall, now: int
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
        expires their records (see :class:`HorizonStore`)."""
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
