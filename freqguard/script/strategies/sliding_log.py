"""sliding-log: exact rolling windows.

State: the ascending timestamps (µs) of admitted hits, one per cost unit, kept only while
inside the longest window and at most ``max(limit)`` of them; packed (``array('q')`` here, a
binary string in Redis), never one object per hit. Rules of a policy with the same
dimensions share one log: every one of them admits exactly the hits the policy admits.

A log also keeps what a tier it was decided at asked of it past its spec's base
(``StateSpec.keep_window``: a tier a ``rate_for`` function returned of a longer window or
a larger count than the rule's own, under a per-key limit too): it remembers that window
and count (:data:`KEEP_FORMAT`, after the header when its width byte has the :data:`KEPT`
flag; a :class:`Kept` log here) and keeps at least them until it expires, so a hit at the
rule's own rate between a tier's hits never makes it forget the tier's (design notes 118
and 119).

Guarantee: in every interval of length ``window`` at most ``limit`` cost units are admitted,
and a hit is denied only if admitting it would break that. A timestamp ``t`` counts while
``now - window < t``.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import overload

from freqguard.script.contract import MAX_LOG_LIMIT, widths
from freqguard.script.strategies.base import RuleParams, StateSpec, counted

#: Its number in the specs (its Lua table's ``code``, in ``sliding_log.lua``).
code = 2
#: Its packed state, in the Lua's notation (the header: entry width, base; then the entries).
STATE_FORMAT = ">BI7"
#: Under a per-key limit its state keeps what the rule's own rate needs too: each rule
#: counts the entries of its own window, so the longer window kept costs the limit nothing
#: (script/limits.py ``_spec``).
KEEPS_OWN = True
#: The flag in the header's width byte that says a keep follows the header.
KEPT = 128
#: A keep, after the header when flagged: the window (µs) and the count the log keeps at
#: least, past its spec's (the longest and largest a tier it was decided at asked of it).
KEEP_FORMAT = ">I7I4"
_KEEP = sum(widths(KEEP_FORMAT))
#: The numbers the Lua reads besides its format (``SLIDING_LOG_KEPT``...).
NUMBERS = {"KEPT": KEPT, "KEEP": KEEP_FORMAT, "KEEP_BYTES": _KEEP}

_WIDTH, _BASE = widths(STATE_FORMAT)  # the header's fields
_HEADER = _WIDTH + _BASE


class Kept(array):  # type: ignore[type-arg]
    """A log that remembers a longer window and a larger count than its spec's base: it
    keeps at least ``window`` µs of entries and ``cap`` of them (the Lua's keep)."""

    __slots__ = ("cap", "window")

    window: int
    cap: int


def kept(log: Sequence[int], spec: StateSpec) -> tuple[int, int]:
    """The window and count ``log`` keeps under ``spec``: the spec's, or what it remembers."""
    if isinstance(log, (Kept, PackedLog)):
        return max(spec.window, log.window), max(spec.cap, log.cap)
    return spec.window, spec.cap


def _keeping(out: array[int], log: Sequence[int], spec: StateSpec) -> array[int]:
    """``out`` as stored: remembering what ``log`` did, and the window and count this
    call's spec keeps past its base (a tier's), 0 each where it keeps none."""
    window, cap = spec.keep_window, spec.keep_cap
    if isinstance(log, Kept):
        window, cap = max(window, log.window), max(cap, log.cap)
    return _remembering(out, window, cap)


def _remembering(out: array[int], window: int, cap: int) -> array[int]:
    """``out``, remembering ``window`` and ``cap`` (0 each: nothing, a plain log)."""
    if not (window or cap):
        return out
    made = Kept("q", out)
    made.window, made.cap = window, cap
    return made


class PackedLog(Sequence[int]):
    """A log as the Lua twin packs it: a header (entry width, base: :data:`STATE_FORMAT`),
    then one big-endian offset from base per entry. Read in place: a report bisects it, so
    only a handful of entries are ever decoded."""

    __slots__ = ("_at", "_base", "_len", "_raw", "_width", "cap", "window")

    def __init__(self, raw: bytes) -> None:
        self._raw = raw
        self._width = int.from_bytes(raw[:_WIDTH], "big")
        self._base = int.from_bytes(raw[_WIDTH:_HEADER], "big")
        self._at, self.window, self.cap = _HEADER, 0, 0  # where the entries begin; the keep
        if self._width & KEPT:
            self._width -= KEPT
            self.window = int.from_bytes(raw[_HEADER : _HEADER + 7], "big")
            self.cap = int.from_bytes(raw[_HEADER + 7 : _HEADER + _KEEP], "big")
            self._at += _KEEP
        self._len = (len(raw) - self._at) // self._width

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...

    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        if isinstance(index, slice):  # the report bisects and reads [-1], nothing more
            raise TypeError("a packed log is read by index, not sliced")
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        at = self._at + index * self._width
        return self._base + int.from_bytes(self._raw[at : at + self._width], "big")

    def last(self) -> int:
        """The newest entry (``self[-1]``, read without an index's checks)."""
        return self._base + int.from_bytes(self._raw[-self._width :], "big")

    def after(self, t: int) -> int:
        """How many entries are later than ``t``: ``len - bisect_right(self, t)``, bisected
        on the bytes (entries of one width, big-endian, compare as their numbers do)."""
        offset, width, raw = t - self._base, self._width, self._raw
        if offset < 0:
            return self._len
        if offset >= 1 << (8 * width):
            return 0
        key = offset.to_bytes(width, "big")
        lo, hi = 0, self._len
        while lo < hi:
            mid = (lo + hi) // 2
            at = self._at + mid * width
            if raw[at : at + width] <= key:
                lo = mid + 1
            else:
                hi = mid
        return self._len - lo


def decode(raw: bytes) -> PackedLog:
    """The state as the Lua twin packs it; only ``check`` and ``report`` read it."""
    return PackedLog(raw)


def load(state: array[int] | None, now: int, spec: StateSpec) -> array[int]:
    return array("q") if state is None else state


def check(log: array[int], now: int, need: int, rule: RuleParams) -> int:
    lo = bisect_right(log, now - rule.window)
    count = len(log) - lo
    excess = count + need - rule.capacity
    if excess <= 0:
        return 0
    if excess > count:  # more than the rule could ever admit: report when it is empty
        return max(1, log[-1] + rule.window - now) if count else rule.window
    return log[lo + excess - 1] + rule.window - now


def consume(log: array[int], now: int, cost: int, spec: StateSpec) -> array[int]:
    # a new log: the stored one stays as it is until the call has written every state (the
    # memory store puts them all back if a Ctrl-C cuts it). Time per state never goes back
    # (see twin.run), so every entry is <= now: append
    window, cap = kept(log, spec)
    out = log[bisect_right(log, now - window) :]
    out.extend(array("q", (now,)) * cost)
    if len(out) > cap:
        del out[: len(out) - cap]
    return _keeping(out, log, spec)


def mark(log: array[int], now: int, spec: StateSpec) -> int:
    return now


def refund(log: array[int], now: int, cost: int, spec: StateSpec, mark: int | None) -> array[int]:
    # a refund keeps what the log remembers as it is (it records no rate's)
    window = kept(log, spec)[0]
    if mark is None:  # the newest units inside the window, whoever's they are
        lo = bisect_right(log, now - window)
        out = log[lo : max(lo, len(log) - cost)]
    else:
        hi = bisect_right(log, mark)  # the hit's own units: entries equal to its time
        out = log[: max(bisect_left(log, mark), hi - cost)] + log[hi:]
    return _remembering(out, log.window, log.cap) if isinstance(log, Kept) else out


def report(log: Sequence[int], now: int, rule: RuleParams) -> tuple[int, int]:
    if isinstance(log, PackedLog):  # the Lua's bytes: bisected without decoding each probe
        count = log.after(now - rule.window)
        last = log.last() if count else 0
    else:
        count = len(log) - bisect_right(log, now - rule.window)
        last = log[-1] if count else 0
    if count == 0:
        return rule.capacity, 0
    return max(0, rule.capacity - count), last + rule.window - now


def ttl(log: array[int], now: int, spec: StateSpec) -> int:
    return log[-1] + kept(log, spec)[0] - now


def limited(rule: RuleParams, limit: int, window: int) -> RuleParams | None:
    # one entry per unit: a limit past the log's bound (set while the rule was a bucket)
    # would make one hit's work unbounded
    return counted(rule, limit, window) if limit <= MAX_LOG_LIMIT else None


def horizon(rules: tuple[RuleParams, ...]) -> int:
    return max(r.window for r in rules)
