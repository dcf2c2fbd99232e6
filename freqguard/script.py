"""The policy script: the Python twin of ``freqguard/lua/policy.lua``.

One call decides every rule of a policy that lives on one slot. It loads each key's state,
checks every rule, and writes only when no non-shadow rule denies (all-or-nothing). Both twins
return one reply shape, a flat list of integers::

    [allowed, remaining_1, reset_after_us_1, retry_after_us_1, remaining_2, ...]

with one triple per rule in the slot's rule order; a rule allowed the hit when its
``retry_after_us`` is 0. Modes: HIT (consume if allowed; cost 0 consumes nothing), CHECK (never
write), REFUND (give ``cost`` back, then report), RESET (delete, then report).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from freqguard.strategies import RuleParams, Twin

__all__ = ["CHECK", "HIT", "REFUND", "RESET", "KeySpec", "SlotPlan", "StateStore", "run"]

HIT, CHECK, REFUND, RESET = 0, 1, 2, 3


class KeySpec(NamedTuple):
    """One piece of state touched by a slot's script call."""

    twin: Twin
    rules: tuple[RuleParams, ...]
    lane: int  # the longest the state can matter, µs: where the memory store files it
    shadow: bool  # a shadow rule's own key: consumes only when that rule allows


class SlotPlan(NamedTuple):
    """Everything one script call needs besides keys, time, cost and mode."""

    keys: tuple[KeySpec, ...]
    argv: tuple[str, ...]  # the same, serialized for the Lua script


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
    for key, spec in zip(keys, specs, strict=True):
        if mode == RESET:
            store.delete(key, spec.lane)
            state = None
        else:
            state = store.get(key, spec.lane, now)
        view = spec.twin.load(state, now, spec.rules)
        if mode == REFUND:
            state = spec.twin.refund(view, now, cost, spec.rules)
            _store(store, key, spec, state, now)
            view = spec.twin.load(state, now, spec.rules)
        views.append(view)

    retries: list[int] = []
    allowed = True
    for view, spec in zip(views, specs, strict=True):
        for rule in spec.rules:
            retry = spec.twin.check(view, now, need, rule)
            retries.append(retry)
            if retry and not rule.shadow:
                allowed = False

    if mode == HIT and allowed and cost > 0:
        first = 0
        for i, spec in enumerate(specs):
            if not spec.shadow or retries[first] == 0:
                state = spec.twin.consume(views[i], now, cost, spec.rules)
                _store(store, keys[i], spec, state, now)
                views[i] = spec.twin.load(state, now, spec.rules)
            first += len(spec.rules)

    reply = [1 if allowed else 0]
    position = 0
    for view, spec in zip(views, specs, strict=True):
        for rule in spec.rules:
            remaining, reset_after = spec.twin.report(view, now, rule)
            reply += (remaining, reset_after, retries[position])
            position += 1
    return reply


def _store(store: StateStore, key: str, spec: KeySpec, state: Any, now: int) -> None:
    if state is None:
        store.delete(key, spec.lane)
    else:
        store.put(key, spec.lane, state, now + spec.twin.ttl(state, now, spec.rules), now)
