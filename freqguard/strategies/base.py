"""What every strategy twin offers the policy script.

A twin is the Python half of a strategy whose other half is a Lua function in
``freqguard/lua/policy.lua``. Both use the same names in the same order:

* ``load(state, now, key)``: the state normalized to ``now`` (``None`` means no state);
* ``check(view, now, need, rule)``: microseconds until a hit of ``need`` fits, 0 if it fits now;
* ``consume(view, now, cost, key)``: the state to store;
* ``mark(view, now, key)``: what a refund needs to find exactly the units a consume added
  (the time they were recorded at; a bucket's arrival time after them);
* ``refund(view, now, cost, key, mark)``: the state with ``cost`` units given back: exactly
  those of the hit that left ``mark``, or with ``mark`` ``None`` the newest ones;
* ``report(view, now, rule)``: ``(remaining, reset_after_us)``;
* ``ttl(state, now, key)``: how long, from ``now``, the stored state can still matter;
* ``decode(raw)``: a state as the Lua twin packs it, which the client loads and reports on
  (the server only decides, see ``script.unpack``).

All values are integers (time in microseconds). A key holds the state of one rule, except a
sliding log, which one or more rules with the same dimensions share.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

__all__ = ["KeySpec", "Mark", "RuleParams", "Twin"]

#: What a consume left in a state for its refund (``Twin.mark``): a time, or for buckets
#: ``(tat, back, born)``.
Mark = int | tuple[int, int, int]


class RuleParams(NamedTuple):
    """The integers a twin needs of one rule."""

    capacity: int  # the limit (windows) or the burst (buckets)
    window: int  # microseconds
    interval: int  # microseconds per token (buckets), else 0
    shadow: bool


class KeySpec(NamedTuple):
    """One piece of state touched by a script call, and the rules that read it."""

    twin: Twin
    rules: tuple[RuleParams, ...]
    lane: int  # the longest the state can matter, µs (the memory store files keys by it)
    shadow: bool  # a shadow rule's own key: consumes only when that rule allows
    window: int  # the longest window of its rules, µs
    cap: int  # the largest capacity of its rules


class Twin(Protocol):
    code: int  # the strategy's number in the script's ARGV

    def load(self, state: Any, now: int, key: KeySpec) -> Any: ...

    def check(self, view: Any, now: int, need: int, rule: RuleParams) -> int: ...

    def consume(self, view: Any, now: int, cost: int, key: KeySpec) -> Any: ...

    def mark(self, view: Any, now: int, key: KeySpec) -> Mark: ...

    def refund(self, view: Any, now: int, cost: int, key: KeySpec, mark: Any) -> Any: ...

    def report(self, view: Any, now: int, rule: RuleParams) -> tuple[int, int]: ...

    def ttl(self, state: Any, now: int, key: KeySpec) -> int: ...

    def max_ttl(self, rules: tuple[RuleParams, ...]) -> int: ...

    def decode(self, raw: bytes) -> Any: ...
