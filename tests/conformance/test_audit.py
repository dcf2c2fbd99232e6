"""The concurrency audit (tests/audit/): its checker on hand-made logs, then short real runs
on memory, standalone Redis and Redis Cluster that must show no violation, and must have hit
the limits hard enough for that to mean something."""

from __future__ import annotations

import pytest

from freqguard import Decision, Guard, ManualClock, MemoryBackend, Policy, Rule
from freqguard.engine.ops import Op
from freqguard.script.calls import Reply
from freqguard.script.contract import HIT
from tests.audit import (
    LIMITED,
    NO_REFUNDS,
    Admission,
    AuditConfig,
    AuditReport,
    Refund,
    Target,
    check_rules,
    check_times,
    run_audit,
)
from tests.conftest import GuardFactory
from tests.servers import RedisServer

S = 1_000_000  # µs
# The bug the audit found (pinned below): remove with the engine's fix.


def _admission(
    seq: int, at: float, cost: int = 1, *, policy: str = "p", worker: int = 1, span: int = 0
) -> Admission:
    t = round(at * S)
    return Admission(worker << 32 | seq, seq, policy, (t,), cost, ("x",), 1, span, span + 1)


def _refund(of: Admission, at: float, seq: int = 99) -> Refund:
    return Refund(of.aid, seq, (round(at * S),), 0, 1)


def _violations(policy: Policy, admissions: list[Admission], refunds: list[Refund]) -> int:
    (result,) = check_rules(admissions, refunds, [policy])
    return result.violations


def test_sliding_log_counts_cost_units_in_every_window() -> None:
    policy = Policy("p", Rule("2/second", by="u"))
    ok = [_admission(1, 0.0), _admission(2, 0.9), _admission(3, 1.0)]
    assert _violations(policy, ok, []) == 0
    # two windows end at an admission and hold three: (-0.000001, 0.999999] and (0, 1]
    assert _violations(policy, [*ok, _admission(4, 0.999999)], []) == 2
    heavy = _admission(1, 0.0, cost=2)
    assert _violations(policy, [heavy, _admission(2, 0.5)], []) == 1
    assert _violations(policy, [heavy, _admission(2, 0.5)], [_refund(heavy, 0.6)]) == 0


def test_a_rule_whose_limit_changes_is_held_to_the_largest_of_its_rates() -> None:
    """``limited/user`` is 6/second and alternates with 12 and 3 a second: twelve in a second
    pass the check, a thirteenth does not."""
    assert LIMITED["limited", "user"] == ("12/second", "3/second")
    log = Policy("limited", Rule("6/second", by="u", name="user"))
    twelve = [_admission(n, n / 100, policy="limited") for n in range(12)]
    assert _violations(log, twelve, []) == 0
    assert _violations(log, [*twelve, _admission(13, 0.5, policy="limited")], []) == 1


def test_a_refund_takes_back_the_callers_own_hit_in_the_model() -> None:
    """The issue's case: A at 0, B at 0.9, A refunded; C and D at 1.001 and 1.002 then make
    three with B inside one second, whatever the engine took back."""
    policy = Policy("p", Rule("2/second", by="u"))
    a, b = _admission(1, 0.0), _admission(2, 0.9)
    later = [_admission(3, 1.001), _admission(4, 1.002)]
    assert _violations(policy, [a, b, *later], [_refund(a, 0.95)]) == 1


def test_fixed_window_counts_each_aligned_window() -> None:
    policy = Policy("p", Rule("2/second", by="u", strategy="fixed-window"))
    stream = [_admission(1, 0.9, cost=2), _admission(2, 1.0), _admission(3, 1.95)]
    assert _violations(policy, stream, []) == 0
    assert _violations(policy, [*stream, _admission(4, 0.95)], []) == 1


@pytest.mark.parametrize("strategy", ["gcra", "token-bucket"])
def test_buckets_replay_refunds_at_their_time(strategy: str) -> None:
    """burst 1, one per second. A refund gives back only the part of the hit's span still
    ahead of it: refunded at 1.6 after B at 1.5, A's unit had come back already."""
    policy = Policy("p", Rule("1/second", by="u", strategy=strategy, burst=1))
    a = _admission(1, 0.0)
    late = [_admission(2, 1.5), _admission(3, 1.7)]
    assert _violations(policy, [a, *late], [_refund(a, 1.6)]) == 1
    assert _violations(policy, [a, _admission(2, 0.6)], [_refund(a, 0.5)]) == 0
    assert _violations(policy, [a, _admission(2, 0.4)], [_refund(a, 0.5)]) == 1
    assert _violations(policy, [a, _admission(2, 0.6)], []) == 1


@pytest.mark.parametrize("strategy", ["gcra", "token-bucket"])
def test_a_bucket_refund_gives_back_the_span_where_it_is_now(strategy: str) -> None:
    """burst 4, one per second: A (cost 2), B and C at 0 hold [0, 2], [2, 3], [3, 4].
    Refunding A at 0.1 moves B to [0.1, 1.1] and C to [1.1, 2.1]; refunding B at 1.5 then
    gives nothing back (B's arrival time as recorded, 3, would give back 1), so only three
    more fit at 1.5. With A and B taken as never having happened, four would."""
    policy = Policy("p", Rule("1/second", by="u", strategy=strategy, burst=4))
    a, b = _admission(1, 0.0, cost=2), _admission(2, 0.0)
    stream = [a, b, _admission(3, 0.0), *(_admission(4 + n, 1.5) for n in range(4))]
    (result,) = check_rules(stream, [_refund(a, 0.1), _refund(b, 1.5)], [policy])
    assert (result.violations, result.hard) == (1, 0)
    (result,) = check_rules(stream[:-1], [_refund(a, 0.1), _refund(b, 1.5)], [policy])
    assert (result.violations, result.hard) == (0, 0)


@pytest.mark.parametrize("strategy", ["gcra", "token-bucket"])
def test_a_refund_after_a_refund_gives_back_only_what_is_still_ahead(
    make_guard: GuardFactory, clock: ManualClock, strategy: str
) -> None:
    """What the audit found, pinned: burst 2, one per second. A at 0; B at 0.3 (its span
    [1, 2]); A refunded at 0.3 (B's span moves to [0.3, 1.3]); C at 1.3; B refunded at 1.3,
    which must give back nothing (time returned B's unit at 1.3) but gives back 0.7 s from
    B's recorded arrival time 2.0. Then D and E both passed at 1.8: C, D and E, never
    refunded, three units in 0.5 s, where at most 2 + 0.5 fit."""
    guard = make_guard([Policy("p", Rule("1/second", by="u", strategy=strategy, burst=2))])
    a = guard.hit("p", u="x")
    clock.advance(0.3)
    b = guard.hit("p", u="x")
    guard.refund(a)
    clock.advance(1.0)
    assert guard.hit("p", u="x").allowed
    guard.refund(b)
    clock.advance(0.5)
    assert guard.hit("p", u="x").allowed
    assert not guard.hit("p", u="x").allowed


def test_two_compensations_give_back_only_what_is_still_ahead() -> None:
    """The same through multi-part compensation, with no refund at all: a global gcra (burst
    2, one per second) and a per-user cap that denies X1 and X2 after the global part took
    them. X1 (at 0) is compensated at 0.3, after X2 (at 0.3) queued behind it; X2 is
    compensated at 1.3, when time had returned its unit, yet gave back 0.7 s. Then K3 at
    1.3, K4 and K5 at 1.8 all passed: three admitted units in 0.5 s."""
    clock = ManualClock(1e9)
    policy = Policy(
        "p",
        Rule("1/second", strategy="gcra", burst=2, name="all"),
        Rule("1/day", by="u", name="user"),
    )
    guard = Guard(MemoryBackend(clock=clock), [policy])  # the backend's time, moved by hand
    backend = guard.backend

    def start(user: str) -> tuple[Op[Decision], list[Reply]]:
        op = guard._hits.decide("p", 1, {"u": user}, HIT)
        step = next(op)
        assert isinstance(step, list)
        return op, backend.execute_many(step)  # the global part admits and consumes

    def finish(op: Op[Decision], replies: list[Reply]) -> Decision:
        while True:
            try:
                step = op.send(replies)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            assert isinstance(step, list)
            replies = backend.execute_many(step)

    assert guard.hit("p", u="a").allowed  # a and b are used up for the day
    assert guard.hit("p", u="b").allowed
    clock.advance(100)  # the global bucket is full again
    x1 = start("a")
    clock.advance(0.3)
    x2 = start("b")
    assert not finish(*x1).allowed
    clock.advance(1.0)
    assert guard.hit("p", u="c").allowed
    assert not finish(*x2).allowed
    clock.advance(0.5)
    assert guard.hit("p", u="d").allowed
    assert not guard.hit("p", u="e").allowed


def test_time_per_state_must_not_go_back() -> None:
    policy = Policy("p", Rule("9/second", by="u"))
    first = _admission(1, 1.0, worker=1, span=10)
    assert check_times([first, _admission(1, 1.1, worker=2, span=20)], [], [policy]) == []
    assert len(check_times([first, _admission(1, 0.9, worker=2, span=20)], [], [policy])) == 1
    assert len(check_times([first, _admission(2, 0.9, worker=1, span=5)], [], [policy])) == 1
    overlapping = _admission(1, 0.9, worker=2, span=5)  # started before the first answered
    assert check_times([first, overlapping], [], [policy]) == []


def test_leases_are_held_until_released_or_expired_in_the_model() -> None:
    policy = Policy("p", Rule("2 concurrent", by="u", lease=1, name="held"))
    a, b, c = _admission(1, 1.0), _admission(2, 1.2), _admission(3, 1.5)
    assert _violations(policy, [a, b, c], []) == 1  # three held at 1.5 s
    assert _violations(policy, [a, b, c], [_refund(a, 1.4)]) == 0  # a released first
    assert _violations(policy, [a, b, c], [_refund(a, 1.5)]) == 0  # released at that µs
    assert _violations(policy, [a, b, _admission(3, 2.0)], []) == 0  # a expired at 2.0 s
    late = _refund(a, 2.5)  # released after its lease ran out: it held until 2.0 s
    assert _violations(policy, [a, b, _admission(3, 1.9)], [late]) == 1


def _assert_sound(report: AuditReport) -> None:
    """No violation, and a workload that hit its limits: denials, refunds and multi-part
    compensation all happened, on every policy where they can."""
    text = report.format()
    print(text)
    assert not report.errors, text
    assert not report.time_violations, text
    assert not [r for r in report.rules if r.violations], text
    assert report.total("denied") > 0.3 * report.total("hits"), text
    assert report.total("batches") > 0, text
    for name, counts in report.counts.items():
        assert counts["admitted"] > 0, text
        assert counts["denied"] > 0, text
        if name not in NO_REFUNDS:
            assert counts["refunds"] > 0, text
    for name in ("global", "mixed"):
        assert report.counts[name]["compensated"] > 0, text
    for name, _ in LIMITED:
        assert report.counts[name]["limits"] > 0, text
    for rule in report.rules:
        assert rule.keys > 0, text


@pytest.mark.slow
def test_memory_under_threads_and_tasks() -> None:
    config = AuditConfig(Target("memory"), seconds=10, threads=6, tasks=12, seed=1)
    _assert_sound(run_audit(config))


@pytest.mark.slow
def test_redis_under_processes_threads_and_tasks(redis_server: RedisServer) -> None:
    target = Target("redis", redis_server.port)
    config = AuditConfig(target, seconds=12, processes=4, threads=3, tasks=8, seed=2)
    _assert_sound(run_audit(config))


@pytest.mark.slow
def test_binned_redis_under_processes_threads_and_tasks(redis_server: RedisServer) -> None:
    """Records shared in three bins a policy: every recipient's record beside others in
    one hash, written by many clients at once."""
    target = Target("redis", redis_server.port, bins=3)
    config = AuditConfig(target, seconds=8, processes=4, threads=3, tasks=8, seed=4)
    _assert_sound(run_audit(config))


@pytest.mark.slow
def test_redis_cluster_under_processes_threads_and_tasks(
    redis_cluster: list[RedisServer],
) -> None:
    target = Target("cluster", redis_cluster[0].port)
    config = AuditConfig(target, seconds=10, processes=3, threads=3, tasks=8, seed=3)
    _assert_sound(run_audit(config))
