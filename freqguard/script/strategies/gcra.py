"""gcra: the generic cell rate algorithm, as redis-cell computes it.

State: the theoretical arrival time ``tat`` (µs), plus two numbers only refunds read: ``back``,
the µs refunds have moved ``tat`` back since the state was born, and ``born``, when that was
(see :func:`give_back`). Emission interval ``interval =
ceil(window / limit)``; capacity ``burst`` (default ``limit``; redis-cell's ``max_burst + 1``).
A hit of ``cost`` is allowed when ``max(tat, now) + cost * interval - now <= burst * interval``.

Guarantee: as token-bucket (the same decisions, one integer of state).
"""

from __future__ import annotations

from typing import cast

from freqguard.script.contract import BACK_LIMIT, widths
from freqguard.script.strategies.base import RuleParams, StateSpec, metered, unpacker

#: Its number in the specs (its Lua table's ``code``, in ``gcra.lua``).
code = 4
#: Its packed state, in the Lua's notation (tat, back, born).
STATE_FORMAT = ">I7I7I7"
#: The same state as the Lua stores it while ``back`` is 0 and ``born`` is less than
#: ``SHORT_SPAN`` µs before ``tat`` (tat, tat - born), told apart by its length.
SHORT_FORMAT = ">I7I5"


View = tuple[int, int, int]  # (tat, back, born)
_unpack = unpacker(STATE_FORMAT)
_short = unpacker(SHORT_FORMAT)
_SHORT_BYTES = sum(widths(SHORT_FORMAT))


def decode(raw: bytes) -> View:
    """The state as the Lua twin packs it (:data:`STATE_FORMAT`, or :data:`SHORT_FORMAT`)."""
    if len(raw) == _SHORT_BYTES:
        tat, age = _short(raw)
        return (tat, 0, tat - age)
    return cast(View, _unpack(raw))


def load(state: View | None, now: int, spec: StateSpec) -> View:
    if state is None:
        return (now, 0, now)
    if state[0] > now:
        return state
    # full again: every hit's span has elapsed, so nothing can be given back any more; a new
    # generation (``born`` only grows) tells older receipts so, and ``back`` starts afresh
    return (now, 0, max(now, state[2] + 1))


def check(view: View, now: int, need: int, rule: RuleParams) -> int:
    over = view[0] + need * rule.interval - now - rule.capacity * rule.interval
    return over if over > 0 else 0


def consume(view: View, now: int, cost: int, spec: StateSpec) -> View:
    return (view[0] + cost * spec.rules[0].interval, view[1], view[2])


def mark(view: View, now: int, spec: StateSpec) -> tuple[int, int, int, int]:
    # the arrival time after the hit, what had been given back, the state's birth, and the
    # interval the hit was charged at (a per-key limit may change it before the refund)
    return (*view, spec.rules[0].interval)


def give_back(view: View, now: int, cost: int, interval: int, mark: tuple[int, ...] | None) -> int:
    """How far (µs) a refund moves a bucket's arrival time back.

    A hit's units span ``[tat - cost * interval, tat]`` of the arrival time it left (its
    mark). Refunds of earlier hits since have moved that span back by at most what was given
    back since (``back`` counts it): the span is taken to have moved that far, never less,
    so the part still ahead of ``now``, which is what goes back, is never overstated: what
    time already returned is not given twice, and later hits keep their place. A state born
    after the hit is not the one it consumed: nothing goes back. Without a mark, the whole
    cost goes back. The span is the hit's own (its mark's interval), whatever rate applies
    now; a mark made before marks carried it (three numbers) counts at ``interval``.
    """
    if mark is None:
        return cost * interval
    tat, back, born = mark[0], mark[1], mark[2]
    span = cost * (mark[3] if len(mark) > 3 else interval)
    if born != view[2]:
        return 0
    end = tat - (view[1] - back)  # the difference first: every value stays below 2^53
    return max(0, end - max(now, end - span))


def refund(view: View, now: int, cost: int, spec: StateSpec, mark: tuple[int, ...] | None) -> View:
    tat = max(now, view[0] - give_back(view, now, cost, spec.rules[0].interval, mark))
    return next_back(tat, view[1] + (view[0] - tat), view[2])


def next_back(tat: int, back: int, born: int) -> View:
    """The state after a refund; past :data:`BACK_LIMIT` a new generation starts, so that
    ``back`` stays exact in the Lua's doubles (older receipts then give back nothing: never
    too much)."""
    return (tat, 0, born + 1) if back > BACK_LIMIT else (tat, back, born)


def report(view: View, now: int, rule: RuleParams) -> tuple[int, int]:
    ahead = view[0] - now
    return max(0, (rule.capacity * rule.interval - ahead) // rule.interval), ahead


def newest(state: View) -> int:
    """The latest time the state names: its generation's birth, which a full bucket may set
    after its call's time (a reset ends after it)."""
    return state[2]


def ttl(view: View, now: int, spec: StateSpec) -> int:
    return view[0] - now


def limited(rule: RuleParams, limit: int, window: int) -> RuleParams | None:
    return metered(rule, limit, window)


def horizon(rules: tuple[RuleParams, ...]) -> int:
    return rules[0].capacity * rules[0].interval
