"""A fallback's shared-out plans made by a hit that read its plan before a deploy, as the
deploy makes its own (one made at a time: one kept was lost, and a lease taken under it
could not go back). A review's finding, written failing first."""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.decision import Decision
from freqguard.engine.failover import Failover
from freqguard.policy import Fallback
from tests.operations.failure_rig import Switch

START = 1_700_000_000.0

# -- 2. a hit's unlocked share-out loses the deploy's kept shared-out plan ------------------


def _line_of(function: Any, starts: str) -> int:
    """The line number of the line of ``function`` that starts (stripped) with ``starts``."""
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if line.strip().startswith(starts))


class _Held:
    """``work`` in a thread of its own, held at each of ``stops`` in turn (a trace function:
    the line of a function that starts with a text, called from a function of a name), each
    let go by :meth:`go_on`; :meth:`wait` waits until it is held at the next (or ended)."""

    def __init__(self, work: Callable[[], object], *stops: tuple[Any, str, str]) -> None:
        self._stops = [
            (function.__code__, _line_of(function, starts), caller)
            for function, starts, caller in stops
        ]
        self._held, self._go = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,))
        self._thread.start()

    def _tracer(self, frame: FrameType, event: str, arg: object) -> Any:
        if event != "call" or not self._stops:
            return None
        code, line, caller = self._stops[0]
        up = frame.f_back
        if frame.f_code is not code or up is None or up.f_code.co_name != caller:
            return None

        def on_line(frame: FrameType, event: str, arg: object) -> Any:
            if event == "line" and self._stops and frame.f_lineno == line:
                self._stops.pop(0)
                self._go.clear()
                self._held.set()
                self._go.wait(30)
            return on_line

        return on_line

    def _run(self, work: Callable[[], object]) -> None:
        sys.settrace(self._tracer)
        try:
            work()
        except BaseException as exc:  # shown by the test
            self.error = exc
        finally:
            sys.settrace(None)
            self._stops.clear()
            self._held.set()

    def wait(self) -> None:
        assert self._held.wait(30)
        self._held.clear()

    def go_on(self) -> None:
        self._go.set()

    def join(self) -> None:
        self._go.set()
        self._thread.join(30)
        assert self.error is None, self.error


def _shared_version(per_minute: int, fallback: MemoryBackend, on_error: Fallback) -> Policy:
    return Policy(
        "llm",
        Rule("4 concurrent", lease=60, name="cc"),
        Rule(f"{per_minute}/minute", name="rate"),
        on_error=on_error,  # two workers: each holds 2 of the 4 leases
    )


def test_a_fallback_lease_taken_as_a_deploy_races_a_stale_hit_goes_back_after_the_next() -> None:
    """``Failover._shared_out`` is run by hits too (``on_failure``, no lock), whenever the
    shared-out plan it holds (``_shared[(name, workers)]``) is of another plan than the
    hit's, and it copies ``_kept[name]``, adds, and sets it back: two writers at once, the
    later sets a copy without the other's. The store down, version B on the fallback
    (``Fallback(memory, workers=2)``): a lease of B (thread T, a request that read the
    plan before the deploy) runs ``_shared_out(B)`` as the deploy of C (thread D) has set
    ``_shared`` to C's and not yet kept C's shared-out plan: T copies ``_kept`` without it;
    D keeps it, C is published; a lease under C (H) takes its shared-out plan (made again:
    T's set ``_shared`` to B's) and keeps it; then T sets its copy back: C's shared-out
    plan is in no ``_kept`` (and ``_shared`` holds it: no hit keeps it again). A deploy
    later (E), H's release looks for it, falls back to the registry's (plans, not
    shared-out ones) and gives back by E, which refuses the receipt. Expected: H's lease
    goes back to the fallback. Got: ``ConfigError: that decision's receipt is for policy
    'llm' as it was registered then``, the fallback's lease held until it lapses."""
    clock = ManualClock(START)
    store, fallback = Switch(clock), MemoryBackend(clock)
    on_error = Fallback(fallback, 2)
    store.down = True
    guard = Guard(store, [_shared_version(100, fallback, on_error)], clock, breaker=None)
    failover = guard._failover
    waiting = threading.Event()  # T waits for the deploy's making of C's shared-out plan

    class Told:  # the failover's lock, telling when T waits on it
        def __init__(self, lock: Any) -> None:
            self.lock = lock

        def __enter__(self) -> Any:
            if threading.current_thread().name == "stale":
                waiting.set()
            return self.lock.__enter__()

        def __exit__(self, *exc: object) -> Any:
            return self.lock.__exit__(*exc)

    failover._making = Told(failover._making)  # type: ignore[assignment]
    stale: list[Decision] = []
    # T: its plan read (B), held as it reads the on_error
    t = _Held(
        lambda: stale.append(guard.take_lease("llm")),
        (Failover.on_failure, "value = self._given[plan.name]", "guarded"),
    )
    t._thread.name = "stale"
    t.wait()
    deploy = lambda: guard.add_policy(_shared_version(200, fallback, on_error), replace=True)  # noqa: E731
    # D: C's shared-out plan made and cached, not yet kept (the lock held)
    d = _Held(deploy, (Failover._share, "versions = dict(self._kept", "_shared_out"))
    d.wait()
    t.go_on()  # T: the cached plan is C's, not B's: it waits for D's making to end
    assert waiting.wait(30)
    d.join()  # C kept, and published
    t.join()  # T makes B's again, and keeps it beside C's
    lease = guard.take_lease("llm")  # H, under C
    assert lease.source == stale[0].source == "fallback"
    guard.add_policy(_shared_version(300, fallback, on_error), replace=True)  # E
    guard.release(lease)  # got ConfigError("...as it was registered then...")
    there = Guard(fallback, [_shared_version(100, fallback, on_error)], clock)
    assert there.peek("llm").rules[0].remaining == 3  # T's lease held, H's back (2 a worker:
    # the fallback's own guard reads the rule unshared, 4 leases, T's one held)
