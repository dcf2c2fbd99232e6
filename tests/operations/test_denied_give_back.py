"""A hit a later part denied, whose give-back of the earlier parts then fails: the store's
denial is the answer (``ops._denial``: its rules, its wait), whatever ``on_error`` says, and
kept to that hit (a first fix marked the failure ``denied`` and answered it failing closed:
a shared error denied hits never tried, the store's wait was lost).

On a store of one node (no ``node_of``) the first failure of a multi-part ``hit_many`` is
everyone's (``ops.many_op``): the contexts after it are not tried and get the same error
object. On an injected clock, a real MemoryBackend behind a switch."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    CapExceeded,
    Clock,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.script.calls import Reply, ScriptCall
from tests.operations.failure_rig import AsyncSide
from tests.operations.test_failure_nodes import Rig, _hung

TWO = Policy("two", Rule("3/day", by="r", name="per-r"), Rule("100/day", by="c", name="per-c"))


class OneStore(AsyncSide):
    """A MemoryBackend of one node that goes down once a call it runs denies (after it ran
    the batch): a later part's denial, then the give-back of the earlier parts fails."""

    def __init__(self, clock: ManualClock) -> None:
        self.inner = MemoryBackend(clock)
        self.clock: Clock = clock
        self.down = False
        self.down_on_denial = False
        self.calls = 0

    def execute(self, call: ScriptCall) -> Reply:
        return self.execute_many([call])[0]

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        self.calls += 1
        if self.down:
            raise _hung("store")
        replies = self.inner.execute_many(calls)
        if self.down_on_denial and not all(r.allowed for r in replies):
            self.down = True
        return replies


def _run(guard: Guard | AsyncGuard, name: str, *args: Any, **kwargs: Any) -> Any:
    method = getattr(guard, name)
    if isinstance(guard, AsyncGuard):
        return asyncio.run(method(*args, **kwargs))
    return method(*args, **kwargs)


@pytest.mark.parametrize("on_error", ["allow", "fallback"])
def test_a_denied_hit_whose_give_back_fails_denies_only_itself_in_a_batch(
    asynchronous: bool, on_error: str
) -> None:
    """Context 0 is admitted by per-r, denied by per-c, and the store fails as per-r's unit
    is given back: that hit is denied (``denied``). The contexts after it were never tried
    (one store: ``many_op`` hands them the same error object), so ``on_error`` is theirs to
    answer: fail-open under "allow", a rerun on the fallback. The one error, marked
    ``denied`` by the first hit's give-back, denies them all (fail-closed): hits no store
    ever saw, denied though the policy says to admit them on an outage."""
    clock = ManualClock()
    store = OneStore(clock)
    fallback = MemoryBackend(clock)
    how: Any = fallback if on_error == "fallback" else on_error
    make = AsyncGuard if asynchronous else Guard
    guard = make(store, [TWO], clock, on_error=how, breaker=None)
    for i in range(100):  # per-c's day for c=B1, spent by others
        assert _run(guard, "hit", "two", r=f"A{i}", c="B1").allowed
    store.down_on_denial = True
    batch = [{"r": "C1", "c": "B1"}, {"r": "C2", "c": "X"}, {"r": "C3", "c": "X"}]
    got = _run(guard, "hit_many", "two", batch)
    assert not got[0].allowed  # the store denied it: denied (the fix)
    expected = "fallback" if on_error == "fallback" else "fail-open"
    assert [d.source for d in got[1:]] == [expected, expected]  # got: fail-closed, twice
    assert all(d.allowed for d in got[1:])


def _spent(rig: Rig) -> None:
    """per-c's day for c=B1 spent by others (on node A); C goes down once a call denies."""
    for i in range(100):
        assert rig.hit("two", r=f"A{i}", c="B1").allowed
    rig.store.down_on_denial = {"C"}


@pytest.mark.parametrize("on_error", ["allow", "fallback"])
def test_an_acquire_a_later_part_denied_for_the_day_gives_up_at_once_though_the_give_back_fails(
    asynchronous: bool, on_error: str
) -> None:
    """``acquire(timeout=60)``: per-r on C admits, per-c on B denies for the rest of the day
    (retry_after 86400 s), and C fails as per-r's unit is given back. The store said the
    next turn is a day away, so acquire must give up at once (``CapExceeded``). The denial
    is answered by ``fail_answer("fail-closed")``, whose retry_after is the breaker's
    cool-down (5 s), not the store's: acquire sleeps 5 s and tries again; C is down, and
    on_error admits the hit (fail-open; a fallback's fresh state). The store's own answer,
    known as the hit was denied (the denying part's reply), is dropped."""
    rig = Rig(on_error, asynchronous)
    _spent(rig)
    rig.store.down_on_denial = set()  # a peek's denial takes no node down
    assert rig.peek("two", r="C9", c="B1").retry_after == pytest.approx(86400)
    rig.store.down_on_denial = {"C"}
    start = rig.clock.now()
    with pytest.raises(CapExceeded):  # got: admitted after a 5 s sleep
        rig.acquire("two", timeout=60, r="C1", c="B1")
    assert rig.clock.now() == start  # gave up at once, as when the give-back succeeds


def test_a_denied_hit_whose_give_back_fails_says_the_stores_denial(asynchronous: bool) -> None:
    """The hit above, once: denied, as the fix says, but with the fail-closed answer's wait
    (the breaker's cool-down, 5 s) and every enforcing rule named, per-r too, which
    admitted it; the store said per-c denied it for a day (its reply is in hand)."""
    rig = Rig("allow", asynchronous)
    _spent(rig)
    got = rig.hit("two", r="C1", c="B1")
    assert not got.allowed
    assert [rule.id for rule in got.denied_by] == ["per-c"]  # got: ['per-r', 'per-c']
    assert got.retry_after == pytest.approx(86400)  # got: 5.0


def test_a_hit_the_fallback_denied_whose_give_back_fails_there_is_answered_as_a_denial(
    asynchronous: bool,
) -> None:
    """The store is down; the hit runs again on the fallback (a store of its own, a second
    Redis), where per-r admits, per-c denies, and the fallback fails as per-r's unit goes
    back. ``denied`` is set (decide_op), yet ``resilient`` runs the fallback inside its
    ``except`` and never looks at it: the BackendUnavailable, ``denied`` True, is raised to
    a caller whose ``on_error`` is a fallback, not ``"raise"`` (errors.py: a denied error
    is answered as a denial whatever ``on_error`` says but ``"raise"``)."""
    clock = ManualClock()
    store = OneStore(clock)
    fallback = OneStore(clock)
    make = AsyncGuard if asynchronous else Guard
    guard = make(store, [TWO], clock, on_error=fallback, breaker=None)
    store.down = True
    for i in range(100):  # per-c's day for c=B1, spent on the fallback
        assert _run(guard, "hit", "two", r=f"A{i}", c="B1").source == "fallback"
    fallback.down_on_denial = True
    got = _run(guard, "hit", "two", r="C1", c="B1")  # got: BackendUnavailable, denied
    assert not got.allowed


def test_a_denied_hit_whose_give_back_fails_is_the_stores_denial_under_raise(
    asynchronous: bool,
) -> None:
    """With ``on_error="raise"`` the caller got the give-back's BackendUnavailable, marked
    ``denied`` (its only way to tell the store's denial from an outage, and lost across a
    pickle). The denial is known: it is the answer, a decision, whatever ``on_error``
    says; the failed give-back is the breaker's and the observers' to hear of."""
    rig = Rig("raise", asynchronous)
    _spent(rig)
    got = rig.hit("two", r="C1", c="B1")
    assert (got.allowed, got.source) == (False, "backend")
    assert rig.heard.errors["BackendUnavailable"] == 1
