"""token-bucket: ``burst`` tokens, one more every ``interval = ceil(window / limit)`` µs.

State: ``(tokens, last)``: whole tokens, and the instant the last whole token was credited
(partial progress towards the next token is kept). A full bucket stops accruing.

Guarantee: at most ``burst + n`` cost units in any interval holding ``n`` intervals; in the
long run ``limit`` per ``window`` (the interval is rounded up to a whole microsecond, so never
faster). It admits exactly what gcra admits: the two are the same bucket stored two ways; this
one keeps two numbers and reports tokens.
"""

from __future__ import annotations

from freqguard.strategies.base import KeySpec, RuleParams
from freqguard.strategies.gcra import give_back

code = 3

View = tuple[int, int]


def decode(raw: bytes) -> View:
    """The state as the Lua twin packs it (``>I4I7``)."""
    return int.from_bytes(raw[:4], "big"), int.from_bytes(raw[4:11], "big")


def load(state: View | None, now: int, key: KeySpec) -> View:
    rule = key.rules[0]
    if state is None:
        return (rule.capacity, now)
    tokens, last = state
    if now > last:
        earned = (now - last) // rule.interval
        tokens += earned
        last += earned * rule.interval
    if tokens >= rule.capacity:
        return (rule.capacity, now)
    return (tokens, last)


def check(view: View, now: int, need: int, rule: RuleParams) -> int:
    tokens, last = view
    if tokens >= need:
        return 0
    return (need - tokens) * rule.interval - (now - last)


def consume(view: View, now: int, cost: int, key: KeySpec) -> View:
    return (view[0] - cost, view[1])


def mark(view: View, now: int, key: KeySpec) -> int:
    rule = key.rules[0]
    return view[1] + (rule.capacity - view[0]) * rule.interval  # as gcra's arrival time


def refund(view: View, now: int, cost: int, key: KeySpec, mark: int | None) -> View:
    rule = key.rules[0]
    if mark is None:
        tokens, last = view[0] + cost, view[1]
    else:  # move the arrival time back as gcra does: whole tokens, the rest from `last`
        back = give_back(mark, now, cost, rule.interval)
        tokens, last = view[0] + back // rule.interval, view[1] - back % rule.interval
    return (rule.capacity, now) if tokens >= rule.capacity else (tokens, last)


def report(view: View, now: int, rule: RuleParams) -> tuple[int, int]:
    tokens, last = view
    if tokens >= rule.capacity:
        return rule.capacity, 0
    return tokens, (rule.capacity - tokens) * rule.interval - (now - last)


def ttl(state: View, now: int, key: KeySpec) -> int:
    rule = key.rules[0]
    return (rule.capacity - state[0]) * rule.interval - (now - state[1])


def max_ttl(rules: tuple[RuleParams, ...]) -> int:
    return rules[0].capacity * rules[0].interval
