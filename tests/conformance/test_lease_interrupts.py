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

from freqguard import BackendUnavailable, Guard, ManualClock, Policy
from freqguard._sync._io import _put_back, holding, send
from freqguard.backends.redis import RedisBackend
from freqguard.script.contract import REFUND
from tests import servers
from tests.conformance.lease_rig import LLM
from tests.conftest import START, flush
from tests.faults import halted, input_waiting, pause, resume
from tests.servers import RedisServer


@pytest.fixture(autouse=True)
def _main_thread_only() -> Iterator[None]:
    """Main thread only; Python's own SIGINT handler put back after, so that a test that
    found one left in place fails alone."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("a signal's handler runs in the main thread only")
    yield
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def guard(redis_server: RedisServer) -> Iterator[Guard]:
    yield from _guard(redis_server, LLM)


#: The guard's socket timeout: past every wait of the rig (each ``servers.wait_for`` is
#: bounded by STARTUP_SECONDS, and the rig resumes the server however it ends), so that a
#: call out on the stopped server is answered however slowly the machine runs the rig. At
#: 5 s a stall between the take's send and the resume (a loaded CI machine) timed the take
#: out: the server ran it once resumed, and one lease of two was held after (the flake).
PATIENT = 3 * servers.STARTUP_SECONDS


def _guard(redis_server: RedisServer, policy: Policy) -> Iterator[Guard]:
    """A sync guard of leases on the suite's server, its connections made and its prefix
    claimed (a first lease taken and given back): the next call is the one interrupted."""
    flush([redis_server])
    made = Guard(RedisBackend(Redis(port=redis_server.port, socket_timeout=PATIENT)), [policy])
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
    client = Redis(port=redis_server.port, socket_timeout=PATIENT)
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


def test_a_ctrl_c_during_a_release_that_fails_is_raised_and_the_release_not_sent_again(
    guard: Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C held back while a release goes to a store that refuses it (nothing sent):
    the interrupt is what is raised, once the release failed, and the release is not sent
    again (review: it was, and its second failure's ``BackendUnavailable`` was raised
    instead, which an ``except Exception`` swallows). Its receipt stays unspent: released
    again later, the lease goes back."""
    decision = guard.take_lease("llm", user="u")
    real, sends = guard.backend.execute_many, [0]

    def refused(calls: Any) -> Any:
        sends[0] += 1
        signal.raise_signal(signal.SIGINT)  # noted by the hold
        raise BackendUnavailable("refused", sent=False)

    monkeypatch.setattr(guard.backend, "execute_many", refused)
    with pytest.raises(KeyboardInterrupt):
        guard.release(decision)
    assert sends == [1]
    monkeypatch.setattr(guard.backend, "execute_many", real)
    guard.release(decision)
    assert guard.peek("llm", user="u").rules[0].remaining == 2


@pytest.mark.parametrize("raised_as", ["held", "put back"])
def test_another_signals_exception_as_the_hold_is_set_or_put_back_leaves_python_s_handler(
    guard: Guard, monkeypatch: pytest.MonkeyPatch, raised_as: str
) -> None:
    """``signal.signal`` runs pending handlers first, and its Python wrapper checks for
    signals after the handler is set: another signal's handler that raises there (a
    SIGALRM timeout) raises out of the hold. The hold puts Python's own handler back
    whatever raised, and the exception goes on (review: the noting handler stayed, and
    every later first Ctrl-C was swallowed)."""
    real = signal.signal
    first = [True]

    def interrupted(signum: int, handler: Any) -> Any:
        putting_back = handler is signal.default_int_handler
        if first[0] and putting_back == (raised_as == "put back"):
            first[0] = False
            if putting_back:  # raised before the C call: nothing set
                raise TimeoutError("another signal's handler")
            real(signum, handler)  # set, then raised in the wrapper after it
            raise TimeoutError("another signal's handler")
        return real(signum, handler)

    monkeypatch.setattr(signal, "signal", interrupted)
    with pytest.raises(TimeoutError), guard.lease("llm", user="u"):
        pass
    monkeypatch.setattr(signal, "signal", real)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert guard.peek("llm", user="u").rules[0].remaining == 2


class _Alarm(Exception):
    """What a program's own timeout handler (SIGALRM, here SIGUSR1) raises."""


def _raising(signum: int, frame: object) -> None:
    raise _Alarm


@pytest.mark.parametrize(
    ("second", "where"),
    [("ctrl-c", "__exit__"), ("another signal", "__exit__"), ("another signal", "_put_back")],
)
def test_a_signal_as_the_hold_ends_never_leaves_its_handler_in_place(
    guard: Guard, second: str, where: str
) -> None:
    """A Ctrl-C noted while a release is out, then, as the hold's ``__exit__`` (or its
    ``_put_back``) begins, before its first line, a second Ctrl-C or another signal's
    exception: Python's own handler is back after (review: the noting handler stayed for
    good, every later hold off, a later first Ctrl-C swallowed)."""
    decision = guard.take_lease("llm", user="u")
    state = [0]
    signum = signal.SIGINT if second == "ctrl-c" else signal.SIGUSR1
    begins = holding.__exit__.__code__ if where == "__exit__" else _put_back.__code__

    def hook(frame: Any, kind: str, arg: object) -> None:
        if state[0] == 0 and kind == "call" and frame.f_code is send.__code__:
            state[0] = 1
            signal.raise_signal(signal.SIGINT)  # noted by the release's hold
        elif state[0] == 1 and kind == "call" and frame.f_code is begins:
            state[0] = 2
            sys.setprofile(None)
            signal.raise_signal(signum)

    old = signal.signal(signal.SIGUSR1, _raising)
    try:
        with contextlib.suppress(KeyboardInterrupt, _Alarm):
            _profiled(hook, lambda: guard.release(decision))
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert state[0] == 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_take_given_back_after_a_ctrl_c_is_tried_once_when_it_fails(
    guard: Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C noted as a take's decision is built, its give-back failing on a store that
    refuses it (nothing sent): one attempt, then the interrupt (review: the block's entry
    and ``take_lease`` each tried it, a second wait on a failing store)."""
    real, attempts = guard.backend.execute_many, [0]

    def refusing_give_backs(calls: Any) -> Any:
        if any(call.mode == REFUND for call in calls):
            attempts[0] += 1
            raise BackendUnavailable("refused", sent=False)
        return real(calls)

    def hook(frame: Any, kind: str, arg: object) -> None:
        if kind == "call" and frame.f_code.co_name == "hit_done":
            sys.setprofile(None)
            signal.raise_signal(signal.SIGINT)  # noted by the take's hold

    monkeypatch.setattr(guard.backend, "execute_many", refusing_give_backs)
    with pytest.raises(KeyboardInterrupt):
        _profiled(hook, lambda: guard.take_lease("llm", user="u"))
    assert attempts == [1]


def _profiled(hook: Any, run: Callable[[], object]) -> None:
    """``run()`` under the profile ``hook``."""
    sys.setprofile(hook)
    try:
        run()
    finally:
        sys.setprofile(None)
