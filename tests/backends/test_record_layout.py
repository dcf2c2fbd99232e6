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
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
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
    Strategy,
)
from freqguard.backends._library import FUNCTION, LIBRARY
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import RedisBackend
from freqguard.script import calls
from freqguard.script.calls import Part, Reply, ScriptCall
from freqguard.script.contract import (
    FIELD_HEAD,
    LAYOUT_STAMPS,
    MOVING_LAYOUT,
    OLD_TAG_BYTES,
    OLDEST_LAYOUT,
    RECORD_LAYOUT,
    SPEC_RULE,
    widths,
)
from freqguard.script.keys import KeyLayout
from freqguard.script.limits import parse_change
from freqguard.script.strategies import STATE_FORMATS
from tests.conformance.test_differential import _replay, _unique, ctx, op, rule
from tests.conftest import SMS, START, examples, flush
from tests.reference import RATE_STRATEGIES
from tests.servers import RedisServer, state_keys

FIXTURES = Path(__file__).parents[1] / "fixtures"
RELEASE_0_1_0 = (FIXTURES / "policy-0.1.0.lua").read_text(encoding="utf-8")
MAIN_0_1 = (FIXTURES / "policy-0.1-main.lua").read_text(encoding="utf-8")
FULL_0_2 = (FIXTURES / "policy-0.2-full.lua").read_text(encoding="utf-8")
TAGS_0_2 = (FIXTURES / "policy-0.2-tags.lua").read_text(encoding="utf-8")
RECORD = "fg:{a}:sms"
MARK = bytes([LAYOUT_STAMPS + RECORD_LAYOUT])


def _deploy(client: Redis, code: str) -> None:
    """Put a policy function on the server under this release's name."""
    client.function_load(code.replace("__LIBRARY__", FUNCTION), replace=True)


class _OldCalls:
    """A backend that, while ``old``, sends each call as the 0.1 and 0.2 clients encoded
    it, for the fixtures' functions: each rule without its burst (``SPEC_RULE``'s last
    number, which they do not read) and a LIMIT change without the tags it keeps (they
    kept the tags of the call's rules); each state's field named by its 2-byte tag, as
    every layout before 6 named it. ``tags_only``: as this release's builds before layout
    6 encoded it (the policy-0.2-tags fixture): the names alone differ. ``named``: how
    the old client named a state's field (``_old_tag`` unless given)."""

    def __init__(
        self,
        backend: RedisBackend,
        tags_only: bool = False,
        named: Callable[[KeyLayout], KeyLayout] | None = None,
    ) -> None:
        self.backend, self.old, self.tags_only = backend, True, tags_only
        self.named = named or _old_tag

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def execute(self, call: ScriptCall) -> Reply:
        return self.backend.execute(self._call(call))

    def execute_many(self, many: Any) -> list[Reply]:
        return self.backend.execute_many([self._call(call) for call in many])

    def _call(self, call: ScriptCall) -> ScriptCall:
        if not self.old:
            return call
        layouts = tuple(map(self.named, call.part.layouts))
        if self.tags_only:
            return call._replace(part=call.part._replace(layouts=layouts))
        change = call.change
        if change:
            change = " ".join(map(str, parse_change(change)[1]))
        return call._replace(
            part=call.part._replace(spec_text=_old_specs(call.part), layouts=layouts),
            change=change,
        )


def _old_tag(layout: KeyLayout) -> KeyLayout:
    """``layout`` naming its state's field as layouts 2 and 3 did: by the first
    ``OLD_TAG_BYTES`` of its tag, or by its wide tag when those collide."""
    old = _wide_tag(layout)
    if not layout.old_tag:
        old.field_tag = old.sent_tag = layout.field_tag[:OLD_TAG_BYTES]
    return old


def _wide_tag(layout: KeyLayout) -> KeyLayout:
    """``layout`` naming its state's field as 0.3.0 did: by its 3-byte tag, or by its
    ``WIDE_TAG_BYTES`` tag when the first ``OLD_TAG_BYTES`` of its tag are another
    state's of the policy (the tag then depended on the other rules: design note 94)."""
    old = copy.copy(layout)
    if layout.old_tag:
        old.field_tag = old.sent_tag = layout.old_tag
        old.old_tag = b""
    return old


def _old_specs(part: Part) -> str:
    words = [len(part.specs)]
    for spec in part.specs:
        words += [spec.twin.code, int(spec.shadow), len(spec.rules)]
        for params in spec.rules:
            words += [int(value) for value in params][: len(SPEC_RULE) - 1]
        words += spec.bounds or (0,) * getattr(spec.twin, "BOUNDS", 0)
    return " ".join(map(str, words))


def _meta_of(client: Redis, key: str) -> bytes:
    return client.hget(key, "") or b""  # type: ignore[return-value]


def _meta(client: Redis) -> bytes:
    return client.hget(RECORD, "") or b""  # type: ignore[return-value]


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


def _upgrading(strategies: Sequence[Strategy], quick: int) -> Callable[[Any], Any]:
    """A property test of an upgrade: random rules of ``strategies``, contexts, and
    operations before and after the swap of functions (the differential tests' generators)."""

    def made(test: Any) -> Any:
        return settings(max_examples=examples(quick))(
            given(
                rules=st.lists(rule(list(strategies)), min_size=1, max_size=4),
                pool=st.lists(ctx, min_size=1, max_size=3),
                before=st.lists(op, min_size=1, max_size=30),
                after=st.lists(op, min_size=1, max_size=30),
            )(test)
        )

    return made


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


def _read_on_exactly(
    client: Redis,
    backend: _OldCalls,
    old: str,
    policy: Policy,
    pool: list[dict[str, str]],
    before: list[Any],
    after: list[Any],
    one_part: bool = False,
) -> None:
    """``before`` replayed through the ``old`` function (and ``backend``'s old encoding),
    then the swap to this release's; the hits made before it are given back after it (their
    receipts name the states' generations as the older layout stored them), then ``after``:
    every decision the memory backend's over the whole sequence. ``one_part``: limits set
    on one part's rules only (see :func:`_limits_of_one_part`)."""
    clock, reference_clock = ManualClock(START), ManualClock(START)
    guard = Guard(backend, [policy], clock=clock)
    reference = Guard(MemoryBackend(), [policy], clock=reference_clock)
    if one_part:
        before = _limits_of_one_part(guard, policy, before)
    before = _no_stricter_limit_of_a_log(policy, before)
    _deploy(client, old)
    try:
        written = _replay(guard, clock, policy, pool, before)
        expected = _replay(reference, reference_clock, policy, pool, before)
        assert written == expected
        _deploy(client, LIBRARY)
        backend.old = False
        for mine, theirs in zip(_unspent(written), _unspent(expected), strict=True):
            assert guard.refund(mine) == reference.refund(theirs)
        assert _replay(guard, clock, policy, pool, after) == _replay(
            reference, reference_clock, policy, pool, after
        )
    finally:
        _deploy(client, LIBRARY)


def _limits_of_one_part(guard: Guard, policy: Policy, ops: list[Any]) -> list[Any]:
    """``ops`` with the per-key limits set or cleared on the rules of one part only.

    Rules of two parts whose partition values are equal (``u="a"`` and ``c="a"``) keep
    their limits in one record, and a 0.1 or 0.2 client's change named the tags to keep as
    its own part's: setting or clearing a limit of one part dropped the other's. That is
    what those releases stored, and this release reads it as stored; the reference, which
    never dropped one, cannot follow it there (found by this test: a limit on a rule keyed
    by ``u``, then a clear on one keyed by ``c``, lost the first)."""
    plan = guard._policies.plan(policy.name)
    first: int | None = None
    kept = []
    for item in ops:
        if item[0] in ("limit", "clear"):
            index = item[1][1] % len(policy.rules)
            part = next(n for n, p in enumerate(plan.parts) if index in p.rule_index)
            first = part if first is None else first
            if part != first:
                continue
        kept.append(item)
    return kept


def _no_stricter_limit_of_a_log(policy: Policy, ops: list[Any]) -> list[Any]:
    """``ops`` without the per-key limits stricter than a log's own rate (a shorter window,
    a smaller count), or of a shorter window than a rolling window's. Under one, an older
    release's log kept only the limit's entries, where this one keeps its own rate's too
    (design note 87), and its rolling window forgot what left the limit's ring, where this
    one carries it (design note 88): what the older one dropped, this one cannot read back,
    and the reference never dropped it."""
    kept = []
    for item in ops:
        if item[0] == "limit" and item[2] != 0 and item[2][0] is not None:
            rule = policy.rules[item[1][1] % len(policy.rules)]
            limit, window = item[2][0], item[2][1] * 100_000
            own = round(rule.rate.window.total_seconds() * 1_000_000)
            logs = rule.strategy in (Strategy.SLIDING_LOG, Strategy.CONCURRENCY)
            if logs and (window < own or limit < rule.rate.limit):
                continue
            if rule.strategy is Strategy.ROLLING_WINDOW and window < own:
                continue
        kept.append(item)
    return kept


def _unspent(replayed: list[object]) -> list[Decision]:
    """The decisions of a replay whose receipts can still be refunded, in order."""
    found: list[Decision] = []
    for item in replayed:
        for decision in item if isinstance(item, list) else [item]:
            if isinstance(decision, Decision) and decision.receipt and not decision.receipt.spent:
                found.append(decision)
    return found


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
        at += 3
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
