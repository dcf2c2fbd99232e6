"""What every strategy twin offers the policy script.

A twin is the Python half of a strategy whose other half is a Lua file beside it
(``gcra.py``, ``gcra.lua``). Both use the same names in the same order:

* ``load(state, now, spec)``: the state normalized to ``now`` (``None`` means no state);
* ``check(view, now, need, rule)``: microseconds until a hit of ``need`` fits, 0 if it fits now;
* ``consume(view, now, cost, spec)``: the state to store;
* ``mark(view, now, spec)``: what a refund needs to find exactly the units a consume added
  (the time they were recorded at; a bucket's arrival time after them);
* ``refund(view, now, cost, spec, mark)``: the state with ``cost`` units given back: exactly
  those of the hit that left ``mark``, or with ``mark`` ``None`` the newest ones;
* ``report(view, now, rule)``: ``(remaining, reset_after_us)``;
* ``ttl(state, now, spec)``: how long, from ``now``, the stored state can still matter;
* ``limited(rule, limit, window)``: the rule as a per-key limit of ``limit`` per ``window``
  µs makes it decide, the rate as the operator wrote it read as this strategy reads rates
  (a bucket keeps the rule's own burst); ``None`` where this strategy cannot take it (a
  calendar's limit over another period than its own, a log past its bound): the rule's own
  numbers apply then;
* ``horizon(rules)``: the longest any state of those rules can matter (Python only: the
  memory backend files states by it);
* ``decode(raw)``: a state as the Lua twin packs it, which the client loads and reports on
  (the server only decides, see ``script.unpack``).

All values are integers (time in microseconds). A :class:`StateSpec` describes one piece of
state (one key): the state of one rule, except a sliding log, which one or more rules with the
same dimensions share. The Lua names its argument ``spec`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from freqguard.script.contract import MAX_SPAN_US, widths

__all__ = ["SKIP", "Mark", "RuleParams", "StateSpec", "Twin", "counted", "metered", "unpacker"]

#: A rule's ``reserve`` when it does not apply to a hit (its priority is not in the rule's
#: ``only``): it neither denies nor counts the hit (the variant makes it a shadow rule, and
#: its wait is 1 µs, so its own state is not consumed).
SKIP = -1

#: What a consume left in a state for its refund (``Twin.mark``): a time, or for buckets
#: ``(tat, back, born, interval)`` (``(tat, back, born)`` in receipts made before 0.2).
Mark = int | tuple[int, ...]


class RuleParams(NamedTuple):
    """The integers a twin needs of one rule."""

    capacity: int  # the limit (windows) or the burst (buckets)
    window: int  # microseconds
    interval: int  # microseconds per token (buckets), else 0
    shadow: bool
    tag: int = 0  # the rule's tag (per-key limits name their rule by it: script.limits)
    # what a hit must leave of the capacity (a priority's cap: the rest is reserved for the
    # others), added to its need when checked; SKIP: the rule does not apply to the hit
    reserve: int = 0
    # a bucket rule's own burst (``Rule(burst=...)``), which a per-key limit keeps; 0: its
    # capacity follows its rate's limit (and any other strategy)
    burst: int = 0
    # the rule's keying (script.limits.rule_keyings): a limit stored with keying entries
    # applies to the rule only where one of them is this (set for its partition dimension)
    keying: int = 0


class StateSpec(NamedTuple):
    """One piece of state (one key) touched by a script call, and the rules that read it.

    Not the ``KeyArgument`` of ``@capped(key=...)``, which says where a hit's dimension values
    come from."""

    twin: Twin
    rules: tuple[RuleParams, ...]
    horizon: int  # the longest the state can matter, µs (the memory store files keys by it)
    shadow: bool  # a shadow rule's own key: consumes only when that rule allows
    window: int  # the longest window of its rules, µs
    cap: int  # the largest capacity of its rules
    # a calendar state's periods (strategies.calendar: BOUNDS instants, µs), set per call;
    # empty for any other state
    bounds: tuple[int, ...] = ()
    # what every call of the state keeps, whatever tier it is decided at (its own rules'
    # and their tier tables': the spec text's ``window`` and ``cap`` words); 0: the spec's
    # own ``window`` and ``cap``
    base_window: int = 0
    base_cap: int = 0
    # what a call's tier (one a ``rate_for`` function returned) keeps past the base, which
    # a log or a rolling window remembers in its state until it expires (design note 118);
    # 0: nothing. A per-key limit leaves it as the tier asked it: a limit that covers the
    # tier's window or count does not hide the tier from the state (design note 119)
    keep_window: int = 0
    keep_cap: int = 0


class Twin(Protocol):
    code: int  # the strategy's number in the specs
    STATE_FORMAT: str  # its packed state, in the Lua's notation

    def load(self, state: Any, now: int, spec: StateSpec) -> Any: ...

    def check(self, view: Any, now: int, need: int, rule: RuleParams) -> int: ...

    def consume(self, view: Any, now: int, cost: int, spec: StateSpec) -> Any: ...

    def mark(self, view: Any, now: int, spec: StateSpec) -> Mark: ...

    def refund(self, view: Any, now: int, cost: int, spec: StateSpec, mark: Any) -> Any: ...

    def report(self, view: Any, now: int, rule: RuleParams) -> tuple[int, int]: ...

    def ttl(self, state: Any, now: int, spec: StateSpec) -> int: ...

    def horizon(self, rules: tuple[RuleParams, ...]) -> int: ...

    def limited(self, rule: RuleParams, limit: int, window: int) -> RuleParams | None: ...

    def decode(self, raw: bytes) -> Any: ...


#: A short state's numbers (a strategy's ``SHORT_FORMAT``): ``born`` as its distance from the
#: time before it, below this many µs (5 bytes); a window's count below ``SHORT_COUNT``. The
#: Lua stores a state short whenever it fits (and a bucket's ``back`` is 0), else in full:
#: the memory twin keeps numbers, not bytes, so only replies read it.
SHORT_SPAN = 2**40
SHORT_COUNT = 2**16


def counted(rule: RuleParams, limit: int, window: int) -> RuleParams | None:
    """``limited`` for the strategies that count per window: ``limit`` per ``window``."""
    if limit < 1 or window < 1:
        return None
    return rule._replace(capacity=limit, window=window, interval=0)


def metered(rule: RuleParams, limit: int, window: int) -> RuleParams | None:
    """``limited`` for the buckets: one token per ``window / limit`` µs (rounded up, as a
    rule's own), the rule's burst kept if it set one, else ``limit``; ``None`` past the
    bound a rule's refill time has (``bounds.MAX_SPAN_US``)."""
    if limit < 1 or window < 1:
        return None
    interval = -(-window // limit)
    capacity = rule.burst or limit
    if capacity * interval > MAX_SPAN_US:
        return None
    return rule._replace(capacity=capacity, window=window, interval=interval)


def unpacker(fmt: str) -> Callable[[bytes], tuple[int, ...]]:
    """What reads a strategy's state as its Lua packs it (its module's ``STATE_FORMAT``)."""
    bounds, at = [], 0
    for width in widths(fmt):
        bounds.append((at, at + width))
        at += width

    def unpack(raw: bytes) -> tuple[int, ...]:
        return tuple([int.from_bytes(raw[start:end], "big") for start, end in bounds])

    return unpack
