"""The policy script: the Python twin of ``freqguard/script/lua/twin.lua`` (and its library).

One call decides every rule of a policy that lives on one part. It loads each key's state,
checks every rule, and writes only when no non-shadow rule denies (all-or-nothing). Both twins
answer with a :class:`Reply`: whether the part allowed the hit, each rule's wait (µs until it
would admit the hit, in the part's rule order; 0 when it does), the time it was judged at, and
the states it left behind, which the Reply reports on (remaining, reset_after µs) when asked.
Modes: HIT (consume if allowed; cost 0 consumes nothing), CHECK (never write), REFUND (give
``cost`` back: exactly what one hit took when its marks are given, else the newest units;
then report), RESET (delete, then report).

The Lua twin returns the decision and the states it leaves behind, and :func:`unpack` makes a
Reply that reports on them here, and only when asked, so neither the server (shared by every
client) nor the client spends time on numbers most callers never read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from freqguard.script.calls import Part, Reply, report_of
from freqguard.script.contract import (
    HIT,
    KEYING_WINDOW,
    LIMIT,
    REFUND,
    RESET,
)
from freqguard.script.limits import KeyLimit, apply, limited, parse_change
from freqguard.script.strategies import StateSpec
from freqguard.script.strategies.base import Mark

__all__ = ["Entry", "StateStore", "run"]


# (expire_at µs, latest µs, state, ...): what a StateStore keeps (it may keep more behind)
Entry = tuple[Any, ...]


class StateStore(Protocol):
    """Where :func:`run` keeps states: an :data:`Entry` by key. A key is
    always given with its state's horizon (``StateSpec.horizon``), which a store may file it
    under (the memory backend does)."""

    def get(self, key: str, horizon: int, now: int) -> Entry | None: ...

    def put(self, key: str, horizon: int, state: Any, expire_at: int, latest: int) -> None: ...

    def delete(self, key: str, horizon: int) -> None: ...

    def put_back(
        self, keys: Sequence[str], specs: Sequence[StateSpec], found: Sequence[Entry | None]
    ) -> None:
        """``keys`` as ``get`` found them, each under its state's horizon."""


# -- the script's steps (freqguard/script/lua/twin.lua has the same, in the same order) -----


def judged_at(found: Sequence[Entry | None], now: int) -> int:
    """The time the call is judged at: no earlier than any of its states was written at."""
    for entry in found:
        if entry is not None and entry[1] > now:
            now = entry[1]
    return now


def change_limits(
    limits: Sequence[KeyLimit], change: str | None, mode: int, now: int, pinned: bool, part: Part
) -> tuple[KeyLimit, ...]:
    """The record's per-key limits after the call: as stored, but for a LIMIT call with a
    change (:func:`~freqguard.script.limits.parse_change`), which sets one rule's limit
    (``contract.LIMIT_CHANGE``, its expiry ``ttl`` after ``now``, with a keying entry of
    the rule's keying: ``contract.KEYING_WINDOW``) or clears it (its tag alone); either
    drops that limit's keying entries. A change also drops the limits of tags it does not
    keep (rules no longer in the policy), those of the part's rules that their strategy
    cannot read any more, and, on the server's time, those expired (a pinned time that
    jumps ahead must not drop what it would find coming back); a keying entry goes with its
    limit, never left alone."""
    if mode != LIMIT or not change:
        return tuple(limits)
    keep, words = parse_change(change)
    own = {rule.tag: (spec.twin, rule) for spec in part.specs for rule in spec.rules}
    alive = [limit for limit in limits if pinned or limit.lives(now)]
    tags = {  # the limits kept; a keying entry goes with its limit
        limit.tag
        for limit in alive
        if limit.window != KEYING_WINDOW
        and limit.tag != words[0]
        and limit.tag in keep
        and (limit.tag not in own or limited(*own[limit.tag], limit) is not None)
    }
    kept = [e for e in alive if (e.limit if e.window == KEYING_WINDOW else e.tag) in tags]
    if len(words) > 1:
        tag, ttl, exempt, *numbers, keying = words  # contract.LIMIT_CHANGE
        expiry = now + ttl if ttl else 0
        kept.append(KeyLimit(tag, expiry, exempt == 1, *numbers))
        kept.append(KeyLimit(keying, expiry, False, tag, KEYING_WINDOW, 0, 0))  # its keying
    return tuple(kept)


def reset_states(
    store: StateStore,
    keys: Sequence[str],
    specs: Sequence[StateSpec],
    found: Sequence[Entry | None],
    now: int,
    pinned: bool,
) -> int:
    """RESET: every stored state is deleted. On a pinned time, where the next call may come
    at the very microsecond of a hit before the reset, the reset ends its microsecond: in
    place of each state an expired tombstone (no state), written 1 µs after the latest time of
    the call, or of a state (``newest``: a count, ring or bucket born after its call's time)
    (kept for the stale grace, as any expired state), so that what comes after is
    judged at least that late and no receipt from before the reset can match it. Returns
    the time the call is judged at. ``found``: what the call read (as the Lua's ``got``)."""
    if not pinned:
        for key, spec in zip(keys, specs):  # noqa: B905 (the part built both; hot path)
            store.delete(key, spec.horizon)
        return now
    at = judged_at(found, now)
    for spec, entry in zip(specs, found):  # noqa: B905 (the part built both)
        newest = getattr(spec.twin, "newest", None)  # a time a state names past its call's
        if newest is not None and entry is not None and entry[2] is not None:
            at = max(at, newest(entry[2]))
    at += 1
    for key, spec, entry in zip(keys, specs, found):  # noqa: B905 (the part built both)
        if entry is not None:
            store.put(key, spec.horizon, None, at, at)
    return at


def apply_limits(part: Part, limits: Sequence[KeyLimit], now: int) -> Part:
    """The part as decided: each rule a limit living at ``now`` names, at its numbers."""
    return apply(part, limits, now)


def load_states(specs: Sequence[StateSpec], found: Sequence[Entry | None], now: int) -> list[Any]:
    """Each state at ``now``: a state past its expiry is absent (its latest time is not later
    than ``now`` either)."""
    views: list[Any] = []
    for entry, spec in zip(found, specs):  # noqa: B905
        state = entry[2] if entry is not None and entry[0] > now else None
        views.append(spec.twin.load(state, now, spec))
    return views


def refund_states(
    store: StateStore,
    keys: Sequence[str],
    specs: Sequence[StateSpec],
    found: Sequence[Entry | None],
    views: list[Any],
    now: int,
    cost: int,
    marks: Sequence[Mark | None] | None,
) -> None:
    """REFUND: each stored state gives back ``cost`` units: exactly what the hit of its mark
    took, none where that hit took nothing, the newest units when no marks are given."""
    for i, (entry, spec) in enumerate(zip(found, specs)):  # noqa: B905
        mark = None if marks is None else marks[i]
        if entry is None or entry[0] <= now or (marks is not None and mark is None):
            continue  # nothing stored, or nothing of this hit: nothing to give back
        twin = spec.twin
        state = twin.refund(views[i], now, cost, spec, mark)
        # a refund only shrinks what can matter: the expiry stays, the time moves on
        store.put(keys[i], spec.horizon, state, entry[0], now)
        views[i] = twin.load(state, now, spec)


def check_rules(
    specs: Sequence[StateSpec], views: Sequence[Any], now: int, need: int
) -> tuple[list[int], bool]:
    """Every rule's wait (µs until it admits a hit of ``need``; 0: it does), in spec order,
    and whether no non-shadow rule denies."""
    waits: list[int] = []
    allowed = True
    for view, spec in zip(views, specs):  # noqa: B905
        check = spec.twin.check
        for rule in spec.rules:
            reserve = rule.reserve
            wait = check(view, now, need + reserve, rule) if reserve >= 0 else 1  # SKIP
            waits.append(wait)
            if wait and not rule.shadow:
                allowed = False
    return waits, allowed


def consume_states(
    store: StateStore,
    keys: Sequence[str],
    specs: Sequence[StateSpec],
    views: list[Any],
    waits: Sequence[int],
    now: int,
    cost: int,
) -> None:
    """HIT, allowed: every state consumes, but a shadow rule's own state only if it admits."""
    first = 0
    for i, spec in enumerate(specs):
        if not spec.shadow or waits[first] == 0:
            twin = spec.twin
            state = twin.consume(views[i], now, cost, spec)
            if state is not None:  # None: the state counts nothing (quiet hours)
                store.put(keys[i], spec.horizon, state, now + twin.ttl(state, now, spec), now)
                views[i] = twin.load(state, now, spec)
        first += len(spec.rules)


def run(
    store: StateStore,
    keys: Sequence[str],
    part: Part,
    now: int,
    cost: int,
    mode: int,
    marks: Sequence[Mark | None] | None = None,
    pinned: bool = False,
    limits: tuple[KeyLimit, ...] = (),
    change: str | None = None,
) -> Reply:
    """Execute the policy script against ``store``; see the module docstring. ``limits``
    are the record's per-key limits; the Reply carries them as the call leaves them. Time
    per state never goes back: a call is judged at the latest of its own time and the
    states' (each keeps the latest it was written at), so a clock that steps back can
    neither count a window a later call trimmed nor start a fixed window afresh."""
    specs = part.specs
    # put back if a Ctrl-C cuts the call: whole or not at all, as the Lua's script
    found = [store.get(key, spec.horizon, now) for key, spec in zip(keys, specs)]  # noqa: B905
    try:
        if mode != RESET:
            now = judged_at(found, now)
        if limits or mode == LIMIT:  # the common hit: a record without limits, none changed
            limits = change_limits(limits, change, mode, now, pinned, part)
        if mode == RESET:
            now = reset_states(store, keys, specs, found, now, pinned)
        part = apply_limits(part, limits, now) if limits else part
        views = load_states(part.specs, [None] * len(specs) if mode == RESET else found, now)
        if mode == REFUND:
            refund_states(store, keys, part.specs, found, views, now, cost, marks)
        waits, allowed = check_rules(part.specs, views, now, cost if cost > 0 else 1)
        if mode == HIT and allowed and cost > 0:
            consume_states(store, keys, part.specs, views, waits, now, cost)
        report = report_of(part, views, now)
    except BaseException:
        _put_back(store, keys, specs, found)
        raise
    kept = None if allowed or mode in (REFUND, RESET) else _kept(found, now)
    return Reply(part, allowed, waits, now, views, b"", report, limits, kept)


def _kept(found: Sequence[Entry | None], now: int) -> list[Any]:
    """The states a denial leaves (it writes none), as stored (past their expiry: none)."""
    return [entry[2] if entry is not None and entry[0] > now else None for entry in found]


def _put_back(
    store: StateStore,
    keys: Sequence[str],
    specs: Sequence[StateSpec],
    found: Sequence[Entry | None],
) -> None:
    whole(lambda: store.put_back(keys, specs, found))


def whole(undo: Callable[[], object]) -> None:
    """``undo()`` (idempotent), made again whole when a second Ctrl-C (or another signal's
    exception) cuts it, a few times at most; that one is dropped for the first, which the
    caller raises on. One that fails every time (a fault, not a signal) is logged, with its
    error, on ``freqguard``."""
    for _ in range(8):
        try:
            undo()
            return
        except BaseException as exc:  # made again, whole
            failed = exc
    logging.getLogger("freqguard").error(
        "freqguard: a cut memory call could not be put back (8 tries): %r", failed
    )
