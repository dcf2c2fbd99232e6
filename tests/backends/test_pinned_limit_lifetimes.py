"""Pinned-time divergences between the memory twin and Redis: places where, on a Guard's
pinned clock, Redis keeps a record for less real time than the memory twin keeps its states
and limits (the pinned grace, ten minutes of real time from each write), so that a
differential replay finds a state on one store and none on the other once a millisecond
of real time passes (a reset then writes its tombstone on one store only, and the next hit
is judged 1 µs apart). Deterministic: each asserts on the TTL the store sets, never sleeps.

A review's failing tests (stop 55): the first fix of records.lua ``limits_ttl`` (a change
of limits on a pinned time takes ``max(its TTL, PTTL)``) missed a record without a TTL: a
limit for ever PERSISTs the record, PTTL is then -1, and a change that ends the limit for
ever (a clear, or any change once a deploy dropped its rule) set the TTL from expiries far
behind the pinned time: 1 ms. Such a record now keeps the pinned grace from the change.
Bins are not affected (bins.lua ``sweep`` adds the pinned grace after its floor of 1 ms).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from redis import Redis
from redis.cluster import RedisCluster

from freqguard import Guard, ManualClock, MemoryBackend, Policy
from freqguard.backends.redis import RedisBackend
from tests.conftest import SMS, START
from tests.servers import RedisServer

RECORD = "fg:{a}:sms"
GRACE_MS = 590_000  # the pinned grace (600 s) less a margin: what memory keeps at least
DAYS = 3 * 86_400  # far past every state's and limit's expiry, in pinned time

#: every plain-record store: Functions, a Redis Cluster, EVAL scripts
KINDS = ("redis", "cluster", "scripts")


def _store(request: pytest.FixtureRequest, kind: str) -> tuple[RedisBackend, Callable[[str], int]]:
    """The ``kind`` of store (on empty servers) and the PTTL of a key on it."""
    backend: RedisBackend = request.getfixturevalue(f"{kind}_backend")
    if kind == "cluster":
        nodes: list[RedisServer] = request.getfixturevalue("redis_cluster")
        client: Redis | RedisCluster = RedisCluster(host="127.0.0.1", port=nodes[0].port)
    else:
        server = request.getfixturevalue("redis_server" if kind == "redis" else "scripts_server")
        client = server.client
    return backend, lambda key: int(client.pttl(key))


def _memory_holds_its_states(steps: Callable[[Guard, ManualClock], None]) -> int:
    """How many states the memory twin holds after ``steps`` (on a pinned time)."""
    memory = MemoryBackend()
    clock = ManualClock(START)
    steps(Guard(memory, [SMS], clock=clock), clock)
    return len(memory)


def _clear_after_a_limit_for_ever(guard: Guard, clock: ManualClock) -> None:
    guard.hit("sms", recipient="a", content="x")
    guard.set_limit("sms", "rcpt-1d", "100/day", recipient="a")  # for ever: PERSIST
    clock.advance(DAYS)
    guard.clear_limit("sms", "rcpt-1d", recipient="a")


@pytest.mark.parametrize("kind", KINDS)
def test_clearing_a_limit_for_ever_on_a_pinned_time_never_shortens_the_records_life(
    request: pytest.FixtureRequest, kind: str
) -> None:
    """records.lua limits_ttl: ``max(ttl_ms, PTTL)`` with PTTL -1 (the record had no TTL)
    keeps a TTL from the states' expiry three pinned days back: 1 ms. The memory twin still
    holds every state (ten minutes of real time from its write): a reset a millisecond
    later writes its tombstones on memory only."""
    backend, pttl = _store(request, kind)
    clock = ManualClock(START)
    guard = Guard(backend, [SMS], clock=clock)
    guard.hit("sms", recipient="a", content="x")
    guard.set_limit("sms", "rcpt-1d", "100/day", recipient="a")
    assert pttl(RECORD) == -1  # a limit for ever keeps the record for ever
    clock.advance(DAYS)
    guard.clear_limit("sms", "rcpt-1d", recipient="a")
    ttl = pttl(RECORD)  # read first: it is 1 ms
    assert _memory_holds_its_states(_clear_after_a_limit_for_ever) == 2  # both logs
    assert ttl > GRACE_MS


@pytest.mark.parametrize("kind", KINDS)
def test_a_record_of_limits_only_keeps_its_life_when_its_limit_for_ever_goes(
    request: pytest.FixtureRequest, kind: str
) -> None:
    """The same with no state at all: a limit with a ttl (kept once expired, on a pinned
    time, as the memory twin keeps it) beside one for ever; the one for ever cleared three
    pinned days later leaves the record 1 ms, where memory keeps the expired limit ten
    minutes (a clock set back before its expiry finds it there, not on Redis)."""
    backend, pttl = _store(request, kind)
    clock = ManualClock(START)
    guard = Guard(backend, [SMS], clock=clock)
    guard.set_limit("sms", "rcpt-1m", "1/second", recipient="a", ttl=1)
    guard.set_limit("sms", "rcpt-1d", None, recipient="a")  # exempt, for ever: PERSIST
    assert pttl(RECORD) == -1
    clock.advance(DAYS)
    guard.clear_limit("sms", "rcpt-1d", recipient="a")
    assert pttl(RECORD) > GRACE_MS


def test_a_clear_after_a_deploy_dropped_a_limit_for_ever_never_shortens_the_records_life(
    request: pytest.FixtureRequest,
) -> None:
    """A deploy removed the rule that held a limit for ever: the next change of limits, a
    clear of another rule's that was never set included, drops it (change_limits keeps only
    the policy's tags), so the record's PERSIST ends, and its TTL comes from expiries three
    pinned days back: 1 ms (a set with a ttl would hold it that ttl from now)."""
    backend, pttl = _store(request, "redis")
    clock = ManualClock(START)
    guard = Guard(backend, [SMS], clock=clock)
    guard.hit("sms", recipient="a", content="x")
    guard.set_limit("sms", "rcpt-1d", "100/day", recipient="a")
    assert pttl(RECORD) == -1
    clock.advance(DAYS)
    deployed = Policy("sms", *(rule for rule in SMS.rules if rule.id != "rcpt-1d"))
    Guard(backend, [deployed], clock=clock).clear_limit("sms", "rcpt-1m", recipient="a")
    assert pttl(RECORD) > GRACE_MS
