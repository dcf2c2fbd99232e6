"""token-bucket: ``burst`` tokens, one more every ``interval = ceil(window / limit)`` µs.

State: ``(tokens, last, back, born)``: whole tokens, and the instant the last whole token was
credited (partial progress towards the next token is kept); a full bucket stops accruing.
``back`` and ``born`` are gcra's, for exact refunds (see ``gcra.give_back``).

Guarantee: at most ``burst + n`` cost units in any interval holding ``n`` intervals; in the
long run ``limit`` per ``window`` (the interval is rounded up to a whole microsecond, so never
faster). It admits exactly what gcra admits: the two are the same bucket stored two ways; this
one keeps two numbers and reports tokens.
"""

from __future__ import annotations

from typing import cast

from freqguard.script.contract import widths
from freqguard.script.strategies.base import RuleParams, StateSpec, metered, unpacker
from freqguard.script.strategies.gcra import give_back, next_back

#: Its number in the specs (its Lua table's ``code``, in ``token_bucket.lua``).
code = 3
#: Its packed state, in the Lua's notation (tokens, last, back, born).
STATE_FORMAT = ">I4I7I7I7"
#: The same state as the Lua stores it while ``back`` is 0 and ``born`` is less than
#: ``SHORT_SPAN`` µs before ``last`` (tokens, last, last - born), told apart by its length.
SHORT_FORMAT = ">I4I7I5"

View = tuple[int, int, int, int]  # (tokens, last, back, born)
_unpack = unpacker(STATE_FORMAT)
_short = unpacker(SHORT_FORMAT)
_SHORT_BYTES = sum(widths(SHORT_FORMAT))


def decode(raw: bytes) -> View:
    """The state as the Lua twin packs it (:data:`STATE_FORMAT`, or :data:`SHORT_FORMAT`)."""
    if len(raw) == _SHORT_BYTES:
        tokens, last, age = _short(raw)
        return (tokens, last, 0, last - age)
    return cast(View, _unpack(raw))


def load(state: View | None, now: int, spec: StateSpec) -> View:
    rule = spec.rules[0]
    if state is None:
        return (rule.capacity, now, 0, now)
    tokens, last, back, born = state
    if now > last:
        earned = (now - last) // rule.interval
        tokens += earned
        last += earned * rule.interval
    if tokens >= rule.capacity:  # full again: a new generation, as gcra's load
        return (rule.capacity, now, 0, max(now, born + 1))
    return (tokens, last, back, born)


def check(view: View, now: int, need: int, rule: RuleParams) -> int:
    tokens, last = view[0], view[1]
    if tokens >= need:
        return 0
    return (need - tokens) * rule.interval - (now - last)


def consume(view: View, now: int, cost: int, spec: StateSpec) -> View:
    return (view[0] - cost, view[1], view[2], view[3])


def _tat(view: View, rule: RuleParams) -> int:
    """The bucket as gcra's arrival time: when it is full again."""
    return view[1] + (rule.capacity - view[0]) * rule.interval


def mark(view: View, now: int, spec: StateSpec) -> tuple[int, int, int, int]:
    rule = spec.rules[0]
    return (_tat(view, rule), view[2], view[3], rule.interval)  # as gcra's


def refund(view: View, now: int, cost: int, spec: StateSpec, mark: tuple[int, ...] | None) -> View:
    rule = spec.rules[0]
    tat = _tat(view, rule)
    # move the arrival time back as gcra does: whole tokens, the rest from `last`, which
    # stays >= 0 (packed unsigned): within one interval of time 0 a refund gives back that
    # much less (the strict side), where `last` could not go back far enough
    moved = give_back((tat, view[2], view[3]), now, cost, rule.interval, mark)
    # the hit's span counts at its own interval: at another (a tier re-rated since), at
    # most the units taken go back, never more (fewer where the interval grew: strict)
    moved = min(moved, cost * rule.interval)
    short = moved % rule.interval - view[1]
    if short > 0:
        moved -= short
    tokens, last = view[0] + moved // rule.interval, view[1] - moved % rule.interval
    if tokens >= rule.capacity:  # full: the arrival time is now, so it moved by tat - now
        _, back, born = next_back(now, view[2] + (tat - now), view[3])
        return (rule.capacity, now, back, born)
    _, back, born = next_back(tat - moved, view[2] + moved, view[3])
    return (tokens, last, back, born)


def report(view: View, now: int, rule: RuleParams) -> tuple[int, int]:
    tokens, last = view[0], view[1]
    if tokens >= rule.capacity:
        return rule.capacity, 0
    return tokens, (rule.capacity - tokens) * rule.interval - (now - last)


def newest(state: View) -> int:
    """The latest time the state names: its generation's birth (as gcra's)."""
    return state[3]


def ttl(state: View, now: int, spec: StateSpec) -> int:
    rule = spec.rules[0]
    return (rule.capacity - state[0]) * rule.interval - (now - state[1])


def limited(rule: RuleParams, limit: int, window: int) -> RuleParams | None:
    return metered(rule, limit, window)


def horizon(rules: tuple[RuleParams, ...]) -> int:
    return rules[0].capacity * rules[0].interval
