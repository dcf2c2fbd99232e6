"""Fixed sequences on the clock's edges, where memory and Redis (Redis Cluster too, near
time 0) must decide alike: steady traffic long enough that the Lua re-encodes its logs,
stale fields pruned on the server's time and never on a pinned one, clocks that step back,
one microsecond before a retry, refunds near time 0. The random replays are in
``test_differential.py``."""

from __future__ import annotations

import pytest

from freqguard import Decision, Guard, ManualClock, MemoryBackend, Policy, Rule, Strategy
from freqguard.backends.redis import RedisBackend
from tests.conftest import flush
from tests.reference import RATE_STRATEGIES
from tests.servers import RedisServer, state_keys


def test_long_runs_rebase_logs_and_still_decide_alike(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    """A log's offsets hold four windows from its base; steady traffic for far longer makes
    the Lua move the base and re-encode, which must change no decision."""
    flush([redis_server])
    policy = Policy("p", Rule("3 per 1 second", by="u"), Rule("5 per 2 seconds", by="u"))
    results = []
    for backend in (MemoryBackend(), redis_backend):
        clock = ManualClock(1_700_000_000)
        guard = Guard(backend, [policy], clock=clock)
        out = []
        for step in range(3_000):  # 90 s of hits 30 ms apart, the log never empty
            out.append(guard.hit("p", u="a"))
            clock.advance(0.03 + (step % 7) * 0.000_001)
        results.append(out)
    assert results[1] == results[0]
    assert sum(d.allowed for d in results[0]) > 200


def test_stale_fields_are_pruned_on_server_time_and_never_by_a_pinned_one(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    """A record's stale fields are pruned once it holds more than its prune threshold, by calls on
    the server's time; a pinned time may come back to where they matter (a replay, a test),
    so its calls prune nothing and the record goes whole with its TTL, as the memory twin's
    pinned states go."""
    flush([redis_server])
    policy = Policy("p", Rule("2 per 1 second", by=("u", "c")), Rule("500 per 1 hour", by="u"))
    clock = ManualClock(1_700_000_000)  # years before the server's time
    guard = Guard(redis_backend, [policy], clock=clock)
    reference = Guard(MemoryBackend(), [policy], clock=clock)
    for n in range(60):  # a new content every 0.2 s: each field matters for 1 s only
        assert guard.hit("p", u="a", c=f"c{n}") == reference.hit("p", u="a", c=f"c{n}")
        clock.advance(0.2)
    (key,) = state_keys(redis_server.client)
    assert redis_server.client.hlen(key) == 1 + 1 + 60  # meta, recipient log, every content
    server_time = Guard(redis_backend, [policy])  # its time is years later: all is stale
    assert server_time.hit("p", u="a", c="new").allowed
    # pruned: the meta field, the content just written and the recipient log it rewrote
    assert redis_server.client.hlen(key) == 3


def test_a_clock_that_steps_back_is_judged_at_the_logs_latest_time(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    flush([redis_server])
    policy = Policy("p", Rule("3 per 1 second", by="u"))
    results = []
    for backend in (MemoryBackend(), redis_backend):
        clock = ManualClock(1_700_000_000)
        guard = Guard(backend, [policy], clock=clock)
        out = [guard.hit("p", u="a")]
        for at in (1.0, 0.5, 1.2, 1.3):  # back to 0.5: its entry goes between 0 and 1.0
            clock.set(1_700_000_000 + at, backwards=True)  # steps back once
            out.append(guard.hit("p", u="a"))
        results.append(out)
    assert results[1] == results[0]
    assert results[0][2].receipt is not None
    assert results[0][2].receipt.times_us == (1_700_000_001_000_000,)
    assert results[0][-1].retry_after == 0.7  # 1.0 + 1 - 1.3: the 0.5 hit counts at 1.0


@pytest.mark.parametrize("strategy", RATE_STRATEGIES)
def test_an_expired_state_is_found_again_when_the_clock_steps_back(
    redis_backend: RedisBackend, redis_server: RedisServer, strategy: Strategy
) -> None:
    """Found by the differential test: memory deleted a state read after its expiry while
    Redis kept it, so after the clock stepped back they disagreed. Both now count it absent
    once expired and delete it only after the stale grace."""
    flush([redis_server])
    burst = 1 if strategy.uses_burst else None
    policy = Policy("p", Rule("1 per 1 second", by="u", strategy=strategy, burst=burst))
    results = []
    for backend in (MemoryBackend(), redis_backend):
        clock = ManualClock(1_700_000_000)
        guard = Guard(backend, [policy], clock=clock)
        out = [guard.hit("p", u="a")]
        # the state has just expired: absent (1 s on, or, for a rolling window, when the
        # hit's sub-window has left: the hit said when, as reset_after)
        clock.advance(out[0].reset_after)
        out += [guard.peek("p", u="a"), guard.hit("p", u="a", cost=0)]
        clock.set(1_700_000_000.5, backwards=True)  # back, within the grace: it counts again
        out += [guard.peek("p", u="a"), guard.hit("p", u="a")]
        results.append(out)
    assert results[1] == results[0]
    assert [d.allowed for d in results[0]] == [True, True, True, False, False]


@pytest.mark.parametrize("strategy", RATE_STRATEGIES)
def test_one_microsecond_before_the_retry_is_still_too_early(
    redis_backend: RedisBackend, redis_server: RedisServer, strategy: Strategy
) -> None:
    flush([redis_server])
    policy = Policy("p", Rule("3 per 1 second", by="u", strategy=strategy))
    results = []
    for backend in (MemoryBackend(), redis_backend):
        clock = ManualClock(1_700_000_000.25)
        guard = Guard(backend, [policy], clock=clock)
        out = [guard.hit("p", u="a") for _ in range(4)]
        retry = round(out[-1].retry_after * 1_000_000)
        clock.advance((retry - 1) / 1_000_000)
        out.append(guard.hit("p", u="a"))
        clock.advance(1 / 1_000_000)
        out.append(guard.hit("p", u="a"))
        results.append(out)
    assert results[1] == results[0]
    assert [d.allowed for d in results[0]] == [True, True, True, False, False, True]
    assert results[0][4].retry_after == 1e-6


@pytest.mark.parametrize("strategy", RATE_STRATEGIES)
def test_refunds_near_time_zero_decide_alike(
    redis_backend: RedisBackend,
    cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    strategy: Strategy,
) -> None:
    """A ``ManualClock()`` starts at 0: a token bucket's refund moved its ``last`` below 0,
    which the Lua packs unsigned (it wrapped, and retry/reset read ~2^56 µs) while the
    memory twin kept the negative number. Every packed time must stay >= 0 on both."""
    flush([redis_server, *redis_cluster])
    policy = Policy("p", Rule("3 per 1 second", by="u", strategy=strategy))
    results = []
    for backend in (MemoryBackend(), redis_backend, cluster_backend):
        clock = ManualClock()
        guard = Guard(backend, [policy], clock=clock)
        first = guard.hit("p", u="a")
        clock.advance(0.1)  # a third of its span has passed: two thirds go back
        out: list[object] = [first, guard.refund(first), guard.peek("p", u="a")]
        for step in range(40):
            hit = guard.hit("p", u="a", cost=1 + step % 2)
            out.append(hit)
            clock.advance((step % 5) * 0.07)
            if hit.allowed and step % 3 == 0:
                out.append(guard.refund(hit))
            elif step % 4 == 0:
                out.append(guard.refund("p", 1, u="a"))
            out.append(guard.peek("p", u="a"))
        results.append(out)
    for made in results:
        for decision in made:
            assert isinstance(decision, Decision)
            assert 0 <= decision.retry_after <= 1.1
            assert 0 <= decision.reset_after <= 1.1
    assert results[1] == results[0]
    assert results[2] == results[0]
