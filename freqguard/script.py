"""The policy script: the Python twin of ``freqguard/lua/policy.lua``.

One call decides every rule of a policy that lives on one slot. It loads each key's state,
checks every rule, and writes only when no non-shadow rule denies (all-or-nothing). Both twins
answer with a :class:`Reply`: whether the slot allowed the hit, each rule's retry time (µs, in
the slot's rule order; 0 when that rule admits the hit), the time it was judged at, and the
states it left behind, which the Reply reports on (remaining, reset_after µs) when asked.
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

from freqguard.contract import CHECK, HIT, REFUND, RESET
from freqguard.keys import KeyLayout
from freqguard.strategies import KeySpec
from freqguard.strategies.base import Mark

__all__ = [
    "CHECK",
    "HIT",
    "REFUND",
    "RESET",
    "KeySpec",
    "Reply",
    "SlotPlan",
    "StateStore",
    "run",
    "unpack",
]


class SlotPlan(NamedTuple):
    """One slot of a policy, compiled: everything one script call needs besides the hit's
    values, time, cost and mode, and how its reply maps back to the policy's rules."""

    keys: tuple[KeySpec, ...]
    text: str  # the same, as the Lua function reads it (ARGV[4])
    layouts: tuple[KeyLayout, ...]  # how each key was built (Redis folds keys into records)
    waits: Struct  # the Lua reply's retry times, one per rule (see unpack)
    rule_index: tuple[int, ...]  # the policy's index of each rule, in reply order


Report = list[tuple[int, int]]


class Reply:
    """One slot's answer.

    Attributes:
        allowed: whether no non-shadow rule denied.
        waits: µs until each rule would admit the hit (0: it does), in the slot's rule order.
        now: the µs the slot was judged at: the call's time, or a state's later one (time per
            state never goes back, see :func:`run`).
    """

    __slots__ = ("_data", "_plan", "_report", "_views", "allowed", "now", "waits")

    def __init__(
        self,
        plan: SlotPlan,
        allowed: bool,
        waits: Sequence[int],
        now: int,
        views: list[Any] | None = None,
        data: bytes = b"",
        report: Report | None = None,
    ) -> None:
        self._plan = plan
        self._report = report
        self.allowed = allowed
        self.waits = waits
        self.now = now
        self._views = views
        self._data = data

    def views(self) -> list[Any]:
        """Each state as the call left it, loaded at :attr:`now`, in plan order (a memory
        log may have grown since: only its marks, which do not read it, use it then)."""
        views = self._views
        if views is None:
            views = self._views = _views(self._plan, self._data, self.now)
        return views

    def report(self) -> Report:
        """``(remaining, reset_after µs)`` per rule, in the slot's rule order."""
        report = self._report
        if report is None:
            report = self._report = _report(self._plan, self.views(), self.now)
        return report

    def marks(self, cost: int, mode: int) -> tuple[Mark | None, ...]:
        """Per state, what a refund needs to take back exactly what this call consumed
        (``None``: it consumed nothing there); see ``Twin.mark``."""
        specs = self._plan.keys
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
    """Where :func:`run` keeps states: ``(expire_at, latest, state)`` by key, µs."""

    def get(self, key: str, lane: int, now: int) -> tuple[int, int, Any] | None: ...

    def put(self, key: str, lane: int, state: Any, expire_at: int, latest: int) -> None: ...

    def delete(self, key: str, lane: int) -> None: ...


def run(
    store: StateStore,
    keys: Sequence[str],
    plan: SlotPlan,
    now: int,
    cost: int,
    mode: int,
    marks: Sequence[Mark | None] | None = None,
) -> Reply:
    """Execute the policy script against ``store``; see the module docstring.

    Time per state never goes back: every state keeps the latest time it was written at,
    and a call is judged at the latest of its own time and those, so a clock that steps
    back (threads that read it out of order, a failover to a lagging server) can neither
    count a window that a later call already trimmed nor start a fixed window afresh.
    """
    specs = plan.keys
    need = cost if cost > 0 else 1
    if mode == RESET:
        for key, spec in zip(keys, specs):  # noqa: B905 (the plan built both; hot path)
            store.delete(key, spec.lane)
        found: list[tuple[int, int, Any] | None] = [None] * len(specs)
    else:
        found = [store.get(key, spec.lane, now) for key, spec in zip(keys, specs)]  # noqa: B905
        for entry in found:
            if entry is not None and entry[1] > now:
                now = entry[1]
    views: list[Any] = []
    for entry, spec in zip(found, specs):  # noqa: B905
        # a state past its expiry is absent (its latest time is not later than now either)
        state = entry[2] if entry is not None and entry[0] > now else None
        views.append(spec.twin.load(state, now, spec))
    if mode == REFUND:
        for i, (entry, spec) in enumerate(zip(found, specs)):  # noqa: B905
            mark = None if marks is None else marks[i]
            if entry is None or entry[0] <= now or (marks is not None and mark is None):
                continue  # nothing stored, or nothing of this hit: nothing to give back
            twin = spec.twin
            state = twin.refund(views[i], now, cost, spec, mark)
            # a refund only shrinks what can matter: the expiry stays, the time moves on
            store.put(keys[i], spec.lane, state, entry[0], now)
            views[i] = twin.load(state, now, spec)

    retries: list[int] = []
    allowed = True
    for view, spec in zip(views, specs):  # noqa: B905
        check = spec.twin.check
        for rule in spec.rules:
            retry = check(view, now, need, rule)
            retries.append(retry)
            if retry and not rule.shadow:
                allowed = False

    if mode == HIT and allowed and cost > 0:
        first = 0
        for i, spec in enumerate(specs):
            if not spec.shadow or retries[first] == 0:
                twin = spec.twin
                state = twin.consume(views[i], now, cost, spec)
                store.put(keys[i], spec.lane, state, now + twin.ttl(state, now, spec), now)
                views[i] = twin.load(state, now, spec)
            first += len(spec.rules)
    # reported now: a memory state may change in place under a later call (logs are appended
    # to), while a reply must describe the hit it answers
    return Reply(plan, allowed, retries, now, views, report=_report(plan, views, now))


def _report(plan: SlotPlan, views: Sequence[Any], now: int) -> Report:
    report: Report = []
    for view, spec in zip(views, plan.keys):  # noqa: B905 (built together)
        rep = spec.twin.report
        report += [rep(view, now, rule) for rule in spec.rules]
    return report


_NOW = Struct(">Q")
_LENGTH = Struct(">I")


def unpack(plan: SlotPlan, data: bytes) -> Reply:
    """The Lua function's reply (see its header) as a Reply that reports when asked."""
    waits = plan.waits.unpack_from(data, 9)
    return Reply(plan, data[0] == 1, waits, _NOW.unpack_from(data, 1)[0], None, data)


def _views(plan: SlotPlan, data: bytes, now: int) -> list[Any]:
    """The states a Lua reply carries, loaded as :func:`run` leaves them."""
    at = 9 + plan.waits.size
    views: list[Any] = []
    for spec in plan.keys:
        (length,) = _LENGTH.unpack_from(data, at)
        raw = data[at + 4 : at + 4 + length]
        at += 4 + length
        twin = spec.twin
        views.append(twin.load(twin.decode(raw) if raw else None, now, spec))
    return views
