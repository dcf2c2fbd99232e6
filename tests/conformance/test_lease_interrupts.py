"""A Ctrl-C while a sync guard's lease is out on Redis: the take or release is let finish
and what it took given back, then the interrupt raised (design note 92); a second Ctrl-C
is raised at once; a SIGINT handler that is not Python's own is left alone.

A real server is stopped (SIGSTOP) with the call in its socket; a thread sends this process
a SIGINT, waits until the main thread has taken it (``/proc/self/status``), then resumes
the server. The thread always ends with the test, and the server is always resumed."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from freqguard import Decision, Guard, ManualClock, Policy, Rule
from freqguard._sync._io import holding
from freqguard._sync.leases import LeaseBlock
from freqguard.backends.redis import RedisBackend
from tests import servers
from tests.conformance.test_lease_exits import LLM
from tests.conftest import START, flush
from tests.faults import halted, input_waiting, pause, resume
from tests.servers import RedisServer


@pytest.fixture(autouse=True)
def _main_thread_only() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("a signal's handler runs in the main thread only")


@pytest.fixture
def guard(redis_server: RedisServer) -> Iterator[Guard]:
    yield from _guard(redis_server, LLM)


#: LLM's lease, its rate high enough for a sweep's hits in one minute of a manual clock
#: (moved on, it would free a lease left held)
SWEPT = Policy("llm", Rule("2 concurrent", by="user", lease=60), Rule("10000/minute", by="user"))


@pytest.fixture
def swept(redis_server: RedisServer) -> Iterator[Guard]:
    yield from _guard(redis_server, SWEPT)


def _guard(redis_server: RedisServer, policy: Policy) -> Iterator[Guard]:
    """A sync guard of leases on the suite's server, its connections made and its prefix
    claimed (a first lease taken and given back): the next call is the one interrupted."""
    flush([redis_server])
    made = Guard(RedisBackend(Redis(port=redis_server.port, socket_timeout=5)), [policy])
    made.clock = ManualClock(START)
    with made.lease("llm", user="u"):
        pass
    try:
        yield made
    finally:
        resume(redis_server)
        made.close()


def _interrupt_pending() -> bool:
    """Whether a SIGINT sent to this process is still pending (not yet taken by a thread:
    /proc's ShdPnd), so that a test knows the main thread was interrupted."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("ShdPnd:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    raise AssertionError("no ShdPnd in /proc/self/status")


def _noted_or(stop: threading.Event, count: int) -> bool:
    return stop.is_set() or _noted() >= count


def _noted() -> int:
    """How many Ctrl-Cs the hold in force has noted (0: none is in force). The kernel
    takes a SIGINT at once, but Python runs its handler later, in the main thread: a second
    sent before that is one with the first (review: the second-Ctrl-C test waited 20 s)."""
    held = getattr(signal.getsignal(signal.SIGINT), "__self__", None)
    return len(held.came) if isinstance(held, holding) else 0


@contextlib.contextmanager
def _interrupting(
    server: RedisServer,
    times: int = 1,
    before_resuming: Callable[[], bool] = lambda: True,
    stop_now: bool = True,
) -> Iterator[None]:
    """Stop ``server`` (``stop_now``, else the block stops it); a thread sends this process
    a SIGINT (``times``, each once the hold noted the last) once the stopped server has the
    call the main thread waits on, then resumes it once ``before_resuming()`` holds. The
    thread stops (no signal sent later, into another test) and is joined when the block
    ends, however it ends."""
    stop, failed = threading.Event(), list[BaseException]()

    def out() -> bool:
        return halted(server.process.pid) and input_waiting(server)

    def run() -> None:
        try:
            servers.wait_for(lambda: stop.is_set() or out(), "the call, out")
            for sent in range(1, times + 1):
                if stop.is_set():
                    return
                os.kill(os.getpid(), signal.SIGINT)
                servers.wait_for(lambda: not _interrupt_pending(), "the interrupt, taken")
                if sent < times:  # its Python handler run: else the next is one with it
                    servers.wait_for(functools.partial(_noted_or, stop, sent), "it, noted")
            servers.wait_for(lambda: stop.is_set() or before_resuming(), "the interrupt's end")
        except BaseException as exc:  # told to the test as it ends
            failed.append(exc)
        finally:
            resume(server)

    if stop_now:
        pause(server)
    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    if failed:
        raise failed[0]


def _lease_interrupted(guard: Guard, server: RedisServer) -> None:
    """A lease block whose take is interrupted while out on ``server``."""
    with _interrupting(server), guard.lease("llm", user="u"):
        raise AssertionError("the block is never entered")


def test_a_ctrl_c_while_a_sync_take_is_out_gives_it_back_then_interrupts(
    guard: Guard, redis_server: RedisServer
) -> None:
    """A ``KeyboardInterrupt`` while a lease's take is out: the call is let finish (a
    Ctrl-C cut the reply's read, and a take the server ran left a lease nobody knew of,
    held until it lapsed: one of two held after), what it took is given back, then the
    interrupt is raised."""
    with pytest.raises(KeyboardInterrupt):
        _lease_interrupted(guard, redis_server)
    assert guard.peek("llm", user="u").rules[0].remaining == 2


def test_a_ctrl_c_while_a_sync_release_is_out_is_raised_after_it(
    guard: Guard, redis_server: RedisServer
) -> None:
    """The same while the release is out. (A release written is run by the server however
    the client reads its reply, so this checks only that the interrupt is raised once it
    is answered, and the lease is free.)"""
    with pytest.raises(KeyboardInterrupt):
        _release_interrupted(guard, redis_server)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert guard.peek("llm", user="u").rules[0].remaining == 2


def _release_interrupted(guard: Guard, server: RedisServer) -> None:
    with _interrupting(server, stop_now=False), guard.lease("llm", user="u") as decision:
        assert decision.allowed
        pause(server)  # the block ends: the release goes out to a stopped server


def test_a_second_ctrl_c_interrupts_a_sync_take_at_once(redis_server: RedisServer) -> None:
    """The first Ctrl-C is held back while the take is out; a second one is raised at once,
    while the server is still stopped (what the take did is then not known:
    docs/strategies/concurrency.md). Held back too, the take would wait for the server (its
    socket timeout past the thread's wait), which the thread resumes only once the
    interrupt was raised: its wait would fail the test."""
    flush([redis_server])
    client = Redis(port=redis_server.port, socket_timeout=60)  # longer than a test's wait
    guard = Guard(RedisBackend(client), [LLM])
    guard.clock = ManualClock(START)
    try:
        with guard.lease("llm", user="u"):  # the connections made, the prefix claimed
            pass
        raised = threading.Event()
        with _interrupting(redis_server, times=2, before_resuming=raised.is_set):
            with pytest.raises(KeyboardInterrupt), guard.lease("llm", user="u"):
                raise AssertionError("the block is never entered")
            raised.set()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        resume(redis_server)
        guard.close()


def test_a_sigint_handler_set_outside_python_is_left_alone(
    guard: Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program embedding Python may own SIGINT in C (``getsignal`` answers None; Python
    cannot set that handler back): the lease goes as it is, the handler untouched (review:
    ``signal.signal(SIGINT, None)`` raised TypeError, and the C handler was lost)."""
    monkeypatch.setattr(signal, "getsignal", lambda signum: None)
    set_to: list[object] = []
    monkeypatch.setattr(signal, "signal", lambda signum, handler: set_to.append(handler))
    with guard.lease("llm", user="u") as decision:
        assert decision.allowed
    assert set_to == []


def test_a_lease_where_no_handler_can_be_set_goes_as_it_is(
    guard: Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subinterpreter's main thread may not set a handler (``signal.signal`` raises
    ValueError there): the lease goes as it is (review: every lease raised)."""

    def refused(signum: int, handler: object) -> object:
        raise ValueError("signal only works in main thread of the main interpreter")

    monkeypatch.setattr(signal, "signal", refused)
    with guard.lease("llm", user="u") as decision:
        assert decision.allowed
    assert guard.peek("llm", user="u").rules[0].remaining == 2


def test_a_ctrl_c_as_the_handler_is_put_back_is_raised_after_it(
    guard: Guard, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``signal.signal`` runs a pending handler before it sets another: a second Ctrl-C
    that lands as Python's own is put back is noted, and raised once it is back (review:
    it was raised there, and the noting handler stayed for good)."""
    real = signal.signal

    def landing(signum: int, handler: Any) -> Any:
        if handler is signal.default_int_handler:  # putting it back: a Ctrl-C lands first
            noting: Any = signal.getsignal(signal.SIGINT)
            noting(signal.SIGINT, None)
        return real(signum, handler)

    monkeypatch.setattr(signal, "signal", landing)
    with pytest.raises(KeyboardInterrupt):
        _lease_interrupted(guard, redis_server)
    monkeypatch.setattr(signal, "signal", real)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert guard.peek("llm", user="u").rules[0].remaining == 2


#: the profile events where the interpreter may run a pending signal's handler (its eval
#: breaker's checks): as a function begins, and as a call into C returns (not at a Python
#: function's return, where the hook's exception would land where no signal's does)
_CHECKED = frozenset({"call", "c_return"})
#: the one point left open: a Ctrl-C the interpreter runs as the block's ``__exit__`` begins,
#: before its first line (every function's first instruction checks; the ``with`` statement
#: calls ``__exit__`` once, so it ends the block with the lease held until it lapses)
_EXIT_BEGINS = (LeaseBlock.__exit__.__code__, "call")


def _ctrl_c_at(event: int | None, run: Callable[[], None], within: Any = None) -> int:
    """``run()`` with a SIGINT raised at its ``event``-th profile event of :data:`_CHECKED`
    (None: none), as a Ctrl-C landing there; how many events it had (``within``: only
    those inside a call of that function, not its own call and return, where a Ctrl-C is
    its caller's). A
    ``KeyboardInterrupt`` it raises, at once or from a signal still pending as it ends, is
    swallowed."""
    seen, inside = [0], [within is None]

    def hook(frame: Any, kind: str, arg: object) -> None:
        if within is not None and frame.f_code is within.__code__:
            inside[0] = kind == "call"  # its own call and return: its caller's
        elif inside[0] and kind in _CHECKED and (frame.f_code, kind) != _EXIT_BEGINS:
            seen[0] += 1
            if seen[0] == event:
                sys.setprofile(None)
                signal.raise_signal(signal.SIGINT)

    with contextlib.suppress(KeyboardInterrupt):
        try:
            sys.setprofile(hook)
            run()
        finally:
            sys.setprofile(None)
        _flush_pending()
    return seen[0]


def _flush_pending() -> None:
    """A call: Python runs a pending signal's handler as one returns."""


def _sweep(guard: Guard, run: Callable[[], None], within: Any = None) -> None:
    """``run`` with a Ctrl-C at each of its events in turn (``within``: of that function's
    calls): afterwards, no lease held, Python's own handler back."""
    total = _ctrl_c_at(None, run, within)
    assert total > 0
    for event in range(1, total + 1):
        _ctrl_c_at(event, run, within)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, event
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


@pytest.mark.parametrize("inside", ["take_lease", "release"])
def test_a_ctrl_c_anywhere_inside_take_lease_or_release_never_leaves_the_lease_held(
    swept: Guard, inside: str
) -> None:
    """The same inside ``take_lease`` and ``release``, called in turn: a Ctrl-C in
    ``take_lease`` after its store answered gives the lease back before it is raised; in
    ``release``, the release still goes. (Once ``take_lease`` has returned, a Ctrl-C is
    its caller's, whose ``try`` has not begun: ``with guard.lease`` covers that.)"""
    taken: list[Decision] = []

    def pair() -> None:
        taken.clear()
        taken.append(swept.take_lease("llm", user="u"))
        assert taken[0].allowed
        swept.release(taken[0])

    _sweep(swept, pair, getattr(Guard, inside))
