"""calendar: a counter per calendar period of a time zone (a day from local midnight, a week
from Monday, a month from the 1st): ``Rule("3/day", by="recipient", calendar=True, tz=...)``.

The periods come from the specs, not from ``now``: the client, which knows time zones, sends
for each calendar state four instants (``StateSpec.bounds``, µs): the starts of the period
before the one holding its own clock's now, of that period, of the next, and the next's end.
The call picks the period holding *its* now (the server's time), so a server clock a little
ahead of the client's at midnight still counts into the new day; one that is more than a
period away from the client's is an error (:data:`OUTSIDE`), never a guess.

State: ``(period_start, count, born)``, as fixed-window's: ``born`` is when this count began,
which a refund's mark names. A state of another period is a new count, but for one thing: a
count begun (``born``) inside the current period is kept, whatever period it was filed under.
That is a recipient whose zone changed: every hit it counts happened inside the new zone's
current period, so keeping it is exact; a count begun before that period started is dropped,
which may admit, on the day of the change, up to the limit again.

Guarantee: at most ``limit`` per calendar period of the zone (a 23- or 25-hour day across a
DST change is one day); a state lives until its period ends.
"""

from __future__ import annotations

from typing import cast

from freqguard.script.contract import widths
from freqguard.script.strategies.base import RuleParams, StateSpec, counted, unpacker

#: Its number in the specs (its Lua table's ``code``, in ``calendar.lua``).
code = 5
#: Its packed state, in the Lua's notation (period_start, count, born).
STATE_FORMAT = ">I7I4I7"
#: The same state as the Lua stores it while the count fits 2 bytes and ``born`` is less than
#: ``SHORT_SPAN`` µs after the start (period_start, count, born - period_start), told apart by its
#: length.
SHORT_FORMAT = ">I7I2I5"
#: How many numbers follow its rules in the specs (``StateSpec.bounds``).
BOUNDS = 4
#: The error both twins raise for a time outside the periods the client sent.
OUTSIDE = "freqguard: calendar: time outside the periods the client sent"

State = tuple[int, int, int]  # (period_start, count, born)
View = tuple[int, int, int, int]  # the same, and the period's end
_unpack = unpacker(STATE_FORMAT)
_short = unpacker(SHORT_FORMAT)
_SHORT_BYTES = sum(widths(SHORT_FORMAT))


class OutsidePeriods(ValueError):
    """The call's time is in none of the periods its specs name: the client's and the
    store's clocks are more than a calendar period apart."""


def decode(raw: bytes) -> State:
    """The state as the Lua twin packs it (:data:`STATE_FORMAT`, or :data:`SHORT_FORMAT`)."""
    if len(raw) == _SHORT_BYTES:
        start, count, age = _short(raw)
        return (start, count, start + age)
    return cast(State, _unpack(raw))


def period(now: int, spec: StateSpec) -> tuple[int, int]:
    """``(start, end)`` of the period holding ``now``.

    Raises:
        OutsidePeriods: ``now`` is outside every period ``spec.bounds`` names.
    """
    b = spec.bounds
    for i in range(len(b) - 1):
        if b[i] <= now < b[i + 1]:
            return b[i], b[i + 1]
    raise OutsidePeriods(f"{OUTSIDE}: {now} µs is outside [{b[0]}, {b[-1]})")


def load(state: State | View | None, now: int, spec: StateSpec) -> View:
    start, end = period(now, spec)
    if state is not None and (state[0] == start or start <= state[2] < end):
        return (start, state[1], state[2], end)  # this period's count (see the module)
    return (start, 0, now, end)


def check(view: View, now: int, need: int, rule: RuleParams) -> int:
    if view[1] + need <= rule.capacity:
        return 0
    return view[3] - now


def consume(view: View, now: int, cost: int, spec: StateSpec) -> State:
    return (view[0], view[1] + cost, view[2])


def mark(view: View, now: int, spec: StateSpec) -> int:
    return view[2]  # the count the hit went into: its period's, begun at `born`


def refund(view: View, now: int, cost: int, spec: StateSpec, mark: int | None) -> State:
    if mark is not None and mark != view[2]:
        return (view[0], view[1], view[2])  # another count: its period is over
    return (view[0], max(0, view[1] - cost), view[2])


def report(view: View, now: int, rule: RuleParams) -> tuple[int, int]:
    if view[1] == 0:
        return rule.capacity, 0
    return max(0, rule.capacity - view[1]), view[3] - now


def ttl(state: State, now: int, spec: StateSpec) -> int:
    return period(now, spec)[1] - now


def limited(rule: RuleParams, limit: int, window: int) -> RuleParams | None:
    # a count per calendar period: a limit over another span (set while the rule rolled
    # over another window) has no meaning here
    return counted(rule, limit, window) if window == rule.window else None


def horizon(rules: tuple[RuleParams, ...]) -> int:
    # the longest a period can last: a month of 31 days and a DST hour, with room for
    # zones that moved across the date line (a rule's window is its nominal period)
    return 2 * rules[0].window
