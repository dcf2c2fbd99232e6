"""Written failing by a second adversarial review: the first failure of a node (the breaker
counting nothing yet) was accounted to the node named *after* the call, on the memory store
of tests/operations/test_failure_nodes (injected clock, no sleeps). A failure now names its node."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import pytest

from freqguard import AsyncGuard, BackendUnavailable, Guard, ManualClock
from freqguard.failure import Breaker
from freqguard.script.calls import Reply, ScriptCall
from tests.operations.test_failure_nodes import COOLDOWN, Nodes, P


class FailoverDuringAFailure(Nodes):
    """A call to a dead node whose replica is being promoted: the call fails (it went to the
    dead node), and meanwhile the client learns the new map (a Redis Cluster backend learns
    it on a lost node, ``learn_lost``), which names the replica from then on."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.owner: dict[str, str] = {}
        self.promoted: dict[str, str] = {}

    def node_of(self, call: ScriptCall) -> str:
        letter = super().node_of(call)
        return self.owner.get(letter, letter)

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        try:
            return super().execute_many(calls)
        finally:
            for call in calls:
                letter = Nodes.node_of(self, call)
                if letter in self.promoted:
                    self.owner[letter] = self.promoted[letter]  # the map learnt afresh


def _run(guard: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    got = getattr(guard, method)(*args, **kwargs)
    return asyncio.run(got) if asyncio.iscoroutine(got) else got


@pytest.mark.parametrize("on_error", ["raise", "allow"])  # the one-call path; the _run loop
def test_a_failure_is_not_counted_against_the_node_that_took_over(
    on_error: str, asynchronous: bool
) -> None:
    """The nodes of a step are named at admission only while the breaker counts; the first
    failure (nothing counted: the one-call path, or _finished with ``sent is step``) is
    accounted by naming the node again after the call (_store_failed / _account with
    nodes=None). The map learnt during the failing call names the promoted replica A2: A2's
    circuit opens (failures=1) and the healthy node that took over is refused."""
    clock = ManualClock()
    store = FailoverDuringAFailure(clock)
    breaker = Breaker(1, COOLDOWN, clock=clock.now)
    kind = AsyncGuard if asynchronous else Guard
    guard = kind(store, [P], clock, breaker=breaker, on_error=on_error)
    store.down = {"A"}
    store.promoted = {"A": "A2"}
    with contextlib.suppress(BackendUnavailable):
        _run(guard, "hit", "p", r="A1")  # sent to A, which is dead
    states = (breaker.state_of("A"), breaker.state_of("A2"))
    try:
        source = _run(guard, "hit", "p", r="A1").source  # now A2's: it serves
    except BackendUnavailable as exc:
        source = type(exc).__name__
    assert (source, states) == ("backend", ("open", "closed"))  # got: A2 open, CircuitOpen
