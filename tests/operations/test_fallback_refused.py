"""A hit_many whose failed hits run again on the fallback, and the fallback refuses them (an
ACL that allows its user only some keys: NOPERM, a ConfigError): the refusal is raised,
whatever ``on_error`` says, and, as a batch the store refuses in part, the batch leaves
nothing behind (docs/operations.md; design note 98). Written failing by the final review.

The store is a real MemoryBackend spread over nodes (``test_failure_nodes.Nodes``): a node
down fails its calls, the rest are applied; the fallback is another such store whose ACL
refuses a node's keys. On an injected clock."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from freqguard import AsyncGuard, ConfigError, Guard, ManualClock, Policy
from freqguard.script.calls import Reply, ScriptCall
from tests.operations.failure_rig import Switch
from tests.operations.test_failure_nodes import CAP, TWO, Nodes, P


def _hit_many(
    store: Switch | Nodes,
    policy: Policy,
    clock: ManualClock,
    batch: list[dict[str, str]],
    asy: bool,
) -> None:
    """``hit_many`` of ``batch`` on a guard (sync, or async run to completion) on ``store``."""
    if asy:
        face = AsyncGuard(store, [policy], clock, breaker=None)
        asyncio.run(face.hit_many(policy.name, batch))
    else:
        Guard(store, [policy], clock, breaker=None).hit_many(policy.name, batch)


def test_a_batch_the_fallback_refuses_gives_back_what_the_store_admitted(
    asynchronous: bool,
) -> None:
    """Node A of the store is down, B answers: B1 is admitted by the store, A1 is run again
    on the fallback, whose ACL refuses A's keys. The ConfigError is raised, and B1's unit,
    which the caller never saw, stays consumed on the store (got: remaining CAP - 1):
    ``settle_many`` raises the rerun's refusal with the store's admitted decisions in
    hand and gives nothing back."""
    clock = ManualClock()
    store, fallback = Nodes(clock), Nodes(clock)
    store.down, fallback.refused = {"A"}, {"A"}
    policy = Policy("p", *P.rules, on_error=fallback)
    batch = [{"r": "A1"}, {"r": "B1"}]
    with pytest.raises(ConfigError, match="NOPERM"):
        _hit_many(store, policy, clock, batch, asynchronous)
    assert fallback.calls["A"] == 1  # the failed hit went there, and was refused
    on_store = Guard(store.inner, [P], clock)
    assert on_store.peek("p", r="B1").remaining == CAP  # got: CAP - 1


class Dying(Switch):
    """A store of one node whose batch after ``lasts`` fails (mid-batch for a hit_many of a
    policy of two parts, which goes part by part, hit by hit), and that answers again
    after it: a blip, so that what the batch took there can be given back."""

    def __init__(self, clock: ManualClock, lasts: int) -> None:
        super().__init__(clock)
        self.lasts = lasts

    def execute_many(self, calls: Sequence[ScriptCall]) -> list[Reply]:
        self.down = self.calls == self.lasts
        return super().execute_many(calls)


def test_a_batch_the_store_dropped_midway_and_the_fallback_refuses_leaves_nothing(
    asynchronous: bool,
) -> None:
    """A store of one node, a policy of two parts: the first hit is admitted by the store
    (both its parts), then the store fails a call (a blip); the second hit is run again on
    the fallback, whose ACL refuses it. The ConfigError is raised and the first hit's
    units stayed consumed on the store (got: remaining CAP - 1 of per-r), a hit the
    caller never saw. (Were the store still down, they would stay: the strict side.)"""
    clock = ManualClock()
    store, fallback = Dying(clock, lasts=2), Nodes(clock)
    fallback.refused = {"B"}
    policy = Policy("two", *TWO.rules, on_error=fallback)
    batch = [{"r": "A1", "c": "A"}, {"r": "B1", "c": "B"}]
    with pytest.raises(ConfigError, match="NOPERM"):
        _hit_many(store, policy, clock, batch, asynchronous)
    assert fallback.calls["B"] == 1  # the failed hit went there, and was refused
    on_store = Guard(store.inner, [TWO], clock)
    assert on_store.peek("two", r="A1", c="A").remaining == CAP  # got: CAP - 1
