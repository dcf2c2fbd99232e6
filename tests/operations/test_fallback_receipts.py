"""Where a fallback receipt's give-back goes (``Receipt.fallback``, ``Failover.given``,
``ops.taken_on``), written failing by a third adversarial review, on an injected clock (no
sleeps), the store a real MemoryBackend behind the switch of failure_rig."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
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
