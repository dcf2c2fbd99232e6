"""The policy script: the Python twin of ``freqguard/lua/policy.lua``.

One call decides every rule of a policy that lives on one slot. It loads each key's state,
checks every rule, and writes only when no non-shadow rule denies (all-or-nothing). Both twins
return one reply shape, a flat list of integers::

    [allowed, remaining_1, reset_after_us_1, retry_after_us_1, remaining_2, ...]

with one triple per rule in the slot's rule order; a rule allowed the hit when its
``retry_after_us`` is 0. Modes: HIT (consume if allowed; cost 0 consumes nothing), CHECK (never
write), REFUND (give ``cost`` back, then report), RESET (delete, then report).

The Lua twin stops short of the report: it returns the decision and the states it leaves
behind, and :func:`expand` reports on them here, so the server (shared by every client)
spends no time on numbers most callers never read.
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
    "SlotPlan",
    "StateStore",
    "expand",
    "run",
]

HIT, CHECK, REFUND, RESET = 0, 1, 2, 3


class SlotPlan(NamedTuple):
    """Everything one script call needs besides keys, time, cost and mode."""

    keys: tuple[KeySpec, ...]
    text: str  # the same, as the Lua function reads it (ARGV[4])
    layouts: tuple[KeyLayout, ...]  # how each key was built (Redis folds keys into records)
    retries: Struct  # the Lua reply's retry times, one per rule (see expand)


class StateStore(Protocol):
    def get(self, key: str, lane: int, now: int) -> Any: ...

    def put(self, key: str, lane: int, state: Any, expire_at: int, now: int) -> None: ...

    def delete(self, key: str, lane: int) -> None: ...


def run(
    store: StateStore, keys: Sequence[str], plan: SlotPlan, now: int, cost: int, mode: int
) -> list[int]:
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

    reply = [1 if allowed else 0]
    position = 0
    for view, spec in zip(views, specs):  # noqa: B905
        report = spec.twin.report
        for rule in spec.rules:
            remaining, reset_after = report(view, now, rule)
            reply += (remaining, reset_after, retries[position])
            position += 1
    return reply


def _write(store: StateStore, key: str, spec: KeySpec, state: Any, now: int) -> Any:
    """Store (or delete, for ``None``) a new state; returns it normalized, as ``load`` would."""
    if state is None:
        store.delete(key, spec.lane)
    else:
        store.put(key, spec.lane, state, now + spec.twin.ttl(state, now, spec), now)
    return spec.twin.load(state, now, spec)


_HEAD = Struct(">BQ")
_LENGTH = Struct(">I")


def expand(plan: SlotPlan, data: bytes) -> list[int]:
    """The Lua function's reply (see its header) in the shape :func:`run` returns."""
    specs = plan.keys
    allowed, now = _HEAD.unpack_from(data)
    retries = plan.retries.unpack_from(data, 9)
    at = 9 + plan.retries.size
    reply = [allowed]
    position = 0
    for spec in specs:
        (length,) = _LENGTH.unpack_from(data, at)
        raw = data[at + 4 : at + 4 + length]
        at += 4 + length
        twin = spec.twin
        view = twin.load(twin.decode(raw) if raw else None, now, spec)
        for rule in spec.rules:
            remaining, reset_after = twin.report(view, now, rule)
            reply += (remaining, reset_after, retries[position])
            position += 1
    return reply
