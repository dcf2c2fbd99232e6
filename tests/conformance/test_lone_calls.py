"""A hit is prepared once (``Hits.hit``), driven by one loop (``Guard._run``) and finished
once (``Hits.hit_done``). A hit of a policy on one part, whose failure is raised, while the
breaker counts no failures, is one script call that ``_run`` sends alone (``aexecute``:
no batch around it, the hit's speed, see benchmarks/README.md); any other is an operation
driven step by step. Both are decided by ``PolicyPlan.decide`` and finished alike, so the
differential and model tests, which hit through ``Guard.hit``, hold both; this test holds
which is taken."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from freqguard import BackendUnavailable, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.script.calls import Reply, ScriptCall

ONE = Policy("one", Rule("5/minute", by="r"))
TWO = Policy("two", Rule("5/minute", by="r"), Rule("9/minute", by="c"))


class Counting(MemoryBackend):
    """A memory store that counts the calls sent alone and those sent in batches, and fails
    both while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.alone, self.batched, self.down = 0, 0, False

    def execute(self, call: ScriptCall) -> Reply:
        if self.down:
            raise BackendUnavailable("down", answered=False, sent=False)
        self.alone += 1
        return super().execute(call)

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        self.batched += 1
        self.alone -= len(calls)  # MemoryBackend's batch runs each through execute
        return super().execute_many(calls)


def test_a_hit_of_one_part_is_one_call_sent_alone_while_nothing_is_around_it() -> None:
    store = Counting()
    guard = Guard(store, [ONE, TWO], clock=ManualClock(1_000))
    assert guard.hit("one", r="a").allowed
    assert (store.alone, store.batched) == (1, 0)  # its one call, alone
    assert guard.hit("two", r="a", c="x").allowed
    assert (store.alone, store.batched) == (1, 2)  # an operation: a step a part
    assert guard._hits.hit("one", 1, {"r": "a"}, lone=True).call is not None
    assert guard._hits.hit("two", 1, {"r": "a", "c": "x"}, lone=True).call is None
    assert guard._hits.hit("one", 1, {"r": "a"}, lone=False).call is None
    allow = Guard(MemoryBackend(), [Policy("open", Rule("5/minute"), on_error="allow")])
    assert allow._hits.hit("open", 1, {}, lone=True).call is None  # on_error answers


def test_a_failing_lone_call_is_told_to_the_breaker_and_the_next_hit_is_driven() -> None:
    store = Counting()
    guard = Guard(store, [ONE], clock=ManualClock(1_000))
    store.down = True
    with contextlib.suppress(BackendUnavailable):
        guard.hit("one", r="a")
    assert guard.breaker is not None
    assert guard.breaker.counting  # told: the next hit is driven, and resets the count
    store.down = False
    assert not guard._accounting.quiet
    assert guard.hit("one", r="a").allowed
    assert guard._accounting.quiet
