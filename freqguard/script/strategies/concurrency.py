"""concurrency: at most ``limit`` leases held at once, each given back when its holder is
done or freeing itself ``lease`` seconds after it was taken (a holder that died).

State: the sliding log's (``sliding_log.py``): the ascending times (µs) the held leases
were taken at, one entry per cost unit, packed. A lease counts while ``now - lease < t``,
so the log's arithmetic is the lease's: a hit takes a lease where the log admits it, its
wait is when the oldest lease it needs expires, and giving a lease back is the log's refund
of the hit's own entries (its mark: the time it was taken). Its state is its rule's own,
never shared with a sliding-log rule's, and a lease is given back without the policy's
other rules (``Guard.lease``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from freqguard.script.strategies import sliding_log as log
from freqguard.script.strategies.base import RuleParams, StateSpec

#: Its number in the specs (its Lua table's ``code``, in ``concurrency.lua``).
code = 7
#: Its packed state: the sliding log's.
STATE_FORMAT = log.STATE_FORMAT
KEEPS_OWN = log.KEEPS_OWN


def decode(raw: bytes) -> log.PackedLog:
    return log.decode(raw)


def load(state: Any, now: int, spec: StateSpec) -> Any:
    return log.load(state, now, spec)


def check(view: Any, now: int, need: int, rule: RuleParams) -> int:
    """0 if ``need`` more leases can be held, else when the oldest one needed expires."""
    return log.check(view, now, need, rule)


def consume(view: Any, now: int, cost: int, spec: StateSpec) -> Any:
    return log.consume(view, now, cost, spec)


def mark(view: Any, now: int, spec: StateSpec) -> int:
    """The time the hit's leases were taken at: what gives exactly them back."""
    return log.mark(view, now, spec)


def refund(view: Any, now: int, cost: int, spec: StateSpec, mark: int | None) -> Any:
    return log.refund(view, now, cost, spec, mark)


def report(view: Sequence[int], now: int, rule: RuleParams) -> tuple[int, int]:
    """Leases free now, and when every lease held has expired at the latest."""
    return log.report(view, now, rule)


def ttl(view: Any, now: int, spec: StateSpec) -> int:
    return log.ttl(view, now, spec)


def limited(rule: RuleParams, limit: int, window: int) -> RuleParams | None:
    """``limit`` leases of the rule's own lease: a count stored without a window (0; written
    ``"N concurrent"``); a rate's count and window (set while the rule counted a rate) is
    not read as leases of that window."""
    if window != 0:
        return None
    return log.limited(rule, limit, rule.window)


def horizon(rules: tuple[RuleParams, ...]) -> int:
    return log.horizon(rules)
