"""A long-running process that deploys a policy again and again (a configuration reloaded,
``on_error = { fallback = "..." }`` making a new fallback backend each time) and then closes
its guard: the old fallback backends the guard keeps must stay few (a receipt the user holds
aside), and those it keeps must be closed with it (``Guard.close``: "every fallback
backend"), or their connections stay open on the server.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable

import pytest

from freqguard import (
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.decorators.adapters import as_async
from freqguard.engine.plan import MOST_REPLACED
from freqguard.policy import Fallback
from tests.operations.failure_rig import Switch

START = 1_700_000_000.0
DEPLOYS = 3 * MOST_REPLACED


def _policy(deploy: int, fallback: object) -> Policy:
    """The policy as deploy ``deploy`` writes it: its limit changed (a reload that changed
    something), a new fallback backend."""
    return Policy("p", Rule(f"{10 + deploy}/minute", by="r"), on_error=Fallback(fallback, 1))


def _hit_sync(guard: Guard) -> Callable[[], str]:
    return lambda: guard.hit("p", r="a").source


def _hit_face(guard: Guard) -> Callable[[], str]:
    face = as_async(guard)  # an async def under @capped, an ASGI app on a sync guard
    return lambda: asyncio.run(face.hit("p", r="a")).source


@pytest.mark.parametrize("through", [_hit_sync, _hit_face], ids=["guard", "async-face"])
def test_deploys_with_a_new_fallback_each_keep_few_old_ones_alive(
    through: Callable[[Guard], Callable[[], str]],
) -> None:
    """Each deploy's fallback decides one hit (the store is down), no decision kept: the
    guard keeps at most the replaced plans it keeps for leases (:data:`MOST_REPLACED`,
    each holding its policy, whose Fallback holds its backend) and the current one. The
    async face of a sync guard (``as_async``) keeps every one it adapted: its
    ``_Adapted._made`` (and, for a sync-only backend, its ``_Adapter._made``) are keyed by
    id and never forget an old value."""
    clock = ManualClock(START)
    store = Switch(clock)
    store.down = True
    guard = Guard(store, [_policy(0, MemoryBackend(clock))], clock, breaker=None)
    hit = through(guard)
    alive: list[weakref.ref[MemoryBackend]] = []
    for deploy in range(1, DEPLOYS + 1):
        fallback = MemoryBackend(clock)
        alive.append(weakref.ref(fallback))
        guard.add_policy(_policy(deploy, fallback), replace=True)
        assert hit() == "fallback"
        del fallback
    gc.collect()
    assert sum(ref() is not None for ref in alive) <= MOST_REPLACED + 1
