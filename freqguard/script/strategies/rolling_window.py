"""rolling-window: never more than the limit in any window, for limits of any size, in a
state that does not grow with them.

The window is cut into :data:`SUB_WINDOWS` sub-windows of ``grain = ceil(window /
SUB_WINDOWS)`` µs, aligned to the epoch (``t - t % grain``), each with the count of the units
admitted in it. A sub-window counts, whole, while any of its microseconds is inside the
window (``start + grain - 1 > now - window``): the oldest one, partly inside, counts in full,
the safe side. A hit is admitted when the counts plus its cost stay within the limit.

State: ``(grain, born, head, counts)``: the counts of consecutive sub-windows, oldest first,
the last the one starting at ``head``; from the oldest that is not empty and still counts
(at most ``SUB_WINDOWS + 1``, whatever the limit). ``born`` is when this ring began, which a
refund's mark names: a ring begun again (after a reset) is another, and so is one moved to
another grain. A view (:func:`load`) is a state at ``now``: its counts those of every
sub-window that counts, the last now's.

Guarantee: in every interval of length ``window`` at most ``limit`` cost units are admitted
(a unit counts for as long as its time is inside the window, and up to ``grain - 1`` µs
longer). What it gives up: a hit is denied only if the units admitted in the last ``window +
grain - 1`` µs leave no room for it (it waits at most ``grain - 1`` µs longer than in an
exact log), so with hits of cost 1 it admits, at every moment, at least what an exact log of
that longer window would; on streams that saturate the limit, about ``SUB_WINDOWS /
(SUB_WINDOWS + 1)`` (98.4 %) of what the exact sliding log admits
(``benchmarks/rolling_window.py``).

Another window for the same state (a per-key limit, a tier's rate): each sub-window's units
move to the new grain's sub-window of its last µs (or of ``now``, if that is earlier), never
earlier than they came, so they count at least as long as they should; the ring starts a new
generation, so refunds of the hits before give back nothing there.

A per-key limit of a shorter window than the rule's own decides on a ring of its own
window, and the state keeps what the rule's own window needs too (``KEEPS_OWN``: the spec's
``window`` is the longer of the two): the units that leave the ring while still inside the
own window are its *carry*, a count and the last µs of the newest of their sub-windows
(``last``): it counts while that is inside the spec's window. Once that µs is inside the
ring's window again (the limit cleared, or one of a longer window: the rule's own, or one
between), the carry goes back into the sub-window of that µs (or of ``now``): never
earlier than any of them came, so a stricter limit never makes the rule forget its own
window (design notes 88 and 102). A carry is stored only while it holds units (the width byte's
``CARRIED`` flag, then :data:`CARRY_FORMAT`).

A window longer than the spec's base that a tier the state was decided at kept (one a
``rate_for`` function returned; ``StateSpec.keep_window``, under a per-key limit too) is its
*keep*:
the state remembers it (the width byte's ``KEPT`` flag, then :data:`KEEP_FORMAT`, after
any carry) and carries for at least that window until it expires, so a hit at the rule's
own rate between a tier's hits never makes it forget the tier's (design notes 118, 119).
"""

from __future__ import annotations

from freqguard.script.contract import widths
from freqguard.script.strategies.base import RuleParams, StateSpec, counted, unpacker

#: Its number in the specs (its Lua table's ``code``, in ``rolling_window.lua``).
code = 8
#: Its packed state's header, in the Lua's notation (the counts' width in bytes, grain, born,
#: head); then the counts, oldest first, each as wide as the header says (1 to 4 bytes).
STATE_FORMAT = ">BI7I7I7"
#: How many sub-windows a window is cut into: the state holds at most one more count, and
#: a hit is denied only when the last ``window + grain - 1`` µs leave no room for it.
SUB_WINDOWS = 60
#: The flag in the header's width byte that says a carry follows the header.
CARRIED = 128
#: A carry, after the header when flagged: its units, and the last µs of the newest.
CARRY_FORMAT = ">I7I7"
#: The flag in the header's width byte that says a keep follows the header (and any carry).
KEPT = 64
#: A keep, when flagged: the window (µs) the state carries for at least.
KEEP_FORMAT = ">I7"
#: A count saturates here: more than any rule's limit and cost together, so a count past it
#: decides as it would (a carry gone back into one sub-window may hold more).
MOST = 2**32 - 1
_HEADER = sum(widths(STATE_FORMAT))
_CARRY = sum(widths(CARRY_FORMAT))
_KEEP = sum(widths(KEEP_FORMAT))
#: The numbers the Lua reads besides its formats (``ROLLING_WINDOW_SUB_WINDOWS``...).
NUMBERS = {
    "SUB_WINDOWS": SUB_WINDOWS,
    "MOST": MOST,
    "CARRIED": CARRIED,
    "CARRY": CARRY_FORMAT,
    "CARRY_BYTES": _CARRY,
    "KEPT": KEPT,
    "KEEP": KEEP_FORMAT,
    "KEEP_BYTES": _KEEP,
}
#: A state keeps what its rule's own window needs under a limit of a shorter one.
KEEPS_OWN = True

# grain, born, head, counts, carry, last, keep (0: none)
State = tuple[int, int, int, tuple[int, ...], int, int, int]
_header = unpacker(STATE_FORMAT)
_carry = unpacker(CARRY_FORMAT)


def grain(window: int) -> int:
    """A sub-window's length (µs) in a window of ``window`` µs."""
    return -(-window // SUB_WINDOWS)


def oldest(now: int, window: int, g: int) -> int:
    """The start of the oldest sub-window of ``g`` µs that still counts at ``now``: the first
    whose last µs is inside the window (after ``now - window``)."""
    earliest = now - window - g + 2
    return earliest + -earliest % g


def decode(raw: bytes) -> State:
    """The state as the Lua twin packs it (:data:`STATE_FORMAT`, a carry if flagged, a keep
    if flagged, then the counts)."""
    width, g, born, head = _header(raw)
    at, carry, last, keep = _HEADER, 0, 0, 0
    if width & CARRIED:
        width -= CARRIED
        carry, last = _carry(raw[at : at + _CARRY])
        at += _CARRY
    if width & KEPT:
        width -= KEPT
        keep = int.from_bytes(raw[at : at + _KEEP], "big")
        at += _KEEP
    counts = tuple([int.from_bytes(raw[i : i + width], "big") for i in range(at, len(raw), width)])
    return (g, born, head, counts, carry, last, keep)


def load(state: State | None, now: int, spec: StateSpec) -> State:
    window = spec.rules[0].window  # the ring's: the rate in force (a limit's)
    g = grain(window)
    cur = now - now % g
    size = (cur - oldest(now, window, g)) // g + 1  # the sub-windows that count, to now's
    if state is None:
        return (g, now, cur, (0,) * size, 0, 0, _keeping(0, spec))
    old, born, head, counts, carry, last, keep = state
    own = max(spec.window, keep)  # what it carries for: the spec's, or what it remembers
    if old != g:
        view, left = _regrained(state, now, g, size)
    else:
        after = (cur - head) // g  # the sub-windows since the state's newest: empty
        room = max(0, size - after)  # the view's sub-windows up to the state's newest
        kept = counts[max(0, len(counts) - room) :] if room else ()
        view = (g, born, cur, (0,) * (room - len(kept)) + kept + (0,) * min(after, size))
        start = head - (len(counts) - 1) * g  # the sub-windows before kept left the ring
        left = [(start + i * g + g - 1, n) for i, n in enumerate(counts[: -len(kept) or None])]
    if last + own <= now:  # the carry left the own window
        carry = last = 0
    for end, units in left:  # still inside the own window: carried
        if units and end + own > now:
            carry, last = min(MOST, carry + units), max(last, end)
    if carry and last + window > now:  # inside the ring's window again: back into it
        at = min(last, now)
        out = list(view[3])
        k = (at - at % g - (cur - (size - 1) * g)) // g
        out[k] = min(MOST, out[k] + carry)
        return (*view[:3], tuple(out), 0, 0, _keeping(keep, spec))
    return (*view, carry, last, _keeping(keep, spec))


def check(view: State, now: int, need: int, rule: RuleParams) -> int:
    counts = view[3]
    total = sum(counts)
    excess = total + need - rule.capacity
    if excess <= 0:
        return 0
    if excess > total:  # more than the rule could ever admit: report when it is empty
        return max(1, _emptied(view, rule.window) - now) if total else rule.window
    freed = 0
    for i, count in enumerate(counts):  # the oldest sub-windows leave first
        freed += count
        if freed >= excess:
            return _leaves(view, i, rule.window) - now
    raise AssertionError("unreachable: the counts add up to more than the excess")


def consume(view: State, now: int, cost: int, spec: StateSpec) -> State:
    g, born, cur, counts, carry, last, keep = view
    return _trimmed(g, born, cur, (*counts[:-1], counts[-1] + cost), carry, last, keep)


def mark(view: State, now: int, spec: StateSpec) -> tuple[int, int]:
    # the ring the hit went into, and its sub-window: what a refund gives back to
    return (view[1], view[2])


def refund(
    view: State, now: int, cost: int, spec: StateSpec, mark: tuple[int, ...] | None
) -> State:
    g, born, cur, counts, carry, last, keep = view
    out = list(counts)
    if mark is None:  # the newest units inside the window, whoever's they are
        for i in range(len(out) - 1, -1, -1):
            took = min(cost, out[i])
            out[i], cost = out[i] - took, cost - took
    elif mark[0] == born and (cur - mark[1]) % g == 0:  # the hit's sub-window, while it
        # counts; else another ring (one begun after a reset on a pinned clock may be born
        # at the µs a ring moved to another grain was: its sub-windows start elsewhere)
        i = len(out) - 1 - (cur - mark[1]) // g
        if 0 <= i < len(out):
            out[i] = max(0, out[i] - cost)
    return _trimmed(g, born, cur, tuple(out), carry, last, keep)


def report(view: State, now: int, rule: RuleParams) -> tuple[int, int]:
    total = sum(view[3])
    if total == 0:
        return rule.capacity, 0
    return max(0, rule.capacity - total), _emptied(view, rule.window) - now


def newest(state: State) -> int:
    """The latest time the state names: its ring's birth, which a move to another grain may
    set after its call's time (a reset ends after it: a ring begun then is another)."""
    return state[1]


def ttl(state: State, now: int, spec: StateSpec) -> int:
    # when the newest sub-window leaves the own window (the carry leaves before it)
    return state[2] + state[0] - 1 + max(spec.window, state[6]) - now


def limited(rule: RuleParams, limit: int, window: int) -> RuleParams | None:
    return counted(rule, limit, window)


def horizon(rules: tuple[RuleParams, ...]) -> int:
    return rules[0].window + grain(rules[0].window)


def _leaves(view: State, i: int, window: int) -> int:
    """When the view's ``i``-th sub-window stops counting: its last µs leaves the window."""
    g, _, cur, counts = view[:4]
    return cur - (len(counts) - 1 - i) * g + g - 1 + window


def _emptied(view: State, window: int) -> int:
    """When the newest sub-window that is not empty stops counting (some is)."""
    counts = view[3]
    newest = len(counts) - 1
    while not counts[newest]:
        newest -= 1
    return _leaves(view, newest, window)


def _keeping(keep: int, spec: StateSpec) -> int:
    """The keep a state that remembered ``keep`` stores: that, or the window this call's
    spec keeps past its base (a tier's) if longer; 0: none."""
    return max(keep, spec.keep_window)


def _trimmed(
    g: int, born: int, head: int, counts: tuple[int, ...], carry: int, last: int, keep: int
) -> State:
    """A state as stored: from the oldest sub-window that is not empty."""
    for i, count in enumerate(counts):
        if count:
            return (g, born, head, counts[i:], carry, last, keep)
    return (g, born, head, (), carry, last, keep)


def _regrained(
    state: State, now: int, g: int, size: int
) -> tuple[tuple[int, int, int, tuple[int, ...]], list[tuple[int, int]]]:
    """A ring kept at another grain, as a view at ``g``: each sub-window's units in the
    sub-window of its last µs (or of ``now``, if earlier), a new generation; and the
    sub-windows too old for it (each its last µs and its units)."""
    old, born, head, counts = state[:4]
    cur = now - now % g
    first = cur - (size - 1) * g
    out = [0] * size
    start = head - (len(counts) - 1) * old
    left = []
    for i, count in enumerate(counts):
        last = min(start + i * old + old - 1, now)
        at = last - last % g
        if at >= first:
            out[(at - first) // g] += count
        else:
            left.append((last, count))
    return (g, max(now, born + 1), cur, tuple([min(MOST, c) for c in out])), left
