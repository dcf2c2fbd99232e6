"""gcra: the generic cell rate algorithm, as redis-cell computes it.

State: the theoretical arrival time ``tat`` (µs). Emission interval ``interval =
ceil(window / limit)``; capacity ``burst`` (default ``limit``; redis-cell's ``max_burst + 1``).
A hit of ``cost`` is allowed when ``max(tat, now) + cost * interval - now <= burst * interval``.

Guarantee: as token-bucket (the same decisions, one integer of state).
"""

from __future__ import annotations

from freqguard.strategies.base import KeySpec, RuleParams

code = 4


def decode(raw: bytes) -> int:
    """The state as the Lua twin packs it (``>I7``)."""
    return int.from_bytes(raw, "big")


def load(state: int | None, now: int, key: KeySpec) -> int:
    return now if state is None or state < now else state


def check(tat: int, now: int, need: int, rule: RuleParams) -> int:
    over = tat + need * rule.interval - now - rule.capacity * rule.interval
    return over if over > 0 else 0


def consume(tat: int, now: int, cost: int, key: KeySpec) -> int:
    return tat + cost * key.rules[0].interval


def mark(tat: int, now: int, key: KeySpec) -> int:
    return tat


def give_back(mark: int | None, now: int, cost: int, interval: int) -> int:
    """How far (µs) a refund moves the arrival time back. With ``mark`` (the arrival time
    the hit left behind) only the part of the hit's own span ``[mark - cost * interval,
    mark]`` that is still ahead of ``now``: what time gave back already is not given twice,
    and later hits keep their place. Without it, the whole cost."""
    span = cost * interval
    if mark is None:
        return span
    return max(0, mark - max(now, mark - span))


def refund(tat: int, now: int, cost: int, key: KeySpec, mark: int | None) -> int:
    return max(now, tat - give_back(mark, now, cost, key.rules[0].interval))


def report(tat: int, now: int, rule: RuleParams) -> tuple[int, int]:
    ahead = tat - now
    return max(0, (rule.capacity * rule.interval - ahead) // rule.interval), ahead


def ttl(tat: int, now: int, key: KeySpec) -> int:
    return tat - now


def max_ttl(rules: tuple[RuleParams, ...]) -> int:
    return rules[0].capacity * rules[0].interval
