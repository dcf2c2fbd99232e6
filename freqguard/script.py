"""The policy script: the Python twin of ``freqguard/lua/policy.lua``.

One call decides every rule of a policy that lives on one slot. It loads each key's state,
checks every rule, and writes only when no non-shadow rule denies (all-or-nothing). Both twins
answer with a :class:`Reply`: whether the slot allowed the hit, each rule's wait (µs until it
would admit the hit, in the slot's rule order; 0 when it does), the time it was judged at, and
the states it left behind, which the Reply reports on (remaining, reset_after µs) when asked.
Modes: HIT (consume if allowed; cost 0 consumes nothing), CHECK (never write), REFUND (give
``cost`` back: exactly what one hit took when its marks are given, else the newest units;
then report), RESET (delete, then report).

The Lua twin returns the decision and the states it leaves behind, and :func:`unpack` makes a
Reply that reports on them here, and only when asked, so neither the server (shared by every
client) nor the client spends time on numbers most callers never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from struct import Struct
from typing import Any, NamedTuple, Protocol

from freqguard.contract import (
    CHECK,
    HIT,
    REFUND,
    REPLY_HEAD,
    REPLY_STATE_LENGTH,
    REPLY_WAIT,
    RESET,
    SPEC_STATE,
    struct_codes,
)
from freqguard.keys import KeyLayout
from freqguard.strategies import StateSpec
from freqguard.strategies.base import Mark

__all__ = [
    "CHECK",
    "HIT",
    "REFUND",
    "RESET",
    "Reply",
    "Slot",
    "StateSpec",
    "StateStore",
    "admitted",
    "run",
    "spec_text",
    "unpack",
]


class Slot(NamedTuple):
    """The rules of a policy that one script call decides (those whose keys share a cluster
    slot), compiled: everything the call needs besides the hit's values, time, cost and mode,
    and how its reply maps back to the policy's rules. One of ``PolicyPlan.slots``."""

    specs: tuple[StateSpec, ...]  # each state the call touches, in the order of its keys
    spec_text: str  # the specs as the Lua function reads them (ARGV[4])
    layouts: tuple[KeyLayout, ...]  # how each key was built (Redis folds keys into records)
    wait_format: Struct  # the Lua reply's waits, one per rule (see unpack)
    rule_index: tuple[int, ...]  # the policy's index of each rule, in reply order

    @classmethod
    def build(
        cls, specs: Sequence[StateSpec], layouts: Sequence[KeyLayout], rule_index: Sequence[int]
    ) -> Slot:
        """A slot of these states (each read by its rules, policy indices in spec order)."""
        wait_format = Struct(">" + struct_codes(REPLY_WAIT) * len(rule_index))
        return cls(tuple(specs), spec_text(specs), tuple(layouts), wait_format, tuple(rule_index))


def spec_text(specs: Sequence[StateSpec]) -> str:
    """The specs as the Lua reads them (ARGV[4]; ``contract.SPEC_STATE``, ``SPEC_RULE``)."""
    words = [len(specs)]
    for spec in specs:
        state = {"code": spec.twin.code, "shadow": int(spec.shadow), "rule_count": len(spec.rules)}
        words += [state[name] for name in SPEC_STATE]
        for rule in spec.rules:
            words += map(int, rule)  # RuleParams' fields are contract.SPEC_RULE
    return " ".join(map(str, words))


Report = list[tuple[int, int]]
# (expire_at µs, latest µs, state, ...): what a StateStore keeps (it may keep more behind)
Entry = tuple[Any, ...]


class Reply:
    """One slot's answer.

    Attributes:
        allowed: whether no non-shadow rule denied.
        waits: µs until each rule would admit the hit (0: it does), in the slot's rule order.
        now: the µs the slot was judged at: the call's time, or a state's later one (time per
            state never goes back, see :func:`run`).
    """

    __slots__ = ("_data", "_report", "_slot", "_views", "allowed", "now", "waits")

    def __init__(
        self,
        slot: Slot,
        allowed: bool,
        waits: Sequence[int],
        now: int,
        views: list[Any] | None = None,
        data: bytes = b"",
        report: Report | None = None,
    ) -> None:
        self._slot = slot
        self._report = report
        self.allowed = allowed
        self.waits = waits
        self.now = now
        self._views = views
        self._data = data

    def views(self) -> list[Any]:
        """Each state as the call left it, loaded at :attr:`now`, in the slot's order (a memory
        log may have grown since: only its marks, which do not read it, use it then)."""
        views = self._views
        if views is None:
            views = self._views = _views(self._slot, self._data, self.now)
        return views

    def report(self) -> Report:
        """``(remaining, reset_after µs)`` per rule, in the slot's rule order."""
        report = self._report
        if report is None:
            report = self._report = _report(self._slot, self.views(), self.now)
        return report

    def marks(self, cost: int, mode: int) -> tuple[Mark | None, ...]:
        """Per state, what a refund needs to take back exactly what this call consumed
        (``None``: it consumed nothing there); see ``Twin.mark``."""
        specs = self._slot.specs
        if mode != HIT or cost == 0 or not self.allowed:
            return (None,) * len(specs)
        marks: list[Mark | None] = []
        first, waits, now = 0, self.waits, self.now
        for view, spec in zip(self.views(), specs):  # noqa: B905
            # a shadow rule's own state consumes only when that rule admits
            took = not spec.shadow or waits[first] == 0
            marks.append(spec.twin.mark(view, now, spec) if took else None)
            first += len(spec.rules)
        return tuple(marks)


class StateStore(Protocol):
    """Where :func:`run` keeps states: an :data:`Entry` by key. A key is
    always given with its state's horizon (``StateSpec.horizon``), which a store may file it
    under (the memory backend does)."""

    def get(self, key: str, horizon: int, now: int) -> Entry | None: ...

    def put(self, key: str, horizon: int, state: Any, expire_at: int, latest: int) -> None: ...

    def delete(self, key: str, horizon: int) -> None: ...


# -- the script's steps (freqguard/lua/policy.lua has the same, in the same order) ---------


def judged_at(found: Sequence[Entry | None], now: int) -> int:
    """The time the call is judged at: no earlier than any of its states was written at."""
    for entry in found:
        if entry is not None and entry[1] > now:
            now = entry[1]
    return now


def reset_states(
    store: StateStore, keys: Sequence[str], specs: Sequence[StateSpec], now: int, pinned: bool
) -> int:
    """RESET: every stored state is deleted. On a pinned time, where the next call may come
    at the very microsecond of a hit before the reset, the reset ends its microsecond: in
    place of each state an expired marker of no state, written 1 µs after the latest time of
    the call (kept for the stale grace, as any expired state), so that what comes after is
    judged at least that late and no receipt from before the reset can match it. Returns
    the time the call is judged at."""
    if not pinned:
        for key, spec in zip(keys, specs):  # noqa: B905 (the slot built both; hot path)
            store.delete(key, spec.horizon)
        return now
    found = [store.get(key, spec.horizon, now) for key, spec in zip(keys, specs)]  # noqa: B905
    at = judged_at(found, now) + 1
    for key, spec, entry in zip(keys, specs, found):  # noqa: B905 (the slot built both)
        if entry is not None:
            store.put(key, spec.horizon, None, at, at)
    return at


def load_states(specs: Sequence[StateSpec], found: Sequence[Entry | None], now: int) -> list[Any]:
    """Each state at ``now``: a state past its expiry is absent (its latest time is not later
    than ``now`` either)."""
    views: list[Any] = []
    for entry, spec in zip(found, specs):  # noqa: B905
        state = entry[2] if entry is not None and entry[0] > now else None
        views.append(spec.twin.load(state, now, spec))
    return views


def refund_states(
    store: StateStore,
    keys: Sequence[str],
    specs: Sequence[StateSpec],
    found: Sequence[Entry | None],
    views: list[Any],
    now: int,
    cost: int,
    marks: Sequence[Mark | None] | None,
) -> None:
    """REFUND: each stored state gives back ``cost`` units: exactly what the hit of its mark
    took, none where that hit took nothing, the newest units when no marks are given."""
    for i, (entry, spec) in enumerate(zip(found, specs)):  # noqa: B905
        mark = None if marks is None else marks[i]
        if entry is None or entry[0] <= now or (marks is not None and mark is None):
            continue  # nothing stored, or nothing of this hit: nothing to give back
        twin = spec.twin
        state = twin.refund(views[i], now, cost, spec, mark)
        # a refund only shrinks what can matter: the expiry stays, the time moves on
        store.put(keys[i], spec.horizon, state, entry[0], now)
        views[i] = twin.load(state, now, spec)


def check_rules(
    specs: Sequence[StateSpec], views: Sequence[Any], now: int, need: int
) -> tuple[list[int], bool]:
    """Every rule's wait (µs until it admits a hit of ``need``; 0: it does), in spec order,
    and whether no non-shadow rule denies."""
    waits: list[int] = []
    allowed = True
    for view, spec in zip(views, specs):  # noqa: B905
        check = spec.twin.check
        for rule in spec.rules:
            wait = check(view, now, need, rule)
            waits.append(wait)
            if wait and not rule.shadow:
                allowed = False
    return waits, allowed


def consume_states(
    store: StateStore,
    keys: Sequence[str],
    specs: Sequence[StateSpec],
    views: list[Any],
    waits: Sequence[int],
    now: int,
    cost: int,
) -> None:
    """HIT, allowed: every state consumes, but a shadow rule's own state only if it admits."""
    first = 0
    for i, spec in enumerate(specs):
        if not spec.shadow or waits[first] == 0:
            twin = spec.twin
            state = twin.consume(views[i], now, cost, spec)
            store.put(keys[i], spec.horizon, state, now + twin.ttl(state, now, spec), now)
            views[i] = twin.load(state, now, spec)
        first += len(spec.rules)


def run(
    store: StateStore,
    keys: Sequence[str],
    slot: Slot,
    now: int,
    cost: int,
    mode: int,
    marks: Sequence[Mark | None] | None = None,
    pinned: bool = False,
) -> Reply:
    """Execute the policy script against ``store``; see the module docstring.

    Time per state never goes back: every state keeps the latest time it was written at,
    and a call is judged at the latest of its own time and those, so a clock that steps
    back (threads that read it out of order, a failover to a lagging server) can neither
    count a window that a later call already trimmed nor start a fixed window afresh.
    """
    specs = slot.specs
    if mode != RESET:
        found = [store.get(key, spec.horizon, now) for key, spec in zip(keys, specs)]  # noqa: B905
        now = judged_at(found, now)
    else:
        now = reset_states(store, keys, specs, now, pinned)
        found = [None] * len(specs)
    views = load_states(specs, found, now)
    if mode == REFUND:
        refund_states(store, keys, specs, found, views, now, cost, marks)
    waits, allowed = check_rules(specs, views, now, cost if cost > 0 else 1)
    if mode == HIT and allowed and cost > 0:
        consume_states(store, keys, specs, views, waits, now, cost)
    # reported now: a memory state may change in place under a later call (logs are appended
    # to), while a reply must describe the hit it answers
    return Reply(slot, allowed, waits, now, views, b"", _report(slot, views, now))


def _report(slot: Slot, views: Sequence[Any], now: int) -> Report:
    report: Report = []
    for view, spec in zip(views, slot.specs):  # noqa: B905 (built together)
        rep = spec.twin.report
        for rule in spec.rules:
            report.append(rep(view, now, rule))
    return report


_HEAD = Struct(">" + struct_codes(REPLY_HEAD))  # allowed, now
_LENGTH = Struct(">" + struct_codes(REPLY_STATE_LENGTH))


def unpack(slot: Slot, data: bytes) -> Reply:
    """The Lua function's reply (see its header) as a Reply that reports when asked."""
    allowed, now = _HEAD.unpack_from(data)
    waits = slot.wait_format.unpack_from(data, _HEAD.size)
    return Reply(slot, allowed == 1, waits, now, None, data)


def admitted(mode: int, cost: int, reply: bytes) -> bool:
    """Whether a call of ``mode`` and ``cost`` whose Lua reply is ``reply`` admitted a hit
    that consumed (a denial writes nothing: all-or-nothing)."""
    return mode == HIT and cost > 0 and _HEAD.unpack_from(reply)[0] == 1


def _views(slot: Slot, data: bytes, now: int) -> list[Any]:
    """The states a Lua reply carries, loaded as :func:`run` leaves them."""
    at = _HEAD.size + slot.wait_format.size
    views: list[Any] = []
    for spec in slot.specs:
        (length,) = _LENGTH.unpack_from(data, at)
        raw = data[at + 4 : at + 4 + length]
        at += 4 + length
        twin = spec.twin
        views.append(twin.load(twin.decode(raw) if raw else None, now, spec))
    return views
