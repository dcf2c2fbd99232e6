"""Records layout 3 (bin layout 4) wrote, each state named by its 2-byte tag, after the swap
to this release: read where they are, moved under their 3-byte tags when written, the record
stamped ``MOVING_LAYOUT`` while an old name is left in it; its count, stamp, names and TTL kept
through every operation. The rig: ``tests/backends/upgrade_rig.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis import Redis

from freqguard import (
    BackendUnavailable,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
)
from freqguard.backends._library import LIBRARY
from freqguard.backends.redis import RedisBackend
from freqguard.script import calls
from freqguard.script.contract import (
    FIELD_HEAD,
    LAYOUT_STAMPS,
    MOVING_LAYOUT,
    OLD_TAG_BYTES,
    RECORD_LAYOUT,
)
from tests.backends.upgrade_rig import (
    RECORD,
    TAGS_0_2,
    _deploy,
    _meta,
    _OldCalls,
    _read_on_exactly,
    _upgrading,
)
from tests.conformance.test_differential import _unique
from tests.conftest import SMS, START, examples, flush
from tests.reference import RATE_STRATEGIES
from tests.servers import RedisServer, state_keys


def test_the_tags_fixture_writes_layout_3_and_bin_layout_4() -> None:
    """policy-0.2-tags.lua: this release's library as it was before layout 6 (commit
    d135715), whose states the client named by 2-byte tags."""
    assert "local RECORD_LAYOUT = 3 " in TAGS_0_2
    assert "local BIN_LAYOUT = 4\n" in TAGS_0_2
    assert "MOVING_LAYOUT" not in TAGS_0_2
    assert "MOVING_LAYOUT" in LIBRARY


@pytest.mark.parametrize("store", ["redis", "binned"])
@_upgrading(RATE_STRATEGIES, 40)  # the tags fixture decides every strategy of this release
def test_records_with_states_under_their_old_names_are_read_on_exactly(
    store: str,
    request: pytest.FixtureRequest,
    redis_server: RedisServer,
    rules: list[Rule],
    pool: list[dict[str, str]],
    before: list[Any],
    after: list[Any],
) -> None:
    """Records written by layout 3 (bin layout 4), every state under its 2-byte tag, then
    decided by this release's function and client: every state read where it is, moved
    under its 3-byte tag when written, refunds of the hits made before honoured; decisions
    go on exactly as the memory backend's over the whole sequence."""
    flush([redis_server])
    seen = calls.dropped_records[0]
    client = redis_server.client
    policy = _unique(rules)
    backend = _OldCalls(request.getfixturevalue(f"{store}_backend"), tags_only=True)
    _read_on_exactly(client, backend, TAGS_0_2, policy, pool, before, after)
    assert calls.dropped_records[0] == seen  # read, never dropped


def test_a_record_is_stamped_moving_while_an_old_name_is_left_in_it(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    """A call names the states of its own context: a recipient's log of another content is
    in the record but not named. Writes move the states they name and leave that one under
    its old name, the record stamped MOVING_LAYOUT (and read through again); the first call
    that names it moves it, and the record is stamped RECORD_LAYOUT. Layout 3's function
    refuses the record from the first write on, rather than miss the moved states."""
    client = redis_server.client
    backend = _OldCalls(redis_backend, tags_only=True)
    guard = Guard(backend, [SMS], clock=ManualClock(START))

    def names() -> set[int]:
        return {len(f) for f in client.hkeys(RECORD) if f}

    _deploy(client, TAGS_0_2)
    try:
        for content in ("x", "y"):
            assert guard.hit("sms", recipient="a", content=content).allowed
        assert _meta(client)[0] == LAYOUT_STAMPS + 3
        assert names() == {OLD_TAG_BYTES, OLD_TAG_BYTES + 8}
        _deploy(client, LIBRARY)
        backend.old = False
        assert guard.peek("sms", recipient="a", content="x").remaining == 1  # read there
        assert _meta(client)[0] == LAYOUT_STAMPS + 3  # a read moves nothing
        assert guard.hit("sms", recipient="a", content="x").remaining == 0
        assert _meta(client)[0] == LAYOUT_STAMPS + MOVING_LAYOUT
        assert names() == {3, 3 + 8, OLD_TAG_BYTES + 8}  # y's log left as it was
        assert guard.hit("sms", recipient="a", content="y").remaining == 0
        assert _meta(client)[0] == LAYOUT_STAMPS + RECORD_LAYOUT
        assert names() == {3, 3 + 8}
        assert not guard.hit("sms", recipient="a", content="y").allowed
        dump = client.dump(RECORD)
        _deploy(client, TAGS_0_2)
        backend.old = True
        with pytest.raises(BackendUnavailable, match=f"layout {RECORD_LAYOUT}, newer than the 3"):
            guard.hit("sms", recipient="a", content="z")
        assert client.dump(RECORD) == dump
    finally:
        _deploy(client, LIBRARY)


def _meta_numbers(meta: bytes) -> tuple[int, int, int, int]:
    """RECORD_META's stamp, expiry, fields and prune_at (">BI7I4I4")."""
    return (
        meta[0],
        int.from_bytes(meta[1:8], "big"),
        int.from_bytes(meta[8:12], "big"),
        int.from_bytes(meta[12:16], "big"),
    )


def test_an_old_name_whose_time_has_passed_goes_and_the_record_is_stamped_anew(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    """A state under its old name that no call names (a removed rule's) does not keep a
    record MOVING_LAYOUT for ever: a write that moves nothing reads nothing more (the record
    stays 5), and the next prune, on the server's time, deletes it once its expiry has
    passed, counts it out of the record's fields and stamps the record 6."""
    client = redis_server.client
    guard = Guard(redis_backend, [SMS])  # the server's time
    guard.hit("sms", recipient="a", content="x")
    stamp, expiry, fields, prune_at = _meta_numbers(_meta(client))
    assert stamp == LAYOUT_STAMPS + RECORD_LAYOUT
    assert FIELD_HEAD == ">I7I7"
    stale = (1).to_bytes(7, "big") * 2 + b"x"  # long expired
    client.hset(RECORD, b"\x01\x02", stale)
    meta = bytes([LAYOUT_STAMPS + 3]) + expiry.to_bytes(7, "big") + (fields + 1).to_bytes(4, "big")
    client.hset(RECORD, "", meta + prune_at.to_bytes(4, "big") + _meta(client)[16:])
    assert guard.hit("sms", recipient="a", content="x").remaining == 0
    assert _meta_numbers(_meta(client))[0] == LAYOUT_STAMPS + MOVING_LAYOUT
    assert b"\x01\x02" in client.hkeys(RECORD)  # nothing moved: nothing read
    stamp, expiry, fields, _ = _meta_numbers(_meta(client))
    client.hset(RECORD, "", _meta(client)[:12] + (1).to_bytes(4, "big") + _meta(client)[16:])
    assert guard.hit("sms", recipient="a", content="y").allowed  # a write past prune_at
    stamp, _, fields_after, _ = _meta_numbers(_meta(client))
    assert stamp == LAYOUT_STAMPS + RECORD_LAYOUT
    assert b"\x01\x02" not in client.hkeys(RECORD)
    assert fields_after == len(client.hkeys(RECORD)) - 1


@pytest.mark.parametrize("clock", [None, START], ids=["server-time", "pinned"])
@pytest.mark.parametrize("store", ["redis", "binned"])
def test_a_limit_changed_on_a_record_still_under_old_names_keeps_its_states_ttl(
    store: str, clock: float | None, request: pytest.FixtureRequest, redis_server: RedisServer
) -> None:
    """Found by review: a LIMIT call moved the record's states to their new names, then set
    the record's TTL from the fields it read, where the moved states were not yet: a limit
    of 1 s left the record, its 3/hour state in it, 1 s to live (memory still denied)."""
    flush([redis_server])
    client = redis_server.client
    policy = Policy(
        "p", Rule("3/day", by="u", name="slow"), Rule("100/minute", by="u", name="fast")
    )
    backend = _OldCalls(request.getfixturevalue(f"{store}_backend"), tags_only=True)
    guard = Guard(backend, [policy], clock=None if clock is None else ManualClock(clock))
    _deploy(client, TAGS_0_2)
    try:
        assert [guard.hit("p", u="x").allowed for _ in range(4)] == [True, True, True, False]
        _deploy(client, LIBRARY)
        backend.old = False
        guard.set_limit("p", "fast", "50/minute", ttl=1, u="x")
        db: Redis = backend.client  # the binned one's is db 1
        (key,) = state_keys(db)
        assert int(db.pttl(key)) > 86_000_000  # the day's state still needs it
        guard.clear_limit("p", "fast", u="x")
        assert int(db.pttl(key)) > 86_000_000
        assert not guard.hit("p", u="x").allowed
    finally:
        _deploy(client, LIBRARY)


def _meta_of(client: Redis, key: str) -> bytes:
    return client.hget(key, "") or b""  # type: ignore[return-value]


def test_a_stale_old_name_deleted_by_a_write_is_counted_out_of_the_meta(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    """Found by review: a write that deleted a stale old-named field but kept the meta
    field as it was (a refund) left the meta's count one too high, so an emptied record
    was never deleted."""
    client = redis_server.client
    policy = Policy("p", Rule("5/hour", by=("u", "c")))
    backend = _OldCalls(redis_backend, tags_only=True)
    guard = Guard(backend, [policy])  # the server's time: stale fields go
    key = "fg:{a}:p"
    _deploy(client, TAGS_0_2)
    try:
        guard.hit("p", u="a", c="x")
        guard.hit("p", u="a", c="z")
        _deploy(client, LIBRARY)
        backend.old = False
        decision = guard.hit("p", u="a", c="x")  # x moved, z left under its old name
        assert (_meta_of(client, key))[0] == LAYOUT_STAMPS + MOVING_LAYOUT
        client.hset(key, b"\x01\x02", (1).to_bytes(7, "big") * 2 + b"x")  # a stale old name
        meta = bytearray(_meta_of(client, key))
        meta[8:12] = (3).to_bytes(4, "big")
        client.hset(key, "", bytes(meta))
        guard.refund(decision)
        assert _meta_numbers(_meta_of(client, key))[2] == client.hlen(key) - 1
        guard.reset("p", u="a", c="x")
        guard.reset("p", u="a", c="z")
        assert client.exists(key) == 0  # an emptied record without limits goes
    finally:
        _deploy(client, LIBRARY)


def _record_problems(client: Redis) -> list[str]:
    """What a hash record must hold whatever was done to it: its meta's count of state
    fields is how many it has; stamped 6, none under an old name; no state under both."""
    problems = []
    for key in state_keys(client):
        fields: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]
        meta, names = fields.get(b""), [name for name in fields if name]
        if meta is None:
            problems.append(f"{key!r}: no meta field")
            continue
        if _meta_numbers(meta)[2] != len(names):
            problems.append(f"{key!r}: meta counts {_meta_numbers(meta)[2]}, holds {len(names)}")
        old = [name for name in names if len(name) % 8 == OLD_TAG_BYTES]
        if meta[0] == LAYOUT_STAMPS + RECORD_LAYOUT and old:
            problems.append(f"{key!r}: stamped {RECORD_LAYOUT} with old names {old}")
        for name in names:
            if len(name) % 8 == OLD_TAG_BYTES + 1 and name[:2] + name[3:] in names:
                problems.append(f"{key!r}: {name!r} under both names")
    return problems


_STEP = st.tuples(
    st.sampled_from(["hit", "hit", "hit", "reset", "reset-u", "refund", "limit", "clear", "wait"]),
    st.sampled_from("ab"),
    st.integers(0, 5),
    st.sampled_from([0.1, 1.0, 30.0]),
)


@settings(max_examples=examples(25))
@given(before=st.lists(_STEP, max_size=20), after=st.lists(_STEP, min_size=1, max_size=30))
def test_upgraded_records_keep_their_counts_and_names_through_every_operation(
    redis_backend: RedisBackend,
    redis_server: RedisServer,
    before: list[tuple[str, str, int, float]],
    after: list[tuple[str, str, int, float]],
) -> None:
    """Found by review (a randomized invariant run): a write that deleted an old name kept
    the meta's count. Hits, resets of one state and of a recipient's, refunds of hits made
    before the swap, per-key limits set and cleared, time passing: after every call each
    record's count, stamp and names are as _record_problems says, and the decisions are
    the memory backend's."""
    flush([redis_server])
    client = redis_server.client
    policy = Policy(
        "p",
        Rule("6/minute", by="u", name="user", strategy="gcra"),
        Rule("2/minute", by=("u", "c"), name="content", strategy="fixed-window"),
        Rule("3 per 2 minutes", by=("u", "c"), name="log"),
    )
    backend = _OldCalls(redis_backend, tags_only=True)
    clocks = ManualClock(START), ManualClock(START)
    guards = (
        Guard(backend, [policy], clock=clocks[0]),
        Guard(MemoryBackend(), [policy], clock=clocks[1]),
    )
    receipts: list[tuple[Decision, Decision]] = []

    def step(kind: str, u: str, c: int, wait: float) -> None:
        if kind == "wait":
            for clock in clocks:
                clock.advance(wait)
            return
        answers = []
        for guard in guards:
            if kind == "hit":
                answers.append(guard.hit("p", u=u, c=str(c)))
            elif kind == "reset":
                guard.reset("p", u=u, c=str(c))
            elif kind == "reset-u":
                guard.reset("p", u=u)
            elif kind == "limit":
                guard.set_limit("p", "user", "3/minute", ttl=wait, u=u)
            elif kind == "clear":
                guard.clear_limit("p", "user", u=u)
        if kind == "refund" and receipts:
            mine, theirs = receipts.pop(c % len(receipts))
            assert guards[0].refund(mine).allowed == guards[1].refund(theirs).allowed
        if answers:
            assert answers[0].allowed == answers[1].allowed
            if answers[0].receipt is not None:
                receipts.append((answers[0], answers[1]))
        assert not _record_problems(client)

    _deploy(client, TAGS_0_2)
    try:
        for item in before:
            step(*item)
        _deploy(client, LIBRARY)
        backend.old = False
        for item in after:
            step(*item)
    finally:
        _deploy(client, LIBRARY)
