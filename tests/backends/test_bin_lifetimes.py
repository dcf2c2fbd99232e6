"""How long records shared in bins live, and their bin: stale records swept on the
server's time only, an emptied record taken out, a newer release's record refused and an
unreadable or cut short one dropped (as a hash's are), and the bin's TTL the longest its
records need, on pinned clocks out of order, under limits for ever, without its meta field.
The rig: ``tests/backends/bin_rig.py``.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from redis import Redis

from freqguard import BackendUnavailable, Guard, ManualClock, Policy, Rate, Rule, Strategy
from freqguard.backends.redis import RedisBackend
from freqguard.script.contract import BIN_LAYOUT, LAYOUT_STAMPS
from freqguard.script.keys import raw_digest
from tests.backends.bin_rig import DbClient, P
from tests.conftest import START, flush
from tests.servers import RedisServer, state_keys


def test_stale_records_are_swept_on_server_time_and_never_by_a_pinned_one(
    redis_server: RedisServer, db1: Any
) -> None:
    """Records written at a pinned time years before the server's stay (a pinned time may come
    back to them); the first record a call on the server's time adds past the bin's prune
    threshold sweeps every stale one, and the bin's TTL becomes its live records'."""
    flush([redis_server])
    backend = RedisBackend(Redis(port=redis_server.port, db=1), bins=1)
    policy = Policy("p", Rule("2 per 1 second", by="u"), Rule("3 per 1 minute", by="u"))
    pinned = Guard(backend, [policy], clock=ManualClock(START))
    forever = Rate(9, timedelta(seconds=1))
    pinned.set_limit("p", policy.rules[0].id, forever, u="kept")  # held for ever
    for n in range(40):
        assert pinned.hit("p", u=f"r{n}").allowed
    (bin_key,) = state_keys(db1)
    assert db1.hlen(bin_key) == 1 + 41  # the bin's meta field, every record
    assert db1.pttl(bin_key) == -1  # the limit for ever
    live = Guard(backend, [policy])  # the server's time: years later, all is stale
    assert live.hit("p", u="new").allowed
    assert db1.hlen(bin_key) == 3  # the meta field, the record just written, the one held
    assert db1.pttl(bin_key) == -1
    assert live.limits_for("p", u="kept")[policy.rules[0].id] == forever
    live.clear_limit("p", policy.rules[0].id, u="kept")
    assert 0 < db1.pttl(bin_key) <= 61_000 + 2_000 + 2_000  # a minute, the slack, the grace
    for n in range(3):  # what was swept is absent; the new record counts
        assert live.hit("p", u=f"r{n}").allowed
    assert [live.hit("p", u="new").allowed for _ in range(2)] == [True, False]
    backend.close()


def test_a_limit_for_ever_keeps_its_bin_and_clearing_it_lets_the_bin_expire(
    redis_server: RedisServer, db1: Any
) -> None:
    flush([redis_server])
    backend = RedisBackend(Redis(port=redis_server.port, db=1), bins=1)
    policy = Policy("p", Rule("2 per 1 second", by="u", name="r"))
    guard = Guard(backend, [policy])
    guard.hit("p", u="a")
    guard.hit("p", u="b")
    (bin_key,) = state_keys(db1)
    assert db1.pttl(bin_key) > 0
    guard.set_limit("p", "r", Rate(9, timedelta(seconds=1)), u="a")  # for ever
    assert db1.pttl(bin_key) == -1
    guard.hit("p", u="b")  # another record's write keeps it so
    assert db1.pttl(bin_key) == -1
    assert guard.limits_for("p", u="a") == {"r": Rate(9, timedelta(seconds=1))}
    guard.clear_limit("p", "r", u="a")
    assert 0 < db1.pttl(bin_key) <= 1_000 + 100 + 2_000
    assert guard.limits_for("p", u="a") == {"r": policy.rules[0].rate}
    guard.set_limit("p", "r", None, ttl=30, u="b")  # a limit for a while holds it that long
    assert 29_000 < db1.pttl(bin_key) <= (30_000 + 1_000) * 9 // 8 + 2_000  # slack, grace
    backend.close()


def test_an_emptied_record_leaves_its_bin_and_the_last_one_takes_it(
    redis_server: RedisServer, db1: Any
) -> None:
    flush([redis_server])
    backend = RedisBackend(Redis(port=redis_server.port, db=1), bins=1)
    guard = Guard(backend, [Policy("p", Rule("2 per 1 second", by="u"))])
    guard.hit("p", u="a")
    guard.hit("p", u="b")
    (bin_key,) = state_keys(db1)
    guard.reset("p", u="a")
    assert db1.hlen(bin_key) == 2
    guard.reset("p", u="b")
    assert state_keys(db1) == []
    backend.close()


def test_a_newer_record_is_refused_and_an_unreadable_one_dropped(
    redis_server: RedisServer, db1: Any
) -> None:
    flush([redis_server])
    backend = RedisBackend(Redis(port=redis_server.port, db=1), bins=1)
    guard = Guard(backend, [Policy("p", Rule("1 per 1 minute", by="u"))])
    guard.hit("p", u="a")
    ((bin_key, rid),) = [(k, n) for k in state_keys(db1) for n in db1.hkeys(k) if n]
    blob = db1.hget(bin_key, rid)
    assert blob is not None
    newer = bytes([LAYOUT_STAMPS + BIN_LAYOUT + 1]) + blob[1:]
    db1.hset(bin_key, rid, newer)
    with pytest.raises(
        BackendUnavailable, match=f"layout {BIN_LAYOUT + 1}, newer than the {BIN_LAYOUT}"
    ):
        guard.hit("p", u="a")
    assert db1.hget(bin_key, rid) == newer  # untouched
    db1.hset(bin_key, rid, b"\x01garbage")
    assert guard.hit("p", u="a").allowed  # dropped, decided as absent (and logged)
    assert db1.hget(bin_key, rid)[0] == LAYOUT_STAMPS + BIN_LAYOUT  # written afresh
    assert not guard.hit("p", u="a").allowed
    backend.close()


# -- found by review: TTLs on a pinned time, strings cut short ---------------------------


def _binned_and_hashed(
    db_client: DbClient, policy: Policy, *clocks: ManualClock
) -> list[list[Guard]]:
    """Guards on a binned backend (db 1, one bin) and a hash-per-record one (db 2)."""
    return [
        [Guard(RedisBackend(db_client(db), bins=n), [policy], clock=c) for c in clocks]
        for db, n in ((1, 1), (2, 0))
    ]


def _covers(db_client: DbClient, db1: Any, u: str) -> None:
    """The bin's TTL (db 1) is at least what ``u``'s own hash (db 2) keeps, within 1 s."""
    (bin_key,) = state_keys(db1)
    assert db1.pttl(bin_key) >= db_client(2).pttl(f"fg:{{{u}}}:p") - 1000


def test_a_pinned_record_behind_the_bins_expiry_is_still_covered(
    redis_server: RedisServer, db1: Any, db_client: DbClient
) -> None:
    """Pinned times out of order across recipients: the second record's TTL needs an hour,
    the first's ten minutes; the bin must keep the longest."""
    flush([redis_server])
    policy = Policy("p", Rule("86400 per 1 day", by="u", strategy=Strategy.GCRA))
    (ba, bb), (ha, hb) = _binned_and_hashed(
        db_client, policy, ManualClock(START + 3600), ManualClock(START)
    )
    for first, second in ((ba, bb), (ha, hb)):
        first.hit("p", u="a")
        second.hit("p", u="b", cost=3000)
    _covers(db_client, db1, "b")
    for _first, second in ((bb, ba), (hb, ha)):  # the other order: never shortened
        second.hit("p", u="a")
    _covers(db_client, db1, "b")


def test_a_pinned_call_ahead_does_not_cut_a_server_time_records_ttl(
    redis_server: RedisServer, db1: Any, db_client: DbClient
) -> None:
    flush([redis_server])
    policy = Policy("p", Rule("86400 per 1 day", by="u", strategy=Strategy.GCRA))
    ahead = ManualClock(time.time() + 3600)
    for db, bins in ((1, 1), (2, 0)):
        backend = RedisBackend(db_client(db), bins=bins)
        Guard(backend, [policy], clock=ahead).hit("p", u="a")
        Guard(backend, [policy]).hit("p", u="b", cost=3000)
    _covers(db_client, db1, "b")


def test_clearing_a_limit_for_ever_on_a_pinned_time_lets_the_bin_expire(
    redis_server: RedisServer, db1: Any, db_client: DbClient
) -> None:
    flush([redis_server])
    policy = Policy("p", Rule("2 per 1 second", by="u", name="r"))
    ((binned,), (hashed,)) = _binned_and_hashed(db_client, policy, ManualClock(START))
    for guard in (binned, hashed):
        guard.hit("p", u="a")
        guard.set_limit("p", "r", Rate(9, timedelta(seconds=1)), u="a")
        guard.clear_limit("p", "r", u="a")
    (bin_key,) = state_keys(db1)
    assert db_client(2).pttl("fg:{a}:p") > 0
    assert db1.pttl(bin_key) > 0


@pytest.mark.parametrize("blob", [b"\xf4", b"\xf4\0\0\0", b"\xf4" + bytes(17) + b"\x0b"])
def test_a_record_cut_short_is_dropped_as_a_hashs_bad_meta_field_is(
    redis_server: RedisServer, db1: Any, db_client: DbClient, blob: bytes
) -> None:
    flush([redis_server])
    guard = Guard(RedisBackend(db_client(1), bins=1), [P])
    assert guard.hit("p", u="a").allowed
    (bin_key,) = state_keys(db1)
    db1.hset(bin_key, raw_digest("a"), blob)
    assert guard.hit("p", u="a").allowed  # decided as absent
    assert [guard.hit("p", u="a").allowed for _ in range(2)] == [True, False]


def test_a_bad_record_in_a_bin_fails_no_sweep(
    redis_server: RedisServer, db1: Any, db_client: DbClient
) -> None:
    """A sweep reads every record: one cut short must not fail (after writing) every call
    that sweeps; it goes, as a stale record does. A newer release's record stays, and does
    not hold the bin for ever."""
    flush([redis_server])
    guard = Guard(RedisBackend(db_client(1), bins=1), [P])
    guard.hit("p", u="a")
    guard.hit("p", u="b")
    (bin_key,) = state_keys(db1)
    db1.hset(bin_key, raw_digest("a"), b"\xf4\0\0")
    db1.hset(bin_key, raw_digest("b"), bytes([LAYOUT_STAMPS + BIN_LAYOUT + 1]) + bytes(20))
    for n in range(40):
        assert guard.hit("p", u=f"r{n}").allowed
    assert db1.hget(bin_key, raw_digest("a")) is None
    assert db1.hget(bin_key, raw_digest("b")) is not None
    assert db1.pttl(bin_key) > 0


# -- found by the second review -------------------------------------------------------------


def test_a_sweep_on_a_pinned_time_never_shortens_the_bins_ttl(
    redis_server: RedisServer, db1: Any, db_client: DbClient
) -> None:
    """A change of limits on a pinned clock that moved on recomputed the TTL from that clock:
    shorter than what an earlier record still needs."""
    flush([redis_server])
    policy = Policy("p", Rule("1 per 1 hour", by="u", strategy=Strategy.GCRA, name="r"))
    clock = ManualClock(START)
    ((binned,), (hashed,)) = _binned_and_hashed(db_client, policy, clock)
    binned.hit("p", u="a")
    hashed.hit("p", u="a")
    clock.advance(59 * 60)
    for guard in (binned, hashed):
        guard.set_limit("p", "r", Rate(5, timedelta(hours=1)), ttl=1, u="b")
    _covers(db_client, db1, "a")


def test_a_bin_without_its_meta_field_keeps_its_records(
    redis_server: RedisServer, db1: Any, db_client: DbClient
) -> None:
    """A meta field lost (or unreadable): no write may cut the TTL to its own need, and
    deleting an absent record must not take the bin with the others."""
    flush([redis_server])
    policy = Policy("p", Rule("86400 per 1 day", by="u", strategy=Strategy.GCRA, name="r"))
    guard = Guard(RedisBackend(db_client(1), bins=1), [policy])
    guard.hit("p", u="a", cost=3000)  # needs about 3000 s
    (bin_key,) = state_keys(db1)
    long = 3_000_000  # ms: what a's record needs, whatever the slack
    db1.hdel(bin_key, "")
    guard.clear_limit("p", "r", u="b")  # an absent record: nothing to delete
    assert db1.exists(bin_key)
    guard.hit("p", u="b")  # needs a second
    assert db1.pttl(bin_key) >= long - 1000
    db1.hset(bin_key, "", b"\xff" * 12)  # a deadline past NEVER
    guard.hit("p", u="c", cost=3500)
    assert db1.pttl(bin_key) >= 3_400_000
