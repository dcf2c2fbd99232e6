"""Per-key limits in Redis: read by the one call that decides (one FCALL a hit, nothing
else), stored in the recipient's record (so on its slot), and kept exactly as long as they
matter: a limit for ever keeps the record, one with a ttl keeps it that long, and a record
left with neither states nor limits goes."""

from __future__ import annotations

import pytest
from redis import Redis

from freqguard import Guard, ManualClock
from freqguard.backends.redis import RedisBackend
from tests.conftest import SMS, START, flush
from tests.servers import RedisServer, state_keys

RECORD = "fg:{a}:sms"


def _calls(client: Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name: int(value["calls"]) for name, value in stats.items()}


def test_a_hit_under_a_limit_is_still_one_fcall_and_nothing_else(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    guard = Guard(redis_backend, [SMS])  # the server's time
    guard.set_limit("sms", "rcpt-1m", "100/minute", recipient="a")
    guard.set_limit("sms", "content-59s", None, recipient="a")
    guard.hit("sms", recipient="b", content="warm")  # the function loaded, the slots known
    client = redis_server.client
    client.config_resetstat()
    for i in range(30):
        guard.hit("sms", recipient="a" if i % 2 else "b", content=f"m{i % 3}")
    calls = _calls(client)
    assert calls.pop("cmdstat_fcall") == 30
    calls.pop("cmdstat_config|resetstat")
    # the rest are what the function itself runs (commandstats counts those too)
    assert set(calls) <= {f"cmdstat_{c}" for c in ("time", "hmget", "hset", "pexpire", "hdel")}
    assert calls["cmdstat_hmget"] == 30  # one read a hit: states, meta and limits at once


def test_limits_live_in_the_recipients_record(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    guard = Guard(redis_backend, [SMS])
    guard.set_limit("sms", "rcpt-1m", "100/minute", recipient="a")
    assert state_keys(redis_server.client) == [RECORD.encode()]
    assert redis_server.client.hkeys(RECORD) == [b""]  # the meta field holds them


def test_a_limit_for_ever_keeps_the_record_and_one_with_a_ttl_that_long(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    client = redis_server.client
    guard = Guard(redis_backend, [SMS])
    guard.hit("sms", recipient="a", content="x")
    state_ttl = client.pttl(RECORD)
    assert 86_400_000 < state_ttl < 100_000_000  # the day's log, with slack
    guard.set_limit("sms", "rcpt-1m", None, recipient="a")
    assert client.pttl(RECORD) == -1  # for ever
    for i in range(5):
        guard.hit("sms", recipient="a", content=f"m{i}")
    assert client.pttl(RECORD) == -1  # hits do not put a TTL back
    guard.set_limit("sms", "rcpt-1m", "1/second", recipient="a", ttl=3 * 86_400)
    assert 3 * 86_400_000 < client.pttl(RECORD) <= 3 * 86_400_000 * 33 / 32 + 2_000  # slack
    guard.clear_limit("sms", "rcpt-1m", recipient="a")
    assert abs(client.pttl(RECORD) - state_ttl) < 5_000  # the states' again
    guard.reset("sms", recipient="a")  # the recipient's own counts, then each content's
    guard.reset("sms", recipient="a", content="x")
    for i in range(5):
        guard.reset("sms", recipient="a", content=f"m{i}")
    guard.set_limit("sms", "rcpt-1d", "60/day", recipient="a")
    assert client.hkeys(RECORD) == [b""]  # the states are gone, the limit stays
    assert client.pttl(RECORD) == -1
    guard.clear_limit("sms", "rcpt-1d", recipient="a")
    assert state_keys(client) == []  # neither states nor limits: the record goes


@pytest.mark.parametrize("pinned", [True, False])
def test_clearing_what_was_never_set_writes_nothing(
    redis_backend: RedisBackend, redis_server: RedisServer, pinned: bool
) -> None:
    flush([redis_server])
    guard = Guard(redis_backend, [SMS], clock=ManualClock(START) if pinned else None)
    guard.clear_limit("sms", "rcpt-1m", recipient="a")
    assert state_keys(redis_server.client) == []


@pytest.mark.parametrize("change", ["clear", "set"])
def test_a_change_of_limits_on_a_pinned_time_never_shortens_the_records_life(
    redis_backend: RedisBackend, redis_server: RedisServer, change: str
) -> None:
    """Found by the messaging differential (flaky under load): on a pinned time an hour past
    its states' expiry, a change of limits set the record's TTL from the states' expiry in
    pinned time, 1 ms, where the memory twin keeps each state the pinned grace in real time
    from its write; a reset 1 ms later found no state to put its tombstone in place of, and
    the next hit was judged 1 µs earlier than on memory."""
    flush([redis_server])
    clock = ManualClock(START)
    guard = Guard(redis_backend, [SMS], clock=clock)
    guard.hit("sms", recipient="a", content="x")
    clock.advance(3 * 86_400)  # every state long expired, in pinned time
    if change == "clear":
        guard.clear_limit("sms", "rcpt-1m", recipient="a")
    else:
        guard.set_limit("sms", "rcpt-1m", "1/second", recipient="a", ttl=1)
    assert redis_server.client.pttl(RECORD) > 590_000  # the pinned grace, as on memory
