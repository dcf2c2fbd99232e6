"""A Ctrl-C at every point of a sync lease's take, block and release where the interpreter
runs a pending signal's handler, in turn (design note 93): no lease left held, Python's own
handler back. Python's profile hook raises the SIGINT at each such point."""

from __future__ import annotations

import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from freqguard import Decision, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard._sync.leases import LeaseBlock
from freqguard.integrations._held import leasing
from tests.conformance.test_lease_interrupts import (
    _guard,
    _main_thread_only,  # noqa: F401 (autouse)
)
from tests.conftest import START

#: LLM's lease, its rate high enough for a sweep's hits in one minute of a manual clock
#: (moved on, it would free a lease left held)
SWEPT = Policy("llm", Rule("2 concurrent", by="user", lease=60), Rule("10000/minute", by="user"))


@pytest.fixture(params=["redis", "memory"])
def swept(request: pytest.FixtureRequest) -> Iterator[Guard]:
    """A guard of :data:`SWEPT` on Redis, or on a ``MemoryBackend``: a Ctrl-C at event 90
    of 291 of a lease block on memory left the lease held, the store's write made and the
    decision never returned, while memory's calls were not held (design note 95)."""
    if request.param == "redis":
        yield from _guard(request.getfixturevalue("redis_server"), SWEPT)
        return
    clock = ManualClock(START)
    made = Guard(MemoryBackend(clock=clock), [SWEPT], clock=clock)
    with made.lease("llm", user="u"):
        pass
    yield made  # noqa: PT022 (the redis branch above has a teardown)


#: the profile events where the interpreter may run a pending signal's handler (its eval
#: breaker's checks): as a function begins, and as a call into C returns (not at a Python
#: function's return, where the hook's exception would land where no signal's does)
_CHECKED = frozenset({"call", "c_return"})
_OWN = frozenset({"call", "return"})  # a frame's own events (its calls into C are inside it)
#: the one point left open: a Ctrl-C the interpreter runs as the block's ``__exit__`` begins,
#: before its first line (every function's first instruction checks; the ``with`` statement
#: calls ``__exit__`` once, so it ends the block with the lease held until it lapses)
_EXIT_BEGINS = (LeaseBlock.__exit__.__code__, "call")
#: no point inside the logging module: Python's logging is not safe under a signal (a Ctrl-C
#: between a handler's acquire and its try leaves its lock held, and every later log line of
#: the process waits for ever: a sweep through the memory backend's "full" warning hung the
#: quick suite's worker), in any program, whatever freqguard does around it
_LOGGING = logging.__file__


def _ctrl_c_at(
    event: int | None,
    run: Callable[[], object],
    within: Any = None,
    swallow: bool = True,
    signum: int = signal.SIGINT,
) -> int:
    """``run()`` with a SIGINT raised at its ``event``-th profile event of :data:`_CHECKED`
    (None: none), as a Ctrl-C landing there; how many events it had (``within``: only
    those inside a call of that function, not its own call and return, where a Ctrl-C is
    its caller's; ``signum``: another signal than SIGINT, whose handler raises
    ``SystemExit``). A ``KeyboardInterrupt`` or ``SystemExit`` it raises, at once or from a
    signal still pending as it ends, is swallowed (unless not ``swallow``: raised on)."""
    seen, inside = [0], [within is None]

    def hook(frame: Any, kind: str, arg: object) -> None:
        if within is not None and frame.f_code is within.__code__ and kind in _OWN:
            inside[0] = kind == "call"  # its own call and return: its caller's
        elif (
            inside[0]
            and kind in _CHECKED
            and (frame.f_code, kind) != _EXIT_BEGINS
            and frame.f_code.co_filename != _LOGGING
        ):
            seen[0] += 1
            if seen[0] == event:
                sys.setprofile(None)
                signal.raise_signal(signum)

    collecting, unraisable = gc.isenabled(), sys.unraisablehook

    def ignored(raised: Any) -> None:
        """A SIGINT run in a finalizer (a generator closed as it is dropped, another test's
        client collected) is ignored by Python, as a real Ctrl-C there is: the call goes on
        whole. pytest fails a test on any other unraisable exception."""
        if not isinstance(raised.exc_value, (KeyboardInterrupt, SystemExit)):
            unraisable(raised)

    gc.disable()  # no other test's finalizers inside the run
    sys.unraisablehook = ignored
    quiet = contextlib.suppress(KeyboardInterrupt, SystemExit)
    with quiet if swallow else contextlib.nullcontext():
        try:
            sys.setprofile(hook)
            run()
        finally:
            sys.setprofile(None)
            sys.unraisablehook = unraisable
            if collecting:
                gc.enable()
        _flush_pending()
    return seen[0]


def _flush_pending() -> None:
    """A call: Python runs a pending signal's handler as one returns."""


def _sweep(
    guard: Guard, run: Callable[[], None], within: Any = None, signum: int = signal.SIGINT
) -> None:
    """``run`` with a Ctrl-C (or ``signum``) at each of its events in turn (``within``: of
    that function's calls): afterwards, no lease held, the handlers back."""
    total = _ctrl_c_at(None, run, within)
    assert total > 0
    handler = signal.getsignal(signum)
    for event in range(1, total + 1):
        _ctrl_c_at(event, run, within, signum=signum)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, event
        assert signal.getsignal(signum) is handler, event
        held = 2 - guard.peek("llm", user="u").rules[0].remaining
        assert held == 0, f"a Ctrl-C at event {event} of {total} left {held} lease(s) held"


def test_a_ctrl_c_anywhere_in_a_lease_block_never_leaves_the_lease_held(swept: Guard) -> None:
    """A Ctrl-C at any point of ``with guard.lease(...)``: as the take is made, between
    its answer and the block (the decision built, the block entered), in the block, as
    the release is made and after it: the lease is never left held (the block ends with
    a ``KeyboardInterrupt``, or completes), but for :data:`_EXIT_BEGINS`. Python's profile
    hook places the SIGINT at each point of :data:`_CHECKED` in turn. Before the fix, a
    Ctrl-C as the decision was built, or in ``contextlib``'s frame between the generator's
    yield and the block, left it held."""

    def block() -> None:
        with swept.lease("llm", user="u") as decision:
            assert decision.allowed

    _sweep(swept, block)


@pytest.mark.parametrize("inside", ["take_lease", "release", "refund"])
def test_a_ctrl_c_anywhere_inside_take_lease_release_or_refund_never_leaves_the_lease_held(
    swept: Guard, inside: str
) -> None:
    """The same inside ``take_lease``, ``release`` and ``refund(decision)``, a lease taken
    and given back in turn: a Ctrl-C in ``take_lease`` after its store answered gives the
    lease back before it is raised; in ``release`` or ``refund`` after its first
    instruction, the give-back still goes (review: a refund's went nowhere at 18 of 225
    points). A Ctrl-C as one of them begins, or once ``take_lease`` has returned, is its
    caller's, whose ``try`` has not begun or whose ``finally`` is cut: ``with
    guard.lease`` leaves only :data:`_EXIT_BEGINS`."""
    taken: list[Decision] = []

    def pair() -> None:
        taken.clear()
        taken.append(swept.take_lease("llm", user="u"))
        assert taken[0].allowed
        if inside == "refund":
            swept.refund(taken[0])
        else:
            swept.release(taken[0])

    _sweep(swept, pair, getattr(Guard, inside))


def test_a_ctrl_c_anywhere_in_an_integrations_lease_leaves_it_in_the_requests_hands(
    swept: Guard,
) -> None:
    """The integrations take a request's lease into the list its answer gives back
    (``_decide.leasing``): no point where the interpreter runs a signal's handler lies
    between ``take_lease``'s answer and the list (the last stop's note feared one)."""
    held: list[Decision] = []

    def request() -> None:
        leasing(swept, held)("llm", 1, user="u")

    total = _ctrl_c_at(None, request)
    for event in range(1, total + 2):
        _ctrl_c_at(event if event <= total else None, request)
        while held:
            swept.release(held.pop())
        left = 2 - swept.peek("llm", user="u").rules[0].remaining
        assert left == 0, f"a Ctrl-C at event {event} of {total} left {left} lease(s) held"


def _exit(signum: int, frame: object) -> None:
    sys.exit(0)  # a worker's SIGTERM handler: its finally and with blocks run


def test_a_sigterm_handler_that_exits_anywhere_in_a_lease_block_never_leaves_it_held(
    swept: Guard,
) -> None:
    """A worker stopped by a deploy: SIGTERM, whose handler (the program's) raises
    ``SystemExit``, at any point of ``with guard.lease(...)``. Only Python's own Ctrl-C
    was held back while a lease's call was out: the exit landed in the call, and a take
    the store ran was known to nobody (adversarial review). Such a handler is held back
    too, run once the call is answered and what it took given back."""

    def block() -> None:
        with swept.lease("llm", user="u") as decision:
            assert decision.allowed

    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        _sweep(swept, block, signum=signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)
