"""A Ctrl-C at every point of a ``MemoryBackend`` call where the interpreter runs a pending
signal's handler, in turn: the call's states are all written or none (design note 95), as a
Redis call's are (its script runs whole or not at all). Before, the memory twin wrote state
by state, and a sliding log in place: a hit interrupted at 21 of 126 points counted in some
rules and not in others, and a program that goes on after a ``KeyboardInterrupt`` (a REPL,
a notebook, a worker loop) then admitted past those rules' limits."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from tests.conformance.test_lease_interrupts import _main_thread_only  # noqa: F401 (autouse)
from tests.conformance.test_lease_sweeps import _ctrl_c_at
from tests.conftest import START

#: one state per strategy that counts, all at the same limit: after any number of whole
#: calls, each rule has the same units left
ALIKE = Policy(
    "p",
    Rule("1000/minute", by="u", strategy="fixed-window", name="fw"),
    Rule("1000/minute", by="u", strategy="gcra", name="gcra"),
    Rule("1000/minute", by="u", strategy="token-bucket", name="tb"),
    Rule("1000/minute", by="u", strategy="rolling-window", name="rw"),
    Rule("1000/minute", by="u", name="log"),
    Rule("1000/minute", by=("u", "c"), name="content"),
)


def _left(guard: Guard) -> list[int]:
    return [rule.remaining for rule in guard.peek("p", u="x", c="m").rules]


def _sweep(guard: Guard, run: Callable[[], object], rules: slice = slice(None)) -> None:
    """``run`` with a Ctrl-C at each of its points in turn: after each, every rule (of
    ``rules``) has the same units left (the call was made whole, or not at all)."""
    total = _ctrl_c_at(None, run)
    assert total > 0
    for event in range(1, total + 1):
        _ctrl_c_at(event, run)
        left = _left(guard)[rules]
        assert len(set(left)) == 1, f"a Ctrl-C at point {event} of {total} left {left}"


@pytest.fixture
def guard() -> Guard:
    clock = ManualClock(START)
    made = Guard(MemoryBackend(clock=clock), [ALIKE], clock=clock)
    assert made.hit("p", u="x", c="m").allowed  # every state stored
    return made


def test_a_ctrl_c_anywhere_in_a_memory_hit_writes_all_its_states_or_none(guard: Guard) -> None:
    _sweep(guard, lambda: guard.hit("p", u="x", c="m"))


def test_a_ctrl_c_anywhere_in_a_memory_refund_gives_back_in_all_its_states_or_none(
    guard: Guard,
) -> None:
    def exactly() -> None:  # a hit, and the refund of its receipt: exact in every rule
        guard.refund(guard.hit("p", u="x", c="m"))

    def newest() -> None:
        guard.hit("p", u="x", c="m")
        guard.refund("p", 1, u="x", c="m")

    _sweep(guard, exactly)
    _sweep(guard, newest)


def test_a_ctrl_c_anywhere_in_a_memory_reset_forgets_all_its_states_or_none(
    guard: Guard,
) -> None:
    def again() -> None:  # the rules keyed by u alone
        guard.hit("p", u="x", c="m")
        guard.reset("p", u="x")

    _sweep(guard, again, slice(-1))


def test_a_ctrl_c_anywhere_in_a_memory_set_limit_keeps_the_limit_whole_or_not_at_all() -> None:
    """A per-key limit of 10 s set under a Ctrl-C at each point in turn: once its time
    and the stale grace have passed, a sweep finds nothing held (a limit kept without its
    expiry would be held for ever)."""
    clock = ManualClock(START)
    backend = MemoryBackend(clock=clock)
    guard = Guard(backend, [ALIKE], clock=clock)

    def limit() -> None:
        guard.set_limit("p", "fw", "5/minute", ttl=10, u="x")

    total = _ctrl_c_at(None, limit)
    for event in range(1, total + 1):
        _ctrl_c_at(event, limit)
        clock.advance(700)  # past the pinned grace (PINNED_GRACE_MS): as Redis expires it
        backend.sweep()
        assert backend.limits_held == 0, f"a Ctrl-C at point {event} of {total}"
