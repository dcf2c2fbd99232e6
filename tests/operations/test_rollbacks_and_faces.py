"""Deploys while leases are out, and a sync guard's faces: a rollback (A to B to A again) as
a lease taken under A goes back, on the store or a fallback; a deploy that swaps the
fallback while a hit runs on it; a policy registered through the async face with a
fallback the sync guard cannot drive. Each a review's finding of the day's fixes, written
failing first, deterministic (threads paused at the racing line by trace functions and
events, time pinned by a ManualClock)."""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.decision import Decision
from freqguard.decorators.adapters import as_async
from freqguard.engine import plan as plan_module
from freqguard.engine.failover import Failover
from freqguard.engine.registry import PolicyRegistry
from freqguard.policy import Fallback
from tests.operations.failure_rig import Switch

START = 1_700_000_000.0


def _version(per_minute: int) -> Policy:
    return Policy(
        "llm", Rule("2 concurrent", lease=60, name="cc"), Rule(f"{per_minute}/minute", name="rate")
    )


def _line_of(function: Any, starts: str) -> int:
    """The line number of the line of ``function`` that starts (stripped) with ``starts``."""
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if line.strip().startswith(starts))


# -- 1. a rollback's registration drops the kept plan before it publishes the new one ------


def _paused_at(
    work: Callable[[], object], function: Any, starts: str, caller: str | None = None
) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """``work`` in a thread of its own, held (a trace function) at the line of ``function``
    that starts with ``starts`` (called from a function named ``caller``, if given), until
    the second event returned is set; the first is set once it is held (or has ended)."""
    line, name = _line_of(function, starts), function.__code__.co_name
    paused, go_on = threading.Event(), threading.Event()

    def on_line(frame: FrameType, event: str, arg: object) -> Any:
        if event == "line" and frame.f_lineno == line:
            paused.set()
            go_on.wait(30)
        return on_line

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        code, up = frame.f_code, frame.f_back
        if (
            event != "call"
            or code.co_name != name
            or code.co_filename != function.__code__.co_filename
        ):
            return None
        if caller is not None and (up is None or up.f_code.co_name != caller):
            return None
        return on_line

    def run() -> None:
        sys.settrace(tracer)
        try:
            work()
        finally:
            sys.settrace(None)
            paused.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, paused, go_on


def _released(
    guard: Guard, lease: Decision, deploying: threading.Thread, go_on: threading.Event
) -> object:
    """What ``guard.release(lease)`` came to ("done", or what it raised), the deploy held
    meanwhile; then the deploy let go on, and waited for."""
    try:
        guard.release(lease)
        return "done"
    except Exception as exc:  # what the release raised is the finding
        return exc
    finally:
        go_on.set()
        deploying.join(30)


def test_a_release_during_a_rollback_finds_the_plan_its_lease_was_taken_under() -> None:
    """A lease taken under version A; A replaced by B (A kept among the replaced plans);
    then B rolled back to A (``add_policy(A, replace=True)``, a configuration watcher's
    revert). ``PolicyRegistry._add`` publishes ``_replaced`` first, with A popped (the
    fingerprint is the new plan's), then ``_plans``: between the two, a release of the
    A lease (another thread: a request ending) reads ``_plans`` (still B) and
    ``_replaced`` (A gone) and gives back by B, which refuses the receipt. Expected: the
    release goes through (before the revert A is kept, after it A is registered). Got:
    ``ConfigError: that decision's receipt is for policy 'llm' as it was registered
    then`` out of the release (a lease block's end), the lease held until it lapses."""
    guard = Guard(policies=[_version(100)], clock=ManualClock(START))
    lease = guard.take_lease("llm")
    guard.add_policy(_version(200), replace=True)  # the deploy: A kept for the lease
    rollback = lambda: guard.add_policy(_version(100), replace=True)  # noqa: E731
    # held where _replaced is published (A popped), _plans not yet
    deploying, paused, go_on = _paused_at(rollback, PolicyRegistry._add, "self._plans =")
    assert paused.wait(30)
    outcome = _released(guard, lease, deploying, go_on)
    assert outcome == "done", outcome  # got ConfigError("...as it was registered then...")
    assert guard.peek("llm").rules[0].remaining == 2  # got 1: held until it lapses


# -- 3. a rollback re-keeps a shared-out plan in place: a fallback lease's release misses it


def _on_fallback(per_minute: int, fallback: MemoryBackend) -> Policy:
    return Policy(
        "llm",
        Rule("4 concurrent", lease=60, name="cc"),
        Rule(f"{per_minute}/minute", name="rate"),
        on_error=Fallback(fallback, 2),  # two workers: each holds 2 of the 4 leases
    )


def test_a_fallback_release_during_a_rollback_finds_the_plan_its_lease_was_taken_under() -> None:
    """The store down, a lease taken on the policy's Fallback (workers=2: taken by the
    shared-out plan, whose fingerprint the receipt bears); the policy replaced (B), then
    rolled back (A again). The rollback's ``Failover.add`` makes A's shared-out plan again
    and keeps it with ``keep(self._kept[name], fingerprint, made)``, in place, on the dict
    releases read unlocked (``Failover.taken_under``): ``keep`` pops the fingerprint
    ("back again: the newest once more"), then sets it. A release in another thread between
    the two finds no shared-out plan of that fingerprint, falls back to the registry's
    (which keeps plans, not shared-out ones) and gives back by B. Expected: the lease goes
    back to the fallback. Got: ``ConfigError: that decision's receipt is for policy 'llm'
    as it was registered then`` out of the release, the fallback's lease held until it
    lapses."""
    clock = ManualClock(START)
    store, fallback = Switch(clock), MemoryBackend(clock)
    store.down = True
    guard = Guard(store, [_on_fallback(100, fallback)], clock, breaker=None)
    lease = guard.take_lease("llm")
    assert lease.allowed
    assert lease.source == "fallback"
    guard.add_policy(_on_fallback(200, fallback), replace=True)
    rollback = lambda: guard.add_policy(_on_fallback(100, fallback), replace=True)  # noqa: E731
    # held in the rollback's keep of the shared-out plan: popped, not yet set again
    at = "versions[fingerprint] = version"
    deploying, paused, go_on = _paused_at(rollback, plan_module.keep, at, "_shared_out")
    assert paused.wait(30)
    outcome = _released(guard, lease, deploying, go_on)
    assert outcome == "done", outcome  # got ConfigError("...as it was registered then...")


# -- 4. a policy registered through a sync guard's async face skips the sync guard's check --


class _AsyncOnly:
    """A fallback backend with only the async methods (an asyncio Redis client's)."""

    def __init__(self, clock: ManualClock) -> None:
        self.inner, self.clock = MemoryBackend(clock), clock

    async def aexecute(self, call: Any) -> Any:
        return self.inner.execute(call)

    async def aexecute_many(self, calls: Any) -> Any:
        return self.inner.execute_many(calls)

    async def aclose(self) -> None:
        pass


def test_a_policy_registered_through_the_async_face_has_a_fallback_the_guard_can_drive() -> None:
    """The registry is shared by a sync guard and its async face (``as_async``: "a policy
    added to either side ... is known to the other"), and a registration checks its
    ``on_error`` (``Failover.add``, under the registry's lock) only as the face it came
    through drives it. ``guard.add_policy`` refuses a fallback with only async methods
    ("lacks execute, execute_many, close: a sync guard needs one it can drive");
    ``as_async(guard).add_policy`` takes it (an ASGI app's startup registering on the face,
    the fallback an ``async_backend_from_url``), and the sync guard's hit on that policy,
    with the store down, raises ``AttributeError: ... has no attribute 'execute_many'``
    (no BackendUnavailable: no ``on_error`` answers it). Expected: refused as the sync
    guard refuses it (or driven)."""
    clock = ManualClock(START)
    store = Switch(clock)
    store.down = True
    guard = Guard(store, [], clock, breaker=None)
    policy = Policy("p", Rule("5/minute"), on_error=Fallback(_AsyncOnly(clock), 1))
    try:
        as_async(guard).add_policy(policy)  # got: taken
    except ConfigError:
        return  # refused, as guard.add_policy(policy) is
    assert guard.hit("p").source == "fallback"  # got AttributeError (execute_many)


# -- 5. a hit racing a deploy that swaps the fallback: run on one, its receipt names the other


def _one_lease(fallback: MemoryBackend) -> Policy:
    return Policy("llm", Rule("1 concurrent", lease=60, name="cc"), on_error=Fallback(fallback, 1))


def test_a_lease_taken_on_a_fallback_while_a_deploy_swaps_it_goes_back_there() -> None:
    """``Failover.guarded`` reads a policy's ``on_error`` twice, unlocked: the fallback the
    hit runs on (``on_failure``: ``_driven[name]``) and the one its receipt names
    (``given``: ``_given[name]``, which a release gives back to). A deploy in another
    thread between the two (a configuration reload: ``on_error = { fallback = "..." }``
    makes a new fallback backend at every deploy) sets ``_given[name]`` in place: the lease
    is taken on the old fallback, its receipt names the new one, and its release goes to
    the new one, where nothing was taken. Expected: the old fallback's lease given back.
    Got: held there until it lapses (0 of 1 free), the one concurrent call refused
    meanwhile wherever that fallback serves."""
    clock = ManualClock(START)
    store, old, new = Switch(clock), MemoryBackend(clock), MemoryBackend(clock)
    store.down = True
    guard = Guard(store, [_one_lease(old)], clock, breaker=None)
    taken: list[Decision] = []
    take = lambda: taken.append(guard.take_lease("llm"))  # noqa: E731
    at = "answer = self.answer(plan, cost)"  # on_error read: the fallback and its name
    hitting, paused, go_on = _paused_at(take, Failover.guarded, at)
    assert paused.wait(30)  # it runs on the old fallback: read already
    try:
        guard.add_policy(_one_lease(new), replace=True)  # the reload, in this thread
    finally:
        go_on.set()
        hitting.join(30)
    (lease,) = taken
    assert lease.allowed
    assert lease.source == "fallback"
    guard.release(lease)
    there = Guard(old, [Policy("llm", Rule("1 concurrent", lease=60, name="cc"))], clock)
    assert there.peek("llm").rules[0].remaining == 1  # got 0: held on the old fallback
