"""fixed-window: a counter per window aligned to the epoch (``now - now % window``).

State: ``(window_start, count, born)``: ``born`` is when this window's count began, so that a
refund gives back only to the count its hit went into (not to one begun after a reset).

Guarantee: at most ``limit`` per aligned window, so up to ``2 * limit`` in an unaligned
interval of length ``window`` that straddles two windows. Cheapest state; not exact.
"""

from __future__ import annotations

from typing import cast

from freqguard.script.contract import widths
from freqguard.script.strategies.base import RuleParams, StateSpec, counted, unpacker

#: Its number in the specs (its Lua table's ``code``, in ``fixed_window.lua``).
code = 1
#: Its packed state, in the Lua's notation (window_start, count, born).
STATE_FORMAT = ">I7I4I7"
#: The same state as the Lua stores it while the count fits 2 bytes and ``born`` is less than
#: ``SHORT_SPAN`` µs after the start (window_start, count, born - window_start), told apart by its
#: length.
SHORT_FORMAT = ">I7I2I5"

View = tuple[int, int, int]  # (window_start, count, born)
_unpack = unpacker(STATE_FORMAT)
_short = unpacker(SHORT_FORMAT)
_SHORT_BYTES = sum(widths(SHORT_FORMAT))


def decode(raw: bytes) -> View:
    """The state as the Lua twin packs it (:data:`STATE_FORMAT`, or :data:`SHORT_FORMAT`)."""
    if len(raw) == _SHORT_BYTES:
        start, count, age = _short(raw)
        return (start, count, start + age)
    return cast(View, _unpack(raw))


def load(state: View | None, now: int, spec: StateSpec) -> View:
    start = now - now % spec.rules[0].window
    if state is None:
        return (start, 0, now)
    if state[0] != start:  # a new count, born after the one before (a per-key limit's
        return (start, 0, max(now, state[2] + 1))  # window, begun in the same µs)
    return state


def check(view: View, now: int, need: int, rule: RuleParams) -> int:
    if view[1] + need <= rule.capacity:
        return 0
    return view[0] + rule.window - now


def consume(view: View, now: int, cost: int, spec: StateSpec) -> View:
    return (view[0], view[1] + cost, view[2])


def mark(view: View, now: int, spec: StateSpec) -> int:
    return view[2]  # the count the hit went into: its window's, begun at `born`


def refund(view: View, now: int, cost: int, spec: StateSpec, mark: int | None) -> View:
    if mark is not None and mark != view[2]:
        return view  # another count: the hit's window is over, or it was reset since
    return (view[0], max(0, view[1] - cost), view[2])


def report(view: View, now: int, rule: RuleParams) -> tuple[int, int]:
    if view[1] == 0:
        return rule.capacity, 0
    return max(0, rule.capacity - view[1]), view[0] + rule.window - now


def newest(state: View) -> int:
    """The latest time the state names: its count's birth (a reset ends after it)."""
    return state[2]


def ttl(state: View, now: int, spec: StateSpec) -> int:
    return state[0] + spec.rules[0].window - now


def limited(rule: RuleParams, limit: int, window: int) -> RuleParams | None:
    return counted(rule, limit, window)


def horizon(rules: tuple[RuleParams, ...]) -> int:
    return rules[0].window
