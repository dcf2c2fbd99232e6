"""Edges of the per-node breaker and of partial failures, on the node-aware memory store of
tests/operations/test_failure_nodes.py (deterministic: injected clocks, no sleeps). Each test was
written, failing, by an adversarial review of the first per-node breaker: the "got" comments
say what it did then.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import pytest

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Guard,
    ManualClock,
    PartialFailure,
    Policy,
    Rule,
)
from freqguard.failure import Breaker
from freqguard.script.calls import Reply, ScriptCall
from tests.operations.test_failure_nodes import COOLDOWN, FAILURES, Nodes, P

# two parts: the per-r record on the node of r's first letter, the per-c one on c's
TWO = Policy(
    "two",
    Rule("3/day", by="r", name="per-r", strategy="fixed-window"),
    Rule("2/day", by="c", name="per-c", strategy="fixed-window"),
)


def _run(guard: Guard | AsyncGuard, method: str, *args: Any, **kwargs: Any) -> Any:
    got = getattr(guard, method)(*args, **kwargs)
    return asyncio.run(got) if asyncio.iscoroutine(got) else got


def _guard(store: Any, clock: ManualClock, asynchronous: bool, **options: Any) -> Any:
    kind = AsyncGuard if asynchronous else Guard
    return kind(store, [P, TWO], clock, **options)


# -- 1. a refund whose other half was applied is given back again -----------------------------


@pytest.mark.parametrize("on_error", ["raise", "allow"])
def test_a_refund_applied_on_one_node_only_cannot_be_refunded_again(
    on_error: str, asynchronous: bool
) -> None:
    """refund(decision) of a policy on two nodes, A's circuit open: B's half is applied, A's
    held back. The PartialFailure says sent=False (its only errors are CircuitOpen), so the
    receipt is handed back as "surely not applied", and refunding it again later gives B's
    half back twice: the per-c cap (2) then admits 3."""
    clock = ManualClock()
    store = Nodes(clock)
    breaker = Breaker(FAILURES, COOLDOWN, clock=clock.now)
    guard = _guard(store, clock, asynchronous, breaker=breaker, on_error=on_error)
    mine = _run(guard, "hit", "two", r="A1", c="B1")
    theirs = _run(guard, "hit", "two", r="A2", c="B1")
    assert mine.allowed
    assert theirs.allowed
    assert not _run(guard, "hit", "two", r="A3", c="B1").allowed  # per-c is full
    store.down = {"A"}
    for _ in range(FAILURES):  # A's circuit opens
        with contextlib.suppress(BackendUnavailable):
            _run(guard, "peek", "p", r="A9")
    assert breaker.state_of("A") == "open"
    with contextlib.suppress(PartialFailure):
        _run(guard, "refund", mine)  # B's half applied, A's held back
    store.down = set()
    clock.advance(COOLDOWN)
    with contextlib.suppress(ConfigError):  # the caller retries the refund that "failed"
        _run(guard, "refund", mine)
    admitted = sum(_run(guard, "hit", "two", r=f"A{n}", c="B1").allowed for n in (5, 6, 7))
    assert admitted == 1  # one unit of c=B1 was given back, once (got 2: over-admission)


# -- 2. a probe answered by the node that took over is never released -------------------------


class Failover(Nodes):
    """Nodes whose slot map changes during a call, as a Redis Cluster backend's does after a
    failover: a call to a node in ``promoted`` (dead, its replica promoted) makes the map
    name the replica, and the call runs there (the backend follows the slot)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.owner: dict[str, str] = {}  # hash-tag letter -> the node serving it now
        self.promoted: dict[str, str] = {}  # dead node -> its promoted replica

    def node_of(self, call: ScriptCall) -> str:
        letter = super().node_of(call)
        return self.owner.get(letter, letter)

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        for call in calls:
            node = self.node_of(call)
            if node in self.promoted:  # the map is learnt again as the call is rerouted
                self.owner[Nodes.node_of(self, call)] = self.promoted[node]
        return super().execute_many(calls)


@pytest.mark.parametrize("on_error", ["raise", "allow"])  # the one-call path, and the _run loop
def test_a_probe_answered_after_a_failover_releases_the_circuit(
    on_error: str, asynchronous: bool
) -> None:
    """The guard names a call's node twice: at admission (breaker.check) and again after the
    reply (succeeded/failed). The probe to A, rerouted to A's promoted replica A2, is
    accounted to A2: A stays half-open with its probe taken, for ever. The breaker stays
    tripped (every hit computes node_of and takes the lock), and once A serves its slots
    again (a failback, the map learnt anew) every hit on them is a CircuitOpen, never sent."""
    clock = ManualClock()
    store = Failover(clock)
    breaker = Breaker(FAILURES, COOLDOWN, clock=clock.now)
    guard = _guard(store, clock, asynchronous, breaker=breaker, on_error=on_error)
    store.down = {"A"}
    for _ in range(FAILURES):
        with contextlib.suppress(BackendUnavailable):
            _run(guard, "hit", "p", r="A1")
    assert breaker.state_of("A") == "open"
    store.promoted = {"A": "A2"}  # A's replica took over meanwhile
    clock.advance(COOLDOWN)
    assert _run(guard, "hit", "p", r="A1").source == "backend"  # the probe, answered by A2
    stuck = (breaker.state_of("A"), breaker.tripped)  # got: ("half-open", True) for ever
    # A comes back and takes its slots again (failback; the map learnt anew)
    store.down, store.promoted, store.owner = set(), {}, {}
    clock.advance(100 * COOLDOWN)
    try:
        source = _run(guard, "hit", "p", r="A1").source
    except BackendUnavailable as exc:
        source = type(exc).__name__
    assert (source, stuck) == ("backend", ("closed", False))  # got: CircuitOpen / fail-open


# -- 3. a cancelled probe leaves its circuit half-open for ever --------------------------------


class Hung(Nodes):
    """Nodes where a call to a node in ``hung`` waits (asyncio) until cancelled."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.hung: set[str] = set()
        self.entered = asyncio.Event()

    async def aexecute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        if any(self.node_of(call) in self.hung for call in calls):
            self.entered.set()
            await asyncio.Event().wait()  # a hung node: until the caller gives up
        return self.execute_many(calls)

    async def aexecute(self, call: ScriptCall) -> Reply:
        return (await self.aexecute_many([call]))[0]


def test_a_probe_cancelled_by_its_caller_does_not_hold_the_circuit_half_open() -> None:
    """asyncio.wait_for(guard.hit(...)) around a probe to a still-hung node: the task is
    cancelled with the probe out, neither succeeded() nor failed() is told, and the circuit
    keeps ``probing`` for ever: once the node recovers it is never called again (every hit
    on its slots fails open; retry_after says "the cool-down" each time). Pre-existing in
    the single-circuit Breaker too, but now per node."""
    clock = ManualClock()
    store = Hung(clock)
    breaker = Breaker(FAILURES, COOLDOWN, clock=clock.now)
    guard = AsyncGuard(store, [P], clock, breaker=breaker, on_error="allow")

    async def main() -> list[str]:
        store.down = {"A"}
        for _ in range(FAILURES):
            await guard.hit("p", r="A1")
        store.down, store.hung = set(), {"A"}
        clock.advance(COOLDOWN)
        probe = asyncio.ensure_future(guard.hit("p", r="A1"))
        await store.entered.wait()
        probe.cancel()  # as asyncio.wait_for / a request timeout does
        with pytest.raises(asyncio.CancelledError):
            await probe
        store.hung = set()  # A recovers
        sources = []
        for _ in range(3):
            clock.advance(10 * COOLDOWN)
            sources.append((await guard.hit("p", r="A1")).source)
        return sources

    assert asyncio.run(main()) == ["backend"] * 3  # got: fail-open for ever (half-open)


# -- 4. the async face of a sync guard has one circuit for every node ----------------------------


def test_the_async_view_of_a_guard_on_a_cluster_keeps_one_circuit_per_node() -> None:
    """as_async(guard) (what an ``async def`` capped on a sync guard, or an ASGI app, goes
    through) wraps the backend in a ThreadedBackend, which has no ``node_of``: the view
    shares the guard's breaker but accounts every call to node None. A's failures are reset
    by B's successes in between, so A's circuit never opens for the view, and every view
    hit on A's slots waits out the socket timeout (the bug the per-node breaker fixes, back
    for async callers); and the guard's own open circuit for A is ignored by the view."""
    from freqguard.decorators.adapters import as_async

    clock = ManualClock()
    store = Nodes(clock)
    breaker = Breaker(FAILURES, COOLDOWN, clock=clock.now)
    guard = Guard(store, [P], clock, breaker=breaker, on_error="allow")
    view = as_async(guard)

    async def interleaved() -> None:
        for _ in range(5):
            await view.hit("p", r="A1")
            await view.hit("p", r="B1")

    store.down = {"A"}
    asyncio.run(interleaved())
    assert store.calls["A"] == FAILURES  # got 5: A's circuit never opened for the view
    assert breaker.state_of("A") == "open"  # got "closed": the failures went to node None


# -- 5. PartialFailure does not survive pickling -----------------------------------------------


def test_a_partial_failure_survives_pickling() -> None:
    """PartialFailure(message, results) keeps only ``message`` in ``args``: unpickling (a
    process pool, a task queue handing the error back) raises TypeError instead. Low; the
    same holds for CircuitOpen since before these commits."""
    import pickle

    error = PartialFailure("1 of 2 calls failed", [BackendUnavailable("node A"), None])
    again = pickle.loads(pickle.dumps(error))  # got: TypeError: missing 'results'
    assert len(again.results) == 2
