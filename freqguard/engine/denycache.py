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
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import NamedTuple

from freqguard.decision import Decision, make_decision, with_source
from freqguard.errors import ConfigError, shown
from freqguard.rules import Rule
from freqguard.script.keys import raw_digest

__all__ = ["DenyCache"]

_US = 1_000_000
Key = tuple[str, bytes]


class DenyCache:
    """Up to ``size`` (policy, context) denials, least recently used first out.

    A context is held as a 128-bit digest of its values in the policy's dimension order,
    never the values themselves: an entry takes about 0.5 KB plus 0.1 KB per rule whatever
    the context holds, so ``size`` bounds the memory (``deny_cache=100_000``: under 100 MB
    for a four-rule policy). A denial of cost ``c`` is answered for hits of cost >= ``c``
    only (a smaller hit may fit sooner).

    Args:
        size: the most denials kept (0 to 10**8).
        clock: seconds on a clock that never steps, by which entries expire (default
            ``time.monotonic``): the store decides on its own time (Redis: the server's), and
            a step of the client's wall clock must not keep a denial alive. A Guard that pins
            its time gives its cache that clock instead (its denials are in that time).

    Raises:
        ConfigError: a ``size`` out of range, or a ``clock`` that is not callable.
    """

    __slots__ = ("_entries", "_epoch", "_generation", "_lock", "clock", "size")

    def __init__(self, size: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= 10**8:
            raise ConfigError(f"deny_cache must be an integer from 0 to 10**8, got {shown(size)}")
        if not callable(clock):
            raise ConfigError(f"DenyCache clock must be a function of seconds, got {shown(clock)}")
        self.size = size
        self.clock = clock
        self._lock = threading.Lock()
        # key -> (until, cost, generation of its policy, the denial as _Denial keeps it)
        self._entries: OrderedDict[Key, tuple[float, int, int, _Denial]] = OrderedDict()
        self._generation: dict[str, int] = {}  # per policy: bumped by a forget of it all
        self._epoch: dict[str, int] = {}  # per policy: bumped by every forget

    @staticmethod
    def key(policy: str, values: Sequence[str]) -> Key:
        """The entry of a context: its values in the policy's dimension order, digested."""
        return policy, raw_digest(*values, size=16)

    def snapshot(self, policy: str) -> tuple[int, float]:
        """What :meth:`put` must be given back, read before the store is asked: how many
        refunds and resets of the policy came so far (a denial decided before one is not
        remembered after it), and the time (the denial lasts its ``retry_after`` from then:
        never longer than the store's)."""
        return self._epoch.get(policy, 0), self.clock()

    def get(self, policy: str, key: Key, cost: int) -> Decision | None:
        """The remembered denial of ``key`` as of now, or None."""
        if not self._entries:
            return None
        now = self.clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            until, denied_cost, generation, denial = entry
            if now >= until or generation != self._generation.get(policy, 0):
                del self._entries[key]
                return None
            if cost != denied_cost:  # a larger one may be one no hit could ever be granted:
                return None  # the store answers it (and the guard refuses it by name)
            self._entries.move_to_end(key)
        return _aged(policy, denial, until, now)

    def put(
        self, policy: str, key: Key, cost: int, decision: Decision, snapshot: tuple[int, float]
    ) -> None:
        """Remember a denial the store made, unless the policy had a refund or reset since
        ``snapshot`` (:meth:`snapshot`, read before the store was asked)."""
        if decision.allowed or decision.retry_after <= 0:
            return
        denial = _Denial(decision.retry_after, decision.denied_by, decision.raw)
        epoch, asked = snapshot
        with self._lock:
            if self._epoch.get(policy, 0) != epoch:
                return  # a refund or reset came in between: this denial may be stale
            entries = self._entries
            until = asked + decision.retry_after
            entries[key] = (until, cost, self._generation.get(policy, 0), denial)
            entries.move_to_end(key)
            while len(entries) > self.size:
                entries.popitem(last=False)

    def forget(self, policy: str, key: Key | None = None) -> None:
        """Forget ``key``'s denial, or (``key`` None) every denial of ``policy``."""
        with self._lock:
            self._epoch[policy] = self._epoch.get(policy, 0) + 1
            if key is None:
                self._generation[policy] = self._generation.get(policy, 0) + 1
            else:
                self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


class _Denial(NamedTuple):
    """What a denial needs to be answered again: less than the Decision (no reply, no
    receipt, no header plan)."""

    retry_after: float
    denied_by: tuple[Rule, ...]
    raw: tuple[tuple[Rule, int, int, int], ...]


def _aged(policy: str, denial: _Denial, until: float, now: float) -> Decision:
    """The denial as it reads at ``now``: every wait shorter by the time gone by since, in
    whole µs, as the store's answers are."""
    left = max(round((until - now) * _US), 1)
    gone = round(denial.retry_after * _US) - left
    raw = tuple(
        (rule, remaining, max(reset - gone, 0), max(retry - gone, 1) if retry else 0)
        for rule, remaining, reset, retry in denial.raw
    )
    denied = tuple(rule for rule, _, _, retry in raw if retry > 1 and not rule.shadow)
    made = make_decision(policy, False, left / _US, denied or denial.denied_by, lambda: raw)
    return with_source(made, "deny-cache")
