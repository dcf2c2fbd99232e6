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
    AsyncGuard,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    async_backend_from_url,
    backend_from_url,
)
from freqguard.decorators.adapters import as_async
from freqguard.engine.plan import MOST_REPLACED
from freqguard.policy import Fallback
from tests import servers
from tests.operations.failure_rig import Switch
from tests.servers import RedisServer

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


def _named(server: RedisServer, name: str) -> int:
    return sum(1 for c in server.client.client_list() if c["name"] == name)


def _closed(server: RedisServer, name: str) -> None:
    servers.wait_for(lambda: _named(server, name) == 0, f"connections named {name}, closed")


def test_closing_a_guard_closes_the_fallback_a_deploy_replaced(redis_server: RedisServer) -> None:
    """A configuration's fallback (a RedisBackend made from its URL) replaced by a deploy
    that changed the policy: the old plan is kept (a lease taken under it goes back by it),
    and with it the old backend, which ``Guard.close`` does not close (``Failover.backends``
    lists the current fallbacks only): its connection stays open after the guard closed."""
    clock = ManualClock(START)
    store = Switch(clock)
    store.down = True
    old = backend_from_url(f"{redis_server.url}/0?client_name=fg-old")
    guard = Guard(store, [_policy(0, old)], clock, breaker=None)
    assert guard.hit("p", r="a").source == "fallback"  # the old fallback connected
    del old
    new = backend_from_url(f"{redis_server.url}/0?client_name=fg-new")
    guard.add_policy(_policy(1, new), replace=True)
    assert guard.hit("p", r="a").source == "fallback"
    del new
    assert _named(redis_server, "fg-old") == 1
    gc.collect()  # nothing but the guard holds the old backend
    guard.close()
    _closed(redis_server, "fg-new")
    assert _named(redis_server, "fg-old") == 0


def test_closing_an_async_guard_closes_the_fallback_a_deploy_replaced(
    redis_server: RedisServer,
) -> None:
    """The same for an AsyncGuard, with the policy's rules unchanged (only the fallback
    made again): the guard keeps no old plan, yet ``aclose`` never closes the old backend,
    and its connection stays open until a garbage collection finds the backend's cycles
    (then redis-py warns ``ResourceWarning: unclosed Connection``)."""
    clock = ManualClock(START)

    def same(fallback: object) -> Policy:
        return Policy("p", Rule("10/minute", by="r"), on_error=Fallback(fallback, 1))

    async def main() -> None:
        store = Switch(clock)
        store.down = True
        old = async_backend_from_url(f"{redis_server.url}/0?client_name=fg-aold")
        left = weakref.ref(old)
        guard = AsyncGuard(store, [same(old)], clock, breaker=None)
        assert (await guard.hit("p", r="a")).source == "fallback"
        del old
        new = async_backend_from_url(f"{redis_server.url}/0?client_name=fg-anew")
        guard.add_policy(same(new), replace=True)
        assert (await guard.hit("p", r="a")).source == "fallback"
        del new
        try:
            await guard.aclose()
            _closed(redis_server, "fg-anew")
            assert _named(redis_server, "fg-aold") == 0
        finally:  # not to leave it to a later test's garbage collection (a warning there)
            leftover = left()
            if leftover is not None:
                await leftover.aclose()

    asyncio.run(main())
