"""The deny cache: a denial remembered until its ``retry_after``, answered without the store.

A hit denied until T stays denied until T whatever other hits do (they only consume), so
the cache answers exactly as the store would, with one exception it cannot see: a refund or
reset made through *another* guard (another process) may free the cap earlier. Refunds and
resets through this guard forget the entries they may affect.

Its ``retry_after`` is a lower bound: hits of other contexts that share a rule with the
cached one (a per-recipient rule under a per-content one) may have pushed that rule's turn
further away since, which only the store can tell; a retry at that time asks the store.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

from freqguard.decision import Decision, make_decision, with_source
from freqguard.errors import ConfigError

__all__ = ["DenyCache"]

_US = 1_000_000


class DenyCache:
    """Up to ``size`` (policy, context) denials, least recently used first out.

    Times are the guard's clock in seconds; a denial of cost ``c`` is answered for hits of
    cost >= ``c`` only (a smaller hit may fit sooner).
    """

    __slots__ = ("_entries", "_generation", "_lock", "size")

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= 10**8:
            raise ConfigError(f"deny_cache must be an integer from 0 to 10**8, got {size!r}")
        self.size = size
        self._lock = threading.Lock()
        # key -> (until, cost, generation of its policy, the denial)
        self._entries: OrderedDict[Hashable, tuple[float, int, int, Decision]] = OrderedDict()
        self._generation: dict[str, int] = {}

    def get(self, policy: str, key: Hashable, cost: int, now: float) -> Decision | None:
        """The remembered denial of ``key`` as of ``now``, or None."""
        if not self._entries:
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            until, denied_cost, generation, decision = entry
            if now >= until or generation != self._generation.get(policy, 0):
                del self._entries[key]
                return None
            if cost < denied_cost:
                return None
            self._entries.move_to_end(key)
        return _aged(decision, until, now)

    def put(self, policy: str, key: Hashable, cost: int, decision: Decision, now: float) -> None:
        """Remember a denial made by the store at ``now``."""
        if decision.allowed or decision.retry_after <= 0:
            return
        decision.raw  # noqa: B018 (read now: the cached copy must not hold the reply)
        with self._lock:
            entries = self._entries
            until = now + decision.retry_after
            entries[key] = (until, cost, self._generation.get(policy, 0), decision)
            entries.move_to_end(key)
            while len(entries) > self.size:
                entries.popitem(last=False)

    def forget(self, policy: str, key: Hashable | None = None) -> None:
        """Forget ``key``'s denial, or (``key`` None) every denial of ``policy``."""
        with self._lock:
            if key is None:
                self._generation[policy] = self._generation.get(policy, 0) + 1
            else:
                self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


def _aged(decision: Decision, until: float, now: float) -> Decision:
    """``decision`` as it reads at ``now``: every wait shorter by the time gone by since."""
    gone = int((decision.retry_after - (until - now)) * _US)
    raw = tuple(
        (rule, remaining, max(reset - gone, 0), max(retry - gone, 1) if retry else 0)
        for rule, remaining, reset, retry in decision.raw
    )
    denied = tuple(rule for rule, _, _, retry in raw if retry > 1 and not rule.shadow)
    made = make_decision(
        decision.policy, False, until - now, denied or decision.denied_by, lambda: raw
    )
    return with_source(made, "deny-cache")
