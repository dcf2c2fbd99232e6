"""Where a fallback receipt's give-back goes (``Receipt.fallback``, ``Failover.given``,
``ops.taken_on``), written failing by a third adversarial review, on an injected clock (no
sleeps), the store a real MemoryBackend behind the switch of failure_rig."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Sequence

import pytest

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.decorators.adapters import as_async
from freqguard.script.calls import Reply, ScriptCall
from tests.operations.failure_rig import Switch

START = 1_700_000_000.0
RULE = Rule("4/minute", by="r", name="per-minute")


class Redeployed(Switch):
    """A store that fails a batch after the policy was replaced meanwhile: a deploy (a
    config reload in another thread, or another task) landing while the batch is out."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.guard: Guard | None = None
        self.then: Policy | None = None

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        if self.guard is not None and self.then is not None:
            self.guard.add_policy(self.then, replace=True)
            self.then = None
        return super().execute_many(calls)


@pytest.mark.parametrize("now", ["allow", "another"])
def test_a_hit_many_rerun_on_the_fallback_names_the_fallback_it_ran_on(now: str) -> None:
    """hit_many reads the policy's fallback (``on_failure``) when the batch is made, and the
    backend its receipts name (``failover.given(plan)``) only when the failed hits are run
    again there, after the store's batch failed. A deploy while the batch was out (the
    policy's ``on_error`` now "allow", or another backend) makes the receipts name what
    the policy has now, not the backend that took the units: the refund drives "allow" as
    a backend (AttributeError 'str' object has no attribute 'execute_many'), or goes to
    the other backend, a refund of nothing, while the first fallback keeps the unit.
    Before c3e3b25 ``settle_many`` marked them with the backend it ran them on."""
    clock = ManualClock(START)
    first = MemoryBackend(clock)
    store = Redeployed(clock)
    store.down = True
    guard = Guard(store, [Policy("p", RULE, on_error=first)], clock, breaker=None)
    store.guard = guard
    store.then = Policy("p", RULE, on_error=MemoryBackend(clock) if now == "another" else now)
    (decision,) = guard.hit_many("p", [{"r": "a"}])
    assert (decision.allowed, decision.source) == (True, "fallback")
    guard.refund(decision)  # got: AttributeError, or a refund on the other backend
    on_first = Guard(first, [Policy("p", RULE)], clock)
    assert on_first.peek("p", r="a").remaining == 4  # the unit it took there is back


@pytest.mark.parametrize("how", ["release", "refund"])
def test_a_pickled_fallback_lease_goes_back_through_the_async_face(how: str) -> None:
    """A copy of a lease taken on the fallback (pickled across a process pool: its
    receipt's ``fallback`` is None) given back through ``as_async(guard)`` (or an ``async
    def`` under ``@capped`` with a sync Guard). ``_give_back`` drives the receipt's
    fallback (``failover.drive(receipt.fallback)``) before it looks whether there is one:
    the face's adapter wraps None in a ThreadedBackend, AttributeError 'NoneType' object
    has no attribute 'clock', the lease held until it lapses. The sync guard's adapter
    passes None through, and the same copy goes back there."""
    clock = ManualClock(START)
    store = Switch(clock)
    store.down = True
    lease = Policy("p", Rule("4 concurrent", lease=60, name="cc"), on_error=MemoryBackend(clock))
    guard = Guard(store, [lease], clock)
    view = as_async(guard)
    copy = pickle.loads(pickle.dumps(guard.take_lease("p")))
    assert (copy.source, copy.receipt and copy.receipt.fallback) == ("fallback", None)
    given = asyncio.run(getattr(view, how)(copy))  # got: AttributeError
    assert given.source == "fallback"
    assert guard.peek("p").remaining == 4  # none held
