"""States that freqguard 0.3.0 named by wide tags, and a state's name in a deploy.

Up to 0.3.0, a state's field in its Redis record was named by a tag of its key id that
depended on the policy's other rules: two states whose first ``OLD_TAG_BYTES`` collided
were both named by ``WIDE_TAG_BYTES`` tags instead. A deploy that added, removed or changed
a rule whose 2-byte tag a kept rule's shared renamed the kept rule's state, which then
started afresh in Redis while memory kept it: an admission past the limit (found by CI's
operations model). Now every state is named by its 3-byte tag alone (design note 94); a
state whose 2-byte tag another's shares is sent with its wide name too, read where its own
is absent and moved when written. ``policy-0.3.0.lua`` is the 0.3.0 release's library
(commit 4bc79ce), loaded on a real server to write real 0.3.0 records.
"""

from __future__ import annotations

import functools
from hashlib import blake2b
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis import Redis

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.backends._library import LIBRARY
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import RedisBackend
from freqguard.script import calls
from freqguard.script.contract import LAYOUT_STAMPS, OLD_TAG_BYTES, RECORD_LAYOUT, WIDE_TAG_BYTES
from freqguard.script.keys import policy_layout
from tests.backends.upgrade_rig import (
    TAGS_0_2,
    _deploy,
    _OldCalls,
    _read_on_exactly,
    _upgrading,
    _wide_tag,
)
from tests.conformance.test_differential import _assert_alike, _unique, ctx, op, rule
from tests.conftest import START, examples, flush
from tests.reference import RATE_STRATEGIES
from tests.servers import RedisServer

FIXTURES = Path(__file__).parents[1] / "fixtures"
RELEASE_0_3_0 = (FIXTURES / "policy-0.3.0.lua").read_text(encoding="utf-8")
#: The 2-byte tag the renamed rules' states share (that of ``c/fw@u``, ``d/gcra@t``).
SHARED = b"\x30\x20"


def test_the_fixture_is_0_3_0s_library() -> None:
    """It writes this release's layout, and knows no wide name sent beside a state's own."""
    assert "local RECORD_LAYOUT = 6 " in RELEASE_0_3_0
    assert "WIDE_TAG_BYTES" not in RELEASE_0_3_0
    assert "WIDE_TAG_BYTES" in LIBRARY


@functools.cache
def _named(suffix: str, nth: int) -> str:
    """The ``nth`` name (from 0) whose state's key id, ``name + suffix``, has the 2-byte tag
    ``SHARED``: a search of about 65,536 names each."""
    found, n = -1, 0
    while True:
        name = f"w{n}"
        if blake2b((name + suffix).encode(), digest_size=OLD_TAG_BYTES).digest() == SHARED:
            found += 1
            if found == nth:
                return name
        n += 1


def _colliding(rules: list[Rule]) -> Policy:
    """``rules`` as a policy whose states have one 2-byte tag, but a shared log's (named by
    no rule): 0.3.0 named every such state by its wide tag."""
    plain = _unique(rules)
    names = [f"r{i}" for i in range(len(rules))]
    tags = {s.key.field_tag for part in policy_layout(plain, "fg") for s in part}
    nth: dict[str, int] = {}
    for part in policy_layout(plain, "fg"):
        for state in part:
            index, name = state.rules[0], names[state.rules[0]]
            if not state.key.key_id.startswith(name + "/"):
                continue  # a shared log, named by no rule
            suffix = state.key.key_id[len(name) :]
            while True:  # a name whose whole tag no other state has (a policy refuses it)
                names[index] = _named(suffix, nth.get(suffix, 0))
                nth[suffix] = nth.get(suffix, 0) + 1
                key = (names[index] + suffix).encode()
                tag = SHARED + blake2b(key, digest_size=1).digest()
                if tag not in tags:
                    tags.add(tag)
                    break
    return _unique(rules, names=names)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["redis", "binned"])
@_upgrading(RATE_STRATEGIES, 25)
def test_states_0_3_0_named_by_wide_tags_are_read_on_exactly(
    store: str,
    request: pytest.FixtureRequest,
    redis_server: RedisServer,
    rules: list[Rule],
    pool: list[dict[str, str]],
    before: list[Any],
    after: list[Any],
) -> None:
    """Records 0.3.0 wrote with its states under wide names, then decided by this release's
    function and client: each state read where it is and moved to its own name when
    written; decisions go on exactly as the memory backend's over the whole sequence."""
    flush([redis_server])
    seen = calls.dropped_records[0]
    backend = _OldCalls(request.getfixturevalue(f"{store}_backend"), True, _wide_tag)
    policy = _colliding(rules)
    _read_on_exactly(redis_server.client, backend, RELEASE_0_3_0, policy, pool, before, after)
    assert calls.dropped_records[0] == seen  # read, never dropped


@settings(max_examples=examples(20))
@given(
    rules=st.lists(rule(list(RATE_STRATEGIES)), min_size=2, max_size=4),
    pool=st.lists(ctx, min_size=1, max_size=3),
    ops=st.lists(op, min_size=1, max_size=40),
)
def test_policies_whose_states_share_2_byte_tags_decide_alike_on_every_store(
    redis_backend: RedisBackend,
    binned_backend: RedisBackend,
    cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    rules: list[Rule],
    pool: list[dict[str, str]],
    ops: list[Any],
) -> None:
    """The differential replay on policies whose every named state is sent with its wide
    name (its 2-byte tag another's): the names taken apart on every call, on records,
    bins and a cluster, decide as memory does."""
    flush([redis_server, *redis_cluster])
    backends = [MemoryBackend(), redis_backend, binned_backend, cluster_backend]
    _assert_alike(backends, _colliding(rules), pool, ops, 1_700_000_000)


def _sms(*extra: Rule) -> Policy:
    """A recipient's fixed window and a content's GCRA, whose 2-byte tags are alike."""
    return Policy(
        "p",
        Rule("2/minute", by="u", name="c", strategy="fixed-window"),
        *extra,
        Rule("2/minute", by=("u", "t"), name=_named("/gcra@u,t", 0), strategy="gcra"),
    )


def _names(client: Redis) -> set[int]:
    return {len(f) for f in client.hkeys("fg:{a}:p") if f}


def test_a_wide_name_is_moved_and_the_record_keeps_its_layout(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    """0.3.0 named both states by wide tags; this release counts on from them, moves each
    when it writes it (a content not hit stays where it is), and stamps the record as
    before: no wide name is ever left for a call to look for but under its own state's."""
    flush([redis_server])
    client = redis_server.client
    policy = _sms()
    assert all(s.key.old_tag for part in policy_layout(policy, "fg") for s in part)
    backend = _OldCalls(redis_backend, True, _wide_tag)
    guard = Guard(backend, [policy], clock=ManualClock(START))
    _deploy(client, RELEASE_0_3_0)
    try:
        for content in ("x", "y"):
            assert guard.hit("p", u="a", t=content).allowed
        assert _names(client) == {WIDE_TAG_BYTES, WIDE_TAG_BYTES + 8}
        _deploy(client, LIBRARY)
        backend.old = False
        assert guard.peek("p", u="a", t="x").remaining == 0  # c: 2 per minute, hit twice
        assert [s.remaining for s in guard.peek("p", u="a", t="x").rules] == [0, 1]
        assert not guard.hit("p", u="a", t="x").allowed  # a denial writes nothing
        assert guard.refund("p", u="a", t="x").allowed  # a write: both states moved
        assert _names(client) == {3, 3 + 8, WIDE_TAG_BYTES + 8}  # y's left as it was
        assert client.hget("fg:{a}:p", "")[0] == LAYOUT_STAMPS + RECORD_LAYOUT  # type: ignore[index]
        assert [s.remaining for s in guard.peek("p", u="a", t="y").rules] == [1, 1]
    finally:
        _deploy(client, LIBRARY)


@pytest.mark.parametrize("store", ["memory", "redis", "binned"])
def test_a_deploy_that_adds_or_removes_a_rule_sharing_a_2_byte_tag_keeps_the_counts(
    store: str, request: pytest.FixtureRequest, redis_server: RedisServer
) -> None:
    """Adding a rule whose 2-byte tag the fixed window's shares, then removing it again,
    renamed the fixed window's state each time up to 0.3.0 (a wide tag, then its own):
    its count started afresh in Redis, twice."""
    flush([redis_server])
    backend: SyncBackend = (
        MemoryBackend() if store == "memory" else request.getfixturevalue(f"{store}_backend")
    )
    clock = ManualClock(START)
    alone = Policy("p", Rule("2/minute", by="u", name="c", strategy="fixed-window"))
    assert Guard(backend, [alone], clock=clock).hit("p", u="a").allowed
    guard = Guard(backend, [_sms()], clock=clock)
    assert guard.hit("p", u="a", t="x").allowed  # c's second unit
    assert not guard.hit("p", u="a", t="y").allowed
    assert not Guard(backend, [alone], clock=clock).hit("p", u="a").allowed
    flush([redis_server])


def _wide_of_c() -> bytes:
    (c,) = [s.key for part in policy_layout(_sms(), "fg") for s in part if s.rules == (0,)]
    return c.old_tag


@pytest.mark.parametrize("pinned", [False, True])
def test_a_reset_forgets_a_state_under_both_its_names(
    redis_backend: RedisBackend, redis_server: RedisServer, pinned: bool
) -> None:
    """A record holding ``c`` under both names (a 0.3.0 client wrote the wide one after
    this release moved it: a rolling deploy, or a rollback): a reset deleted the 3-byte
    field only, and the next call counted the 0.3.0 units again (found by review)."""
    flush([redis_server])
    client = redis_server.client
    backend = _OldCalls(redis_backend, True, _wide_tag)
    backend.old = False
    clock = ManualClock(START) if pinned else None
    new = Guard(backend, [_sms()], clock=clock)
    assert new.hit("p", u="a", t="x").allowed  # c under its 3-byte name
    _deploy(client, RELEASE_0_3_0)
    backend.old = True
    try:  # a 0.3.0 client during the roll: its own count, under the wide name
        old = Guard(backend, [_sms()], clock=clock)
        assert old.hit("p", u="a", t="y").allowed
        assert old.hit("p", u="a", t="y").allowed
    finally:
        _deploy(client, LIBRARY)
        backend.old = False
    assert _wide_of_c() in client.hkeys("fg:{a}:p")
    assert new.reset("p", u="a") == ("c",)
    assert _wide_of_c() not in client.hkeys("fg:{a}:p")
    meta = client.hget("fg:{a}:p", "")
    assert isinstance(meta, bytes)
    assert int.from_bytes(meta[8:12], "big") == client.hlen("fg:{a}:p") - 1  # its count
    assert [new.hit("p", u="a", t="z").allowed for _ in range(3)] == [True, True, False]


@pytest.mark.parametrize("old", ["0.3.0", "0.2"])
def test_a_record_whose_meta_is_unreadable_is_dropped_with_its_old_names(
    redis_backend: RedisBackend, redis_server: RedisServer, old: str
) -> None:
    """A record with a state under an old name and a meta field of a wrong length: the
    call failed (the write unpacked the moved state from the emptied fields; found by
    review, for 2-byte names before wide ones) where such a record is dropped."""
    flush([redis_server])
    client = redis_server.client
    clock = ManualClock(START)
    named = _wide_tag if old == "0.3.0" else None
    backend = _OldCalls(redis_backend, True, named)
    _deploy(client, RELEASE_0_3_0 if old == "0.3.0" else TAGS_0_2)
    try:
        assert Guard(backend, [_sms()], clock=clock).hit("p", u="a", t="x").allowed
    finally:
        _deploy(client, LIBRARY)
        backend.old = False
    meta = client.hget("fg:{a}:p", "")
    assert isinstance(meta, bytes)
    client.hset("fg:{a}:p", "", meta + b"\x00")  # a limits tail of the wrong length
    seen = calls.dropped_records[0]
    assert Guard(backend, [_sms()], clock=clock).hit("p", u="a", t="x").allowed
    assert calls.dropped_records[0] == seen + 1
