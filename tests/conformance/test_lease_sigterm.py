"""A worker stopped by a deploy while a sync lease's call is out on Redis: SIGTERM, whose
handler (the program's own) raises ``SystemExit``, lands while the server holds the take.
The call is let finish and what it took given back, then the handler runs (as a Ctrl-C is
held back: ``test_lease_interrupts.py``, whose way of stopping the server this follows)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from freqguard import Guard, ManualClock, MemoryBackend
from tests import servers
from tests.conformance.lease_rig import LLM
from tests.conformance.test_lease_interrupts import (
    _guard,
    _main_thread_only,  # noqa: F401 (autouse)
)
from tests.conftest import START
from tests.faults import halted, input_waiting, pause, resume
from tests.servers import RedisServer


def _pending(signum: int) -> bool:
    """Whether ``signum`` sent to this process is still pending (/proc's ShdPnd)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("ShdPnd:"):
            return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    raise AssertionError("no ShdPnd in /proc/self/status")


def _out(server: RedisServer) -> bool:
    """Whether the stopped ``server`` has the call the main thread waits on."""
    return bool(halted(server.process.pid) and input_waiting(server))


def _exit(signum: int, frame: object) -> None:
    sys.exit(0)  # a worker's SIGTERM handler: its finally and with blocks run


@pytest.fixture
def guard(redis_server: RedisServer) -> Iterator[Guard]:
    yield from _guard(redis_server, LLM)


def test_a_sigterm_handler_that_exits_while_a_take_is_out_leaves_no_lease_held(
    guard: Guard, redis_server: RedisServer
) -> None:
    """Only Python's own Ctrl-C was held back: the handler's ``SystemExit`` landed in the
    socket's read, the reply was dropped, and the lease the server then took was known to
    nobody, held until it lapsed (adversarial review)."""
    stop = threading.Event()

    def run() -> None:
        try:
            servers.wait_for(lambda: stop.is_set() or _out(redis_server), "the take, out")
            if not stop.is_set():
                os.kill(os.getpid(), signal.SIGTERM)
                servers.wait_for(lambda: not _pending(signal.SIGTERM), "the signal, taken")
        finally:
            resume(redis_server)

    previous = signal.signal(signal.SIGTERM, _exit)
    pause(redis_server)
    thread = threading.Thread(target=run)
    thread.start()
    try:
        with pytest.raises(SystemExit), guard.lease("llm", user="u"):
            raise AssertionError("the block is never entered")
    finally:
        stop.set()
        thread.join()
        signal.signal(signal.SIGTERM, previous)
    assert signal.getsignal(signal.SIGTERM) is previous
    assert guard.peek("llm", user="u").rules[0].remaining == 2


class _Signalling(MemoryBackend):
    """A memory store whose next call raises ``signals`` (in order) as it is made: signals
    landing while a lease's call is out."""

    def __init__(self) -> None:
        super().__init__()
        self.signals: list[int] = []

    def execute_many(self, calls: Any) -> Any:
        pending, self.signals = self.signals, []
        for signum in pending:
            signal.raise_signal(signum)
        return super().execute_many(calls)


@pytest.mark.parametrize(
    "sent", [[signal.SIGTERM, signal.SIGTERM], [signal.SIGTERM, signal.SIGINT]], ids=str
)
def test_two_signals_to_a_programs_own_handlers_during_a_take_run_each_once(
    sent: list[int],
) -> None:
    """Handlers of the program's own that set a flag (gunicorn's worker does so on
    SIGTERM), two signals while a take is out: the second runs every handler at once. The
    hold forgot its handlers as it put them back, so the first signal's handler never ran
    and a ``KeyboardInterrupt`` nobody sent came out of the block (review)."""
    seen: list[int] = []

    def flag(signum: int, frame: object) -> None:
        seen.append(signum)

    backend = _Signalling()
    guard = Guard(backend, [LLM], clock=ManualClock(START))
    previous = {signum: signal.signal(signum, flag) for signum in set(sent)}
    try:
        backend.signals = sent
        with guard.lease("llm", user="u") as decision:
            assert decision.allowed
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert seen == sent
    assert guard.peek("llm", user="u").rules[0].remaining == 2


def test_a_handler_that_raises_on_the_first_of_two_signals_leaves_the_second_run() -> None:
    """SIGTERM (a worker's ``sys.exit``) then SIGINT (a handler that sets a flag) while a
    take is out: every handler that came runs, the first's exception raised after (review:
    the loop ended at the ``SystemExit``, and the SIGINT was lost)."""
    seen: list[int] = []

    def stop(signum: int, frame: object) -> None:
        sys.exit(0)

    def flag(signum: int, frame: object) -> None:
        seen.append(signum)

    backend = _Signalling()
    guard = Guard(backend, [LLM], clock=ManualClock(START))
    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, stop),
        signal.SIGINT: signal.signal(signal.SIGINT, flag),
    }
    try:
        backend.signals = [signal.SIGTERM, signal.SIGINT]
        with pytest.raises(SystemExit), guard.lease("llm", user="u"):
            raise AssertionError("never entered: the take was interrupted")
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert guard.peek("llm", user="u").rules[0].remaining == 2
    assert seen == [signal.SIGINT]


class _SignalledAfter(MemoryBackend):
    """A memory store whose next call raises ``signum`` once it has written: a signal
    landing after the store took the lease, before the guard has its answer."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum: int | None = signum

    def execute_many(self, calls: Any) -> Any:
        replies = super().execute_many(calls)
        signum, self.signum = self.signum, None
        if signum is not None:
            signal.raise_signal(signum)
        return replies


@pytest.mark.parametrize(
    "signum", [signal.SIGQUIT, signal.SIGABRT, signal.SIGHUP], ids=lambda s: s.name
)
def test_a_stop_signals_handler_that_exits_after_a_take_leaves_no_lease_held(
    signum: int,
) -> None:
    """gunicorn's worker exits on SIGQUIT (a quick shutdown) and SIGABRT (a worker past its
    timeout), a daemon often on SIGHUP: only SIGINT's and SIGTERM's handlers were held back,
    so the ``SystemExit`` of these came out of the store's call with the lease taken and
    known to nobody (the gap named last stop)."""

    def stop(signum: int, frame: object) -> None:
        sys.exit(0)

    guard = Guard(_SignalledAfter(signum), [LLM], clock=ManualClock(START))
    previous = signal.signal(signum, stop)
    try:
        with pytest.raises(SystemExit), guard.lease("llm", user="u"):
            raise AssertionError("never entered: the take was interrupted")
    finally:
        signal.signal(signum, previous)
    assert guard.peek("llm", user="u").rules[0].remaining == 2


class _SignalsAfter(MemoryBackend):
    """A memory store whose next call raises ``signals`` (in order) once it has written:
    signals landing after the store took the lease, before the guard has its answer."""

    def __init__(self) -> None:
        super().__init__()
        self.signals: list[int] = []

    def execute_many(self, calls: Any) -> Any:
        replies = super().execute_many(calls)
        pending, self.signals = self.signals, []
        for signum in pending:
            signal.raise_signal(signum)
        return replies


@pytest.mark.parametrize("reloads", [1, 2])
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_reloads_on_sighup_then_one_stop_signal_after_a_take_leave_no_lease_held(
    stop: int, reloads: int
) -> None:
    """A daemon's SIGHUP handler reloads its configuration (sets a flag, never raises);
    SIGHUP (once, or twice: a logrotate's postrotate and a config push), then one SIGTERM
    (a worker's ``sys.exit``) or one Ctrl-C, land after the store took the lease. Two
    reviews found the stop signal run at once, out of the store's call, the lease taken
    and known to nobody: once SIGHUP was held, the stop signal counted as "a second signal
    meanwhile"; then a second SIGHUP counted as "the same signal again", meant for a
    second Ctrl-C. A reload asks no escape: only a stop signal sent twice runs at once."""
    seen: list[int] = []

    def reload(signum: int, frame: object) -> None:
        seen.append(signum)

    backend = _SignalsAfter()
    guard = Guard(backend, [LLM], clock=ManualClock(START))
    previous: dict[int, Any] = {signal.SIGHUP: signal.signal(signal.SIGHUP, reload)}
    if stop == signal.SIGTERM:
        previous[stop] = signal.signal(stop, _exit)
    try:
        backend.signals = [signal.SIGHUP] * reloads + [stop]
        with pytest.raises((SystemExit, KeyboardInterrupt)), guard.lease("llm", user="u"):
            raise AssertionError("never entered: the take was interrupted")
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert seen == [signal.SIGHUP] * reloads
    assert guard.peek("llm", user="u").rules[0].remaining == 2
