"""quiet: a policy's quiet hours (``Policy(..., quiet=QuietHours("21:00", "08:00", ...))``),
decided as the pseudo-rule ``"quiet-hours"``: a hit inside them waits until they end, and no
state is ever written (its field is read, always empty).

The hours come from the specs, as a calendar's periods do (see ``strategies.calendar``): the
client sends the span it computed them for and the quiet intervals in it, around its own
clock, in the hit's zone (none for a priority the quiet hours exempt); the call checks its
own time against them. A time outside the span is an error (:data:`OUTSIDE`), never a guess.
"""

from __future__ import annotations

from freqguard.script.strategies.base import RuleParams, StateSpec
from freqguard.script.strategies.calendar import OutsidePeriods

#: Its number in the specs (its Lua table's ``code``, in ``quiet.lua``).
code = 6
#: Its packed state, in the Lua's notation: it has none (nothing is ever stored).
STATE_FORMAT = ">"
#: How many numbers follow its rule in the specs (``StateSpec.bounds``): the span the
#: client computed (three local days around its clock), then the four quiet intervals
#: that begin on the day before it and on each of its days (0 0 where there are none).
BOUNDS = 10
#: The error both twins raise for a time outside the span the client sent.
OUTSIDE = "freqguard: quiet hours: time outside the span the client sent"

View = int  # the end of the quiet interval holding now, 0 outside them


def decode(raw: bytes) -> tuple[()]:
    """Nothing is stored."""
    return ()


def load(state: object, now: int, spec: StateSpec) -> View:
    b = spec.bounds
    if not b[0] <= now < b[1]:
        raise OutsidePeriods(f"{OUTSIDE}: {now} µs is outside [{b[0]}, {b[1]})")
    for i in range(2, len(b), 2):
        if b[i] <= now < b[i + 1]:
            return b[i + 1]
    return 0


def check(view: View, now: int, need: int, rule: RuleParams) -> int:
    return view - now if view else 0


def consume(view: View, now: int, cost: int, spec: StateSpec) -> None:
    return None  # quiet hours count nothing


def mark(view: View, now: int, spec: StateSpec) -> None:
    return None  # a refund has nothing to give back here


def refund(view: View, now: int, cost: int, spec: StateSpec, mark: object) -> None:
    return None


def report(view: View, now: int, rule: RuleParams) -> tuple[int, int]:
    return (0, view - now) if view else (rule.capacity, 0)


def ttl(state: object, now: int, spec: StateSpec) -> int:
    return 0


def limited(rule: RuleParams, limit: int, window: int) -> RuleParams | None:
    return None  # quiet hours have no rate a limit could change


def horizon(rules: tuple[RuleParams, ...]) -> int:
    return rules[0].window
