"""The policy script: the Python twin of ``freqguard/lua/policy.lua``.

One call decides every rule of a policy that lives on one slot. It loads each key's state,
checks every rule, and writes only when no non-shadow rule denies (all-or-nothing). Both twins
answer with a :class:`Reply`: whether the slot allowed the hit, each rule's retry time (µs, in
the slot's rule order; 0 when that rule admits the hit), and each rule's report (remaining,
reset_after µs). Modes: HIT (consume if allowed; cost 0 consumes nothing), CHECK (never write),
REFUND (give ``cost`` back, then report), RESET (delete, then report).

The Lua twin stops short of the report: it returns the decision and the states it leaves
behind, and :func:`unpack` makes a Reply that reports on them here, and only when asked, so
neither the server (shared by every client) nor the client spends time on numbers most
callers never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from struct import Struct
from typing import Any, NamedTuple, Protocol

from freqguard.keys import KeyLayout
from freqguard.strategies import KeySpec

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

HIT, CHECK, REFUND, RESET = 0, 1, 2, 3


class SlotPlan(NamedTuple):
    """Everything one script call needs besides keys, time, cost and mode."""

    keys: tuple[KeySpec, ...]
    text: str  # the same, as the Lua function reads it (ARGV[4])
    layouts: tuple[KeyLayout, ...]  # how each key was built (Redis folds keys into records)
    retries: Struct  # the Lua reply's retry times, one per rule (see unpack)


Report = list[tuple[int, int]]


class Reply:
    """One slot's answer.

    Attributes:
        allowed: whether no non-shadow rule denied.
        retries: µs until each rule would admit the hit (0: it does), in the slot's rule order.
    """

    __slots__ = ("_data", "_plan", "_report", "allowed", "retries")

    def __init__(
        self,
        allowed: bool,
        retries: Sequence[int],
        report: Report | None = None,
        plan: SlotPlan | None = None,
        data: bytes = b"",
    ) -> None:
        self.allowed = allowed
        self.retries = retries
        self._report = report
        self._plan = plan
        self._data = data

    def report(self) -> Report:
        """``(remaining, reset_after µs)`` per rule, in the slot's rule order."""
        report = self._report
        if report is None:
            assert self._plan is not None
            report = self._report = _report(self._plan, self._data)
        return report


class StateStore(Protocol):
    def get(self, key: str, lane: int, now: int) -> Any: ...

    def put(self, key: str, lane: int, state: Any, expire_at: int, now: int) -> None: ...

    def delete(self, key: str, lane: int) -> None: ...


def run(
    store: StateStore, keys: Sequence[str], plan: SlotPlan, now: int, cost: int, mode: int
) -> Reply:
    """Execute the policy script against ``store``; see the module docstring."""
    specs = plan.keys
    need = cost if cost > 0 else 1
    views: list[Any] = []
    for key, spec in zip(keys, specs):  # noqa: B905 (the plan built both; hot path)
        twin = spec.twin
        if mode == RESET:
            store.delete(key, spec.lane)
            view = twin.load(None, now, spec)
        else:
            view = twin.load(store.get(key, spec.lane, now), now, spec)
            if mode == REFUND:
                view = _write(store, key, spec, twin.refund(view, now, cost, spec), now)
        views.append(view)

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
                state = spec.twin.consume(views[i], now, cost, spec)
                views[i] = _write(store, keys[i], spec, state, now)
            first += len(spec.rules)

    report: Report = []
    for view, spec in zip(views, specs):  # noqa: B905
        rep = spec.twin.report
        report += [rep(view, now, rule) for rule in spec.rules]
    return Reply(allowed, retries, report)


def _write(store: StateStore, key: str, spec: KeySpec, state: Any, now: int) -> Any:
    """Store (or delete, for ``None``) a new state; returns it normalized, as ``load`` would."""
    if state is None:
        store.delete(key, spec.lane)
    else:
        store.put(key, spec.lane, state, now + spec.twin.ttl(state, now, spec), now)
    return spec.twin.load(state, now, spec)


_NOW = Struct(">Q")
_LENGTH = Struct(">I")


def unpack(plan: SlotPlan, data: bytes) -> Reply:
    """The Lua function's reply (see its header) as a Reply that reports when asked."""
    retries = plan.retries.unpack_from(data, 9)
    return Reply(data[0] == 1, retries, None, plan, data)


def _report(plan: SlotPlan, data: bytes) -> Report:
    """Report on the states a Lua reply carries, as :func:`run` does on its own."""
    (now,) = _NOW.unpack_from(data, 1)
    at = 9 + plan.retries.size
    report: Report = []
    for spec in plan.keys:
        (length,) = _LENGTH.unpack_from(data, at)
        raw = data[at + 4 : at + 4 + length]
        at += 4 + length
        twin = spec.twin
        view = twin.load(twin.decode(raw) if raw else None, now, spec)
        report += [twin.report(view, now, rule) for rule in spec.rules]
    return report
