"""The deny cache and the observers, where they used to go wrong: a cache keyed on the
caller's keyword order, holding whole message bodies, refilled by a denial older than a
refund, expiring on a wall clock; observers whose errors reached the caller."""

from __future__ import annotations

import asyncio
import logging
import tracemalloc
from typing import Any

import pytest
from redis import Redis

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    CapExceeded,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    RedisBackend,
    Rule,
)
from freqguard.denycache import DenyCache
from freqguard.failure import Breaker
from tests.conftest import flush
from tests.faults import Gate
from tests.operations.failure_rig import Switch
from tests.servers import RedisServer

PAIR = Policy("pair", Rule("1/minute", by=("recipient", "content"), name="per-pair"))


def test_the_cache_key_names_each_value_by_its_dimension_not_by_keyword_order(
    clock: ManualClock,
) -> None:
    guard = Guard(MemoryBackend(), [PAIR], clock, deny_cache=10)
    assert guard.hit("pair", recipient="bob", content="alice").allowed
    assert guard.hit("pair", recipient="bob", content="alice").source == "backend"  # denied
    swapped = guard.hit("pair", content="bob", recipient="alice")  # another pair entirely
    assert (swapped.allowed, swapped.source) == (True, "backend")


def test_a_reset_in_another_keyword_order_forgets_the_denial(clock: ManualClock) -> None:
    guard = Guard(MemoryBackend(), [PAIR], clock, deny_cache=10)
    guard.hit("pair", recipient="bob", content="hi")
    assert guard.hit("pair", recipient="bob", content="hi").source == "backend"
    assert guard.hit("pair", recipient="bob", content="hi").source == "deny-cache"
    guard.reset("pair", content="hi", recipient="bob")
    assert guard.hit("pair", recipient="bob", content="hi").allowed


def test_an_entry_holds_a_digest_of_the_context_not_its_values(clock: ManualClock) -> None:
    """20k denials of 10 KB bodies held 238 MB; an entry's size must not grow with them."""
    guard = Guard(MemoryBackend(), [PAIR], clock, deny_cache=1000)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(300):  # each body is the caller's, gone once its hits are answered
            body = f"{n:05d}" + "x" * 10_000
            guard.hit("pair", recipient="bob", content=body)
            assert guard.hit("pair", recipient="bob", content=body).source == "backend"
        del body
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert guard._denials.cache is not None
    assert len(guard._denials.cache) == 300
    # the store keeps its states (digests, ~300 B each); the cache must not keep 10 KB bodies
    assert held < 300 * 3_000, held


def test_a_denial_decided_before_a_refund_is_not_cached_after_it() -> None:
    """The hit is denied by the store; before its answer comes back, a refund through the
    guard frees a unit and clears the cache; then the denial arrived and was cached, and
    the freed unit was refused for the whole retry_after."""

    async def main() -> tuple[Decision, Decision]:
        clock = ManualClock(1000)
        gate = Gate(MemoryBackend(), hold=3, sent_first=True)
        one = Policy("one", Rule("1/minute", by="u"))
        guard = AsyncGuard(gate, [one], clock, deny_cache=10)
        first = await guard.hit("one", u="x")  # batch 1
        await guard.hit("one", u="x")  # batch 2: denied, cached
        clock.advance(0.5)
        guard._denials.cache.forget("one")  # type: ignore[union-attr] # as if it had expired
        late = asyncio.ensure_future(guard.hit("one", u="x"))  # batch 3: held
        await gate.reached.wait()
        await guard.refund(first)  # frees the unit, forgets the denials
        gate.release.set()
        denied = await late
        return denied, await guard.hit("one", u="x")

    denied, after = asyncio.run(main())
    assert not denied.allowed
    assert (after.allowed, after.source) == (True, "backend")


def test_the_cache_expires_on_a_monotonic_clock_not_the_clients_wall_clock(
    redis_server: RedisServer,
) -> None:
    """On Redis the server's clock decides; the client's wall clock stepping back an hour
    kept a cached denial for an hour more."""
    flush([redis_server])
    wall, monotonic = ManualClock(1_700_000_000), ManualClock(50)
    backend = RedisBackend(Redis(port=redis_server.port), clock=wall)
    one = Policy("one", Rule("1 per 2 seconds", by="u"))
    cache = DenyCache(10, clock=monotonic.now)
    with Guard(backend, [one], deny_cache=cache) as guard:
        assert guard.hit("one", u="x").allowed
        denied = guard.hit("one", u="x")
        assert (denied.allowed, denied.source) == (False, "backend")
        assert guard.hit("one", u="x").source == "deny-cache"
        wall.set(1_700_000_000 - 3600, backwards=True)  # an NTP step on the client
        assert guard.hit("one", u="x").source == "deny-cache"
        # 1 µs past: the cache adds the retry to a float time, which may land a few ns past
        # the µs the clock reaches (about one retry_after in 200, by the server's timing)
        monotonic.advance(denied.retry_after + 0.000001)
        assert guard.hit("one", u="x").source == "backend"  # asked again, on time


def test_a_pinned_guard_expires_its_cache_on_its_own_clock(clock: ManualClock) -> None:
    guard = Guard(MemoryBackend(), [PAIR], clock, deny_cache=10)
    guard.hit("pair", recipient="a", content="b")
    denied = guard.hit("pair", recipient="a", content="b")
    assert guard.hit("pair", recipient="a", content="b").source == "deny-cache"
    clock.advance(denied.retry_after)
    assert guard.hit("pair", recipient="a", content="b").allowed


class Raising:
    def __init__(self) -> None:
        self.calls = 0

    def decided(self, decision: Decision, context: object, seconds: float) -> None:
        self.calls += 1
        raise RuntimeError("observer broke")

    def failed(self, error: BackendUnavailable, policy: str, backend: str) -> None:
        self.calls += 1
        raise RuntimeError("observer broke")


SMS = Policy("sms", Rule("2/minute", by="recipient"), Rule("9/minute", by="content"))


@pytest.mark.parametrize("on_error", ["raise", "allow", "deny"])
def test_an_observer_that_raises_changes_no_decision_and_no_outcome(
    clock: ManualClock, on_error: str, caplog: pytest.LogCaptureFixture
) -> None:
    raising = Raising()
    store = Switch(clock)
    guard = Guard(store, [SMS], clock, on_error=on_error, observers=[raising])
    ctx: dict[str, Any] = {"recipient": "r", "content": "c"}
    with caplog.at_level(logging.ERROR, logger="freqguard"):
        assert guard.hit("sms", **ctx).allowed  # consumed, then the observer raised
        assert [d.allowed for d in guard.hit_many("sms", [ctx, ctx])] == [True, False]
        with pytest.raises(CapExceeded):  # told to the observers as a denial: it raised
            guard.acquire("sms", timeout=0, **ctx)
        assert guard.acquire("sms", timeout=0, recipient="q", content="c").allowed
        store.down = True
        if on_error == "raise":
            with pytest.raises(BackendUnavailable):
                guard.hit("sms", **ctx)
        else:
            answer = guard.hit("sms", **ctx)
            assert answer.source == ("fail-open" if on_error == "allow" else "fail-closed")
        store.down = False
        assert guard.peek("sms", **ctx).remaining == 0  # two counted, as without observers
    assert raising.calls >= 4
    logged = [r for r in caplog.records if "observer broke" in r.getMessage()]
    assert len(logged) == 2  # once per observer and method, not once per call


def test_an_observer_that_raises_keeps_the_breaker_counting(clock: ManualClock) -> None:
    store = Switch(clock)
    breaker = Breaker(failures=2, clock=clock)
    guard = Guard(store, [SMS], clock, on_error="allow", breaker=breaker, observers=[Raising()])
    store.down = True
    for _ in range(3):
        assert guard.hit("sms", recipient="r", content="c").source == "fail-open"
    assert breaker.state == "open"
    assert store.calls == 2  # the third was not sent: the circuit is open


def test_an_async_observer_that_raises_changes_nothing_either(clock: ManualClock) -> None:
    async def main() -> list[bool]:
        guard = AsyncGuard(MemoryBackend(), [SMS], clock, observers=[Raising()])
        out = [(await guard.hit("sms", recipient="r", content="c")).allowed for _ in range(3)]
        many = await guard.hit_many("sms", [{"recipient": "s", "content": "c"}])
        return out + [d.allowed for d in many]

    assert asyncio.run(main()) == [True, True, False, True]
