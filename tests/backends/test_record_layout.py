"""Upgrading over records an older release wrote: a new release never misreads one.

Each record states its layout in its meta field (``contract.RECORD_LAYOUT``). freqguard 0.1
wrote none, and changed its layout twice without one, so a record without a stamp is
dropped: its call decides as if it were absent, and the client logs it. Two fixtures are
0.1's policy functions, loaded on a real server to write real 0.1 records:

* ``policy-0.1.0.lua``: the 0.1.0 release (tag ``v0.1.0``), whose plan had no rule tags and
  whose fields had no latest-write time; driven here by hand, on the record and fields this
  release reads.
* ``policy-0.1-main.lua``: the last layout without a stamp (commit f203286, still versioned
  0.1.0): the tests load it under this release's function name and drive it with a
  ``Guard`` whose calls are encoded as that release's client encoded them (``_OldCalls``),
  then swap in this release's function as a deploy does.

After the swap, decisions must be those of a store that starts empty at that moment: the
memory backend (held to the Lua by the differential tests) is the reference.

A third fixture, ``policy-0.2-full.lua`` (commit c95719d), writes layout 2 with every state in
full, as layout 2 did before states could be stored short (``strategies.base.SHORT_SPAN``).
Those records are read as they are: after the swap, decisions go on exactly as the memory
backend's over the same whole sequence.

Records whose states are under older names: ``test_old_names.py``. The rig:
``tests/backends/upgrade_rig.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis

from freqguard import (
    BackendUnavailable,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    Strategy,
)
from freqguard.backends._library import FUNCTION, LIBRARY
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import RedisBackend
from freqguard.script import calls
from freqguard.script.contract import (
    FIELD_HEAD,
    LAYOUT_STAMPS,
    OLDEST_LAYOUT,
    RECORD_LAYOUT,
    SPEC_RULE,
    SPEC_STATE,
    widths,
)
from freqguard.script.strategies import STATE_FORMATS
from tests.backends.upgrade_rig import (
    FULL_0_2,
    MAIN_0_1,
    MARK,
    RECORD,
    RELEASE_0_1_0,
    _deploy,
    _limits_of_one_part,
    _meta,
    _no_bucket_refund_after_a_limit,
    _no_reset_after_a_rebirth,
    _no_stricter_limit_of_a_log,
    _OldCalls,
    _read_on_exactly,
    _upgrading,
)
from tests.conformance.test_differential import _replay, _unique
from tests.conftest import SMS, START, flush
from tests.reference import RATE_STRATEGIES
from tests.servers import RedisServer, state_keys


@pytest.fixture
def dropped() -> Iterator[list[int]]:
    """The process's count of dropped records, from zero for the test."""
    saved = calls.dropped_records[0]
    calls.dropped_records[0] = 0
    yield calls.dropped_records
    calls.dropped_records[0] = saved


#: The strategies the fixtures' releases decide (rolling-window came after them: a client
#: that has it loads a library that has it, named after its code's digest).
OLD_STRATEGIES = [s for s in RATE_STRATEGIES if s is not Strategy.ROLLING_WINDOW]


_upgrades = _upgrading(OLD_STRATEGIES, 60)


def test_the_fixtures_are_0_1_functions() -> None:
    """Neither marks its records, and this release's does: they really differ."""
    for old in (RELEASE_0_1_0, MAIN_0_1):
        assert "LAYOUT_STAMPS" not in old
        assert "'>I7I4I4'" in old
    assert "LAYOUT_STAMPS" in LIBRARY
    assert "'>BI7I4I4'" in LIBRARY


@_upgrades
def test_after_an_upgrade_0_1_records_decide_as_absent(
    redis_backend: RedisBackend,
    redis_server: RedisServer,
    rules: list[Rule],
    pool: list[dict[str, str]],
    before: list[Any],
    after: list[Any],
) -> None:
    flush([redis_server])
    client = redis_server.client
    policy = _unique(rules)
    clock = ManualClock(START)
    backend = _OldCalls(redis_backend)
    guard = Guard(backend, [policy], clock=clock)
    before = _limits_of_one_part(guard, policy, before)
    # under a per-key limit stricter than a log's own rate the 0.1 log kept the limit's
    # entries only (design note 87), which the reference does not follow: CI's slow job
    # drew one (a 1 per 0.100001 s log limited to 1 per 0.1 s), as _upgrade leaves out
    before = _no_reset_after_a_rebirth(policy, _no_stricter_limit_of_a_log(policy, before))
    before = _no_bucket_refund_after_a_limit(policy, before)
    _deploy(client, MAIN_0_1)
    try:
        written = _replay(guard, clock, policy, pool, before)
        reference_clock = ManualClock(START)
        reference = Guard(MemoryBackend(), [policy], clock=reference_clock)
        assert written == _replay(reference, reference_clock, policy, pool, before)
        _deploy(client, LIBRARY)
        backend.old = False
        fresh_clock = ManualClock(clock.now())
        fresh = Guard(MemoryBackend(), [policy], clock=fresh_clock)
        assert _replay(guard, clock, policy, pool, after) == _replay(
            fresh, fresh_clock, policy, pool, after
        )
    finally:
        _deploy(client, LIBRARY)


def test_the_full_states_fixture_marks_layout_2_and_has_no_short_form() -> None:
    assert "local RECORD_LAYOUT = 2 " in FULL_0_2
    assert "_SHORT" not in FULL_0_2
    assert "GCRA_SHORT" in LIBRARY


@_upgrades
def test_records_with_every_state_in_full_are_read_on_exactly(
    redis_backend: RedisBackend,
    redis_server: RedisServer,
    rules: list[Rule],
    pool: list[dict[str, str]],
    before: list[Any],
    after: list[Any],
) -> None:
    flush([redis_server])
    seen = calls.dropped_records[0]
    client = redis_server.client
    policy = _unique(rules)
    backend = _OldCalls(redis_backend)
    _read_on_exactly(client, backend, FULL_0_2, policy, pool, before, after, one_part=True)
    assert calls.dropped_records[0] == seen  # read, never dropped


def _hit_0_1_0(client: Redis, guard: Guard, now_us: int, content: str) -> bytes:
    """A hit of SMS for recipient ``a`` through the 0.1.0 release's function, on the record
    and fields this release reads: its plan is this one's with the first four numbers of
    each rule only (``contract.SPEC_RULE``'s; 0.1.0 had no tags, reserves or bursts)."""
    part = guard._policies.plan("sms").parts[0]
    words = [int(w) for w in part.spec_text.split()]
    plan, at = [words[0]], 1
    for _ in range(words[0]):
        code, shadow, count = words[at : at + 3]
        plan += [code, shadow, count]
        at += len(SPEC_STATE)
        for _ in range(count):
            plan += words[at : at + 4]
            at += len(SPEC_RULE)
    texts = {"recipient": "a", "content": content}
    fields = [layout.field(texts) for layout in part.layouts]
    record = part.layouts[0].record(texts)
    args = [now_us, 1, 0, " ".join(map(str, plan)), *fields]
    return client.fcall(FUNCTION, 1, record, *args)  # type: ignore[no-any-return]


def test_records_of_the_0_1_0_release_are_dropped_and_said(
    redis_backend: RedisBackend,
    redis_server: RedisServer,
    dropped: list[int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = redis_server.client
    clock = ManualClock(START)
    guard = Guard(redis_backend, [SMS], clock=clock)
    _deploy(client, RELEASE_0_1_0)
    try:
        for i in range(15):  # the recipient's minute is full, in 0.1.0's layout
            assert _hit_0_1_0(client, guard, clock.now_us(), f"m{i}")[0] == 1
        assert _hit_0_1_0(client, guard, clock.now_us(), "m15")[0] == 0
        old = _meta(client)
        assert len(old) == 15
        assert old[0] < LAYOUT_STAMPS
        _deploy(client, LIBRARY)
        with caplog.at_level(logging.WARNING, logger="freqguard"):
            peeked = guard.peek("sms", recipient="a", content="m15")
            decision = guard.hit("sms", recipient="a", content="m15")
        assert peeked.allowed
        assert peeked.rules[0].remaining == 15
        assert decision.allowed
        assert decision.rules[0].remaining == 14
        assert _meta(client)[:1] == MARK
        assert dropped == [1]  # the peek dropped it; the hit found an empty record
        assert "without a layout stamp" in caplog.text
        assert "docs/upgrading.md" in caplog.text
        for i in range(14):
            guard.hit("sms", recipient="a", content=f"n{i}")
        assert not guard.hit("sms", recipient="a", content="n14").allowed
        assert dropped == [1]
    finally:
        _deploy(client, LIBRARY)


def test_a_record_with_an_unreadable_meta_field_is_dropped(
    redis_backend: RedisBackend, redis_server: RedisServer, dropped: list[int]
) -> None:
    client = redis_server.client
    guard = Guard(redis_backend, [SMS], clock=ManualClock(START))
    guard.hit("sms", recipient="a", content="x")
    fields = [f for f in client.hkeys(RECORD) if f]
    meta = _meta(client)
    for garbage in (
        dict.fromkeys(fields, b"\x00" * 3),  # state fields, no meta field
        {"": meta + b"\x01", fields[0]: b"?"},  # a marked meta field of a wrong length
        {"": MARK, fields[0]: b"?"},
    ):
        client.delete(RECORD)
        client.hset(RECORD, mapping=garbage)  # type: ignore[arg-type]
        decision = guard.hit("sms", recipient="a", content="x")
        assert decision.allowed
        assert decision.rules[0].remaining == 14
        assert _meta(client)[:1] == MARK
    assert dropped == [3]


def test_a_newer_layout_is_refused_and_left_as_it_is(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    client = redis_server.client
    guard = Guard(redis_backend, [SMS], clock=ManualClock(START))
    guard.hit("sms", recipient="a", content="x")
    client.hset(RECORD, "", bytes([MARK[0] + 1]) + _meta(client)[1:])
    dump = client.dump(RECORD)
    for call in (
        lambda: guard.hit("sms", recipient="a", content="x"),
        lambda: guard.peek("sms", recipient="a", content="x"),
        lambda: guard.reset("sms", recipient="a", content="x"),
        lambda: guard.limits_for("sms", recipient="a"),
    ):
        with pytest.raises(
            BackendUnavailable, match=f"layout {RECORD_LAYOUT + 1}, newer than the {RECORD_LAYOUT}"
        ):
            call()
    assert client.dump(RECORD) == dump


def test_a_layout_2_record_is_marked_3_when_written_and_refused_by_layout_2_after(
    redis_backend: RedisBackend, redis_server: RedisServer
) -> None:
    """A read leaves a layout-2 record as it is; a write marks it 3 with its short states,
    and the layout-2 function then refuses it rather than misread a short state."""
    client = redis_server.client
    policy = Policy("sms", Rule("15/minute", by="recipient", strategy="gcra"))
    backend = _OldCalls(redis_backend)
    guard = Guard(backend, [policy], clock=ManualClock(START))
    _deploy(client, FULL_0_2)
    try:
        guard.hit("sms", recipient="a")
        assert _meta(client)[0] == LAYOUT_STAMPS + OLDEST_LAYOUT
        _deploy(client, LIBRARY)
        backend.old = False
        assert guard.peek("sms", recipient="a").remaining == 14
        assert _meta(client)[0] == LAYOUT_STAMPS + OLDEST_LAYOUT
        assert guard.hit("sms", recipient="a").remaining == 13
        assert _meta(client)[0] == LAYOUT_STAMPS + RECORD_LAYOUT
        dump = client.dump(RECORD)
        _deploy(client, FULL_0_2)
        backend.old = True
        with pytest.raises(BackendUnavailable, match=f"layout {RECORD_LAYOUT}, newer than the 2"):
            guard.hit("sms", recipient="a")
        assert client.dump(RECORD) == dump
    finally:
        _deploy(client, LIBRARY)


def test_the_log_says_it_at_powers_of_ten(
    dropped: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="freqguard"):
        for _ in range(1000):
            calls.note_dropped()
    said = [r.getMessage().split(" so far")[0].rsplit(" ", 1)[1] for r in caplog.records]
    assert said == ["1", "10", "100", "1000"]


@pytest.mark.parametrize(("limit", "width"), [(10_000_000, 3), (1_000_000_000, 4)])
def test_a_rolling_window_record_is_bounded_whatever_its_limit(
    redis_backend: RedisBackend, redis_server: RedisServer, limit: int, width: int
) -> None:
    """A count in each of the 61 sub-windows a window of 120 s touches (sub-windows of 2 s),
    as wide as the largest needs: the state is its header and 61 counts, and the whole
    record, meta field and hash included, stays under 1 KiB (``MEMORY USAGE``), at the
    issue's 10,000,000 per 120 s and at the largest limit; memory decides alike."""
    flush([redis_server])
    rate = f"{limit} per 120 seconds"
    policy = Policy("sms", Rule(rate, by="recipient", strategy="rolling-window"))
    clocks = [ManualClock(START), ManualClock(START)]
    stores: tuple[SyncBackend, ...] = (redis_backend, MemoryBackend())
    guards = [Guard(b, [policy], clock=c) for b, c in zip(stores, clocks, strict=True)]
    costs = [2**24 if width == 4 else 2**16] + [limit // 62] * 60
    for cost in costs:
        assert [g.hit("sms", cost, recipient="a").allowed for g in guards] == [True, True]
        for clock in clocks:
            clock.advance(2)
    decisions = [g.peek("sms", recipient="a") for g in guards]
    assert decisions[0] == decisions[1]
    assert decisions[0].remaining == limit - sum(costs[1:])  # the first sub-window has left
    client = redis_server.client
    (key,) = state_keys(client)
    fields: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]
    (state,) = [value for field, value in fields.items() if field]
    header = sum(widths(STATE_FORMATS["rolling-window"]))
    assert len(state) == sum(widths(FIELD_HEAD)) + header + 61 * width
    usage = client.memory_usage(key)
    assert usage is not None
    assert usage <= 1024
