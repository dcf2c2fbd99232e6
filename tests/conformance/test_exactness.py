"""Exactness where it used to break: refunds that took back another caller's units, the
compensation of multi-part policies, and clocks that step back. Every test runs on memory,
Redis and Redis Cluster with a pinned clock, and checks the times the backend recorded
(``Decision.receipt``) against the brute-force model, not the caller's clock."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis as AsyncRedis

from freqguard import (
    AsyncGuard,
    BackendUnavailable,
    ConfigError,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rule,
    Strategy,
)
from freqguard.backends.base import SyncBackend
from freqguard.backends.redis import AsyncRedisBackend
from freqguard.script.contract import BACK_LIMIT, HIT
from tests.conftest import START, GuardFactory
from tests.reference import RATE_STRATEGIES, max_in_any_window
from tests.servers import RedisServer


def _at(decision: Decision) -> int:
    """The µs at which the hit's one part recorded it."""
    assert decision.receipt is not None
    (at,) = set(decision.receipt.times_us)
    return at


def test_refund_of_a_decision_takes_back_that_hit_not_the_newest(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    """The issue's case: A hits at 0, B at 0.9, A refunds at 0.95; at 1.001 B's unit is still
    in the window, so only one more hit fits (the context-only refund admitted two)."""
    guard = make_guard([Policy("p", Rule("2/second", by="u"))])
    a = guard.hit("p", u="x")
    clock.advance(0.9)
    assert guard.hit("p", u="x").allowed
    clock.advance(0.05)
    guard.refund(a)
    clock.advance(0.051)
    assert guard.hit("p", u="x").allowed
    assert not guard.hit("p", u="x").allowed


@pytest.mark.parametrize("strategy", RATE_STRATEGIES)
def test_refund_of_a_decision_is_exact_for_every_strategy(
    make_guard: GuardFactory, clock: ManualClock, strategy: Strategy
) -> None:
    guard = make_guard([Policy("p", Rule("3/second", by="u", strategy=strategy))])
    first = guard.hit("p", cost=2, u="x")
    assert guard.peek("p", u="x").remaining == 1
    refunded = guard.refund(first)
    assert refunded.remaining == 3
    assert guard.hit("p", cost=3, u="x").allowed
    with pytest.raises(ConfigError, match="already refunded"):
        guard.refund(first)


def test_refunding_a_denied_or_peeked_decision_changes_nothing(
    make_guard: GuardFactory,
) -> None:
    guard = make_guard([Policy("p", Rule("1/second", by="u"))])
    assert guard.hit("p", u="x").allowed
    denied = guard.hit("p", u="x")
    assert not denied.allowed
    assert denied.receipt is None
    guard.refund(denied)
    guard.refund(guard.peek("p", u="x"))
    assert not guard.hit("p", u="x").allowed


def test_refund_of_a_decision_takes_no_cost_or_context(make_guard: GuardFactory) -> None:
    guard = make_guard([Policy("p", Rule("1/second", by="u"))])
    decision = guard.hit("p", u="x")
    with pytest.raises(ConfigError, match="refund\\(decision\\)"):
        guard.refund(decision, 2)  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match="refund\\(decision\\)"):
        guard.refund(decision, u="x")  # type: ignore[call-overload]


def test_a_gcra_refund_never_gives_back_what_time_already_returned(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    """burst 1, one per second: A at 0, B at 1.5 (A's unit came back at 1.0); refunding A at
    1.6 must leave B's unit in place, so nothing more fits before 2.5."""
    guard = make_guard([Policy("p", Rule("1/second", by="u", strategy="gcra", burst=1))])
    a = guard.hit("p", u="x")
    clock.advance(1.5)
    assert guard.hit("p", u="x").allowed
    clock.advance(0.1)
    guard.refund(a)
    assert not guard.hit("p", u="x").allowed


def test_multi_part_compensation_removes_only_its_own_unit(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    """A global 3/second plus 1/second per user span two parts. A's hit consumes in the
    global part, B's hit lands meanwhile, then A's user part denies: the compensation must
    take back A's global unit, not B's newer one."""
    policy = Policy("p", Rule("3/second", name="all"), Rule("1/second", by="u", name="user"))
    guard = make_guard([policy])
    assert guard.hit("p", u="a").allowed  # t=0: global [0], a used up
    clock.advance(0.5)
    op = guard._hits.decide("p", 1, {"u": "a"}, HIT)  # A at 0.5, driven by hand
    step = next(op)
    assert isinstance(step, list)
    replies = guard.backend.execute_many(step)  # the global part admits and consumes
    clock.advance(0.1)
    assert guard.hit("p", u="b").allowed  # B at 0.6
    denied = None
    while denied is None:
        try:
            step = op.send(replies)
        except StopIteration as done:
            denied = done.value
        else:
            assert isinstance(step, list)
            replies = guard.backend.execute_many(step)
    assert not denied.allowed  # A's user part denied
    clock.set(START + 1.55)  # the 0 unit has left; B's at 0.6 has not
    admitted = sum(guard.hit("p", u=f"n{i}").allowed for i in range(4))
    assert admitted == 2


def test_a_clock_that_steps_back_never_judges_a_state_before_its_latest_time(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    """Three hits 100 µs apart, one at 1.00035 s (nothing in its window), then the clock
    steps back 0.25 ms: judged at 1.0001, two more would fit beside the first three inside one
    second. Each state's time is monotonic, so they are judged (and recorded) at 1.00035."""
    guard = make_guard([Policy("p", Rule("3/second", by="u"))])
    times = []
    for at in (0.0001, 0.0002, 0.0003, 1.00035, 1.0001, 1.0001, 1.0001):
        clock.set(START + at, backwards=True)  # steps back once
        decision = guard.hit("p", u="x")
        if decision.allowed:
            times.append(_at(decision))
    assert len(times) == 6
    assert max_in_any_window(times, 1_000_000) <= 3
    assert min(times[3:]) == round((START + 1.00035) * 1_000_000)


def test_a_fixed_window_that_steps_back_does_not_count_the_previous_window_afresh(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    """Judged at 0.95 after 1.0, a fixed window started [0, 1) afresh (it was full) and
    overwrote the [1, 2) count, which then started afresh again at 1.1."""
    guard = make_guard([Policy("p", Rule("2/second", by="u", strategy="fixed-window"))])
    out = []
    for at, cost in ((0.9, 2), (1.0, 1), (0.95, 1), (1.1, 1), (1.2, 1)):
        clock.set(START + at, backwards=True)  # steps back once
        out.append(guard.hit("p", cost=cost, u="x").allowed)
    assert out == [True, True, True, False, False]


@pytest.mark.parametrize("strategy", RATE_STRATEGIES)
def test_every_strategy_denies_after_a_step_back_what_it_denied_before(
    make_guard: GuardFactory, clock: ManualClock, strategy: Strategy
) -> None:
    guard = make_guard([Policy("p", Rule("2/second", by="u", strategy=strategy))])
    clock.set(START + 0.9)
    assert guard.hit("p", u="x", cost=2).allowed
    clock.set(START + 1.0)
    assert guard.hit("p", u="x").allowed is (strategy is Strategy.FIXED_WINDOW)
    clock.set(START + 0.95, backwards=True)
    if strategy is not Strategy.FIXED_WINDOW:
        assert not guard.hit("p", u="x").allowed
        assert guard.peek("p", u="x").retry_after > 0


# -- found by the adversarial review ------------------------------------------------------


def test_two_refunds_of_one_decision_at_once_give_back_once(redis_server: RedisServer) -> None:
    """Both refunds went through: the receipt was checked before the await and spent after."""

    async def main() -> tuple[tuple[object, ...], bool, bool]:
        backend = AsyncRedisBackend(AsyncRedis(port=redis_server.port))
        clock = ManualClock(START)
        guard = AsyncGuard(backend, [Policy("race", Rule("2/minute", by="u"))], clock=clock)
        await guard.reset("race", u="x")
        a = await guard.hit("race", u="x")
        assert (await guard.hit("race", u="x")).allowed
        results = await asyncio.gather(guard.refund(a), guard.refund(a), return_exceptions=True)
        first = (await guard.hit("race", u="x")).allowed
        second = (await guard.hit("race", u="x")).allowed
        await guard.aclose()
        return tuple(results), first, second

    results, first, second = asyncio.run(main())
    assert sum(isinstance(r, ConfigError) for r in results) == 1
    assert (first, second) == (True, False)


@pytest.mark.parametrize(
    ("strategy", "other"), [("gcra", "sliding-log"), ("fixed-window", "sliding-log")]
)
def test_a_receipt_is_refused_by_a_policy_whose_rules_changed(
    backend: SyncBackend, clock: ManualClock, strategy: str, other: str
) -> None:
    """Only the name and the part count were compared: another strategy's marks were taken
    (a TypeError in memory; on Redis the newest units went back)."""
    before = Guard(backend, [Policy("p", Rule("2/minute", by="u", strategy=strategy))], clock=clock)
    after = Guard(backend, [Policy("p", Rule("2/minute", by="u", strategy=other))], clock=clock)
    decision = before.hit("p", u="x")
    with pytest.raises(ConfigError, match="as it was registered then"):
        after.refund(decision)
    assert decision.receipt is not None
    assert not decision.receipt.spent  # still refundable where it belongs
    before.refund(decision)


@pytest.mark.parametrize("strategy", ["gcra", "token-bucket"])
def test_bucket_refund_counters_stay_bounded_and_exact(
    make_guard: GuardFactory, clock: ManualClock, strategy: str
) -> None:
    """`back` grew with every refund for a state's life: at the refill bound it left 2^53 in
    ~29 hit-and-refund pairs (Redis drifted from memory) and wrapped the 7-byte field at ~228."""
    cap = 1_000_000_000
    guard = make_guard([Policy("p", Rule(f"{cap} per 3660 days", by="u", strategy=strategy))])
    for i in range(260):
        decision = guard.hit("p", cost=cap, u="x")
        assert decision.allowed, i
        assert decision.receipt is not None
        (((_, back, _, _),),) = decision.receipt.marks  # type: ignore[misc]
        assert back <= BACK_LIMIT, (i, back)
        assert guard.refund(decision).remaining == cap, i
        clock.advance(0.000_001)


@pytest.mark.parametrize("when_full", ["reject", "evict"])
def test_a_refund_needs_no_room_in_a_full_memory_backend(
    clock: ManualClock, when_full: str
) -> None:
    """A refund writes only states that exist, but was counted as needing room: refused when
    rejecting, and evicting a live state (whose cap was then lost) when evicting."""
    guard = Guard(
        MemoryBackend(max_keys=1, when_full=when_full),
        [Policy("p", Rule("1/minute", by="u"))],
        clock=clock,
    )
    assert guard.hit("p", u="a").allowed
    guard.refund("p", 1, u="zz")
    assert not guard.hit("p", u="a").allowed


def test_a_multi_part_hit_that_fails_midway_gives_back_what_it_took(clock: ManualClock) -> None:
    """The global part consumed, the per-user part's store failed: the global unit stayed
    taken, and no receipt could give it back."""
    policy = Policy("p", Rule("2/minute", name="all"), Rule("5/minute", by="u", name="user"))
    guard = Guard(MemoryBackend(max_keys=2, when_full="reject"), [policy], clock=clock)
    assert guard.hit("p", u="a").allowed  # two states: the global log and a's
    with pytest.raises(BackendUnavailable):
        guard.hit("p", u="b")  # b's state does not fit
    assert guard.peek("p", u="a").rules[0].remaining == 1  # the global log: only a's unit


def test_a_fixed_window_refund_after_a_reset_leaves_the_new_count_alone(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    """a at :40, reset, b at :45, refund(a): a's window count was gone with the reset, but the
    refund took b's unit from the new one, and c was admitted: two in a window of one."""
    guard = make_guard([Policy("p", Rule("1/minute", by="u", strategy="fixed-window"))])
    clock.set(1_700_000_020)  # :40 of an aligned minute
    a = guard.hit("p", u="x")
    guard.reset("p", u="x")
    clock.advance(5)
    assert guard.hit("p", u="x").allowed
    guard.refund(a)
    assert not guard.hit("p", u="x").allowed


# -- issue 17: holes found by attacking the operations work ----------------------------------


@pytest.mark.parametrize("strategy", RATE_STRATEGIES)
def test_a_clock_a_day_ahead_and_back_finds_every_state_where_it_was(
    make_guard: GuardFactory, clock: ManualClock, strategy: Strategy
) -> None:
    """A day ahead, other recipients hit (enough for the memory backend's sweep to run) and
    the full one is peeked at; then the clock comes back. Redis still holds the full state
    (its records expire on the server's own time): memory must too, and deny alike, where it
    used to sweep (or drop on read) what the day-ahead time said had expired."""
    guard = make_guard([Policy("p", Rule("15/minute", by="u", strategy=strategy))])
    clock.set(START + 10)
    assert guard.hit("p", cost=15, u="full").allowed
    clock.set(START + 10 + 86_400)
    assert guard.peek("p", u="full").remaining == 15  # a day later: free, read only
    for n in range(40):
        assert guard.hit("p", u=f"other{n}").allowed
    clock.set(START + 11, backwards=True)
    assert [guard.hit("p", u="full").allowed for _ in range(15)] == [False] * 15


def test_a_day_ahead_write_to_a_record_prunes_none_of_its_states_by_that_time(
    make_guard: GuardFactory, clock: ManualClock
) -> None:
    """On Redis, a recipient's states share a record whose stale fields are pruned once it
    holds more than its prune threshold: a write a day ahead (pinned time) pruned every content's
    state of that recipient, and back at the old time each content was admitted afresh."""
    rule = Rule("2/minute", by=("u", "c"), name="same-content")
    guard = make_guard([Policy("p", rule)])
    clock.set(START + 10)
    for n in range(18):  # pruned (nothing stale) at the 9th: next at the 19th field
        assert guard.hit("p", cost=2, u="bob", c=f"text{n}").allowed
    clock.set(START + 10 + 86_400)
    assert guard.hit("p", u="bob", c="new").allowed  # writes bob's record a day ahead
    clock.set(START + 11, backwards=True)
    assert not any(guard.hit("p", u="bob", c=f"text{n}").allowed for n in range(18))


@pytest.mark.parametrize("strategy", RATE_STRATEGIES)
def test_a_refund_from_before_a_reset_never_takes_a_later_hit_judged_in_the_same_microsecond(
    make_guard: GuardFactory, clock: ManualClock, strategy: Strategy
) -> None:
    """Hit A, a reset, hit B, all at one pinned µs: A's receipt (its time, its state's birth)
    matched B's units, and refunding A gave back B's. A reset now ends its microsecond: what
    comes after it is judged at least 1 µs later, so no receipt from before can match it."""
    guard = make_guard([Policy("p", Rule("3/minute", by="u", strategy=strategy))])
    clock.set(START + 5)
    before = guard.hit("p", u="x")
    guard.reset("p", u="x")
    after = guard.hit("p", u="x")
    assert before.allowed
    assert after.allowed
    assert guard.refund(before).remaining == 2  # nothing of B's given back
    assert guard.peek("p", u="x").remaining == 2
    assert guard.refund(after).remaining == 3  # B's own receipt still gives its unit back
