"""Memory, Redis (records in hashes of their own, or shared in bins) and Redis Cluster make
identical decisions (pinned clocks), for every strategy,
for random sequences of hits, peeks, refunds, resets, batches, per-key limits set, lapsing
and cleared, and time steps (back ones too), calendar rules across local midnights and DST
changes, with dimension
values that contain ``{``, ``}``, ``:``, non-ASCII and nothing at all; and over long runs that
make the Lua re-encode its logs and prune its records."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from redis import Redis

from freqguard import (
    ConfigError,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    QuietHours,
    Rate,
    Rule,
    Strategy,
    TierRates,
)
from freqguard.backends.redis import RedisBackend
from freqguard.script.contract import STALE_GRACE_US
from tests.conformance.test_lease_exits import EVERY_STORE
from tests.conftest import START, examples, flush, flush_scripts
from tests.reference import RATE_STRATEGIES
from tests.servers import RedisServer, state_keys

LAG = 0.3  # seconds; below STALE_GRACE_US
assert LAG * 1_000_000 < STALE_GRACE_US

VALUES = ["a", "{x}", "}{", "a:b", "é", "", "18829340001", "ü" * 70, "=1", "*p"]
DIMS = [(), ("u",), ("u", "c"), ("c",), ("c", "u")]


@st.composite
def rule(draw: st.DrawFn, strategies: Sequence[Strategy] | None = None) -> Rule:
    strategy = draw(st.sampled_from(strategies or RATE_STRATEGIES))
    window = draw(st.integers(1, 30)) * 100_000 + draw(st.sampled_from([0, 1, 333]))
    return Rule(
        Rate(draw(st.integers(1, 5)), timedelta(microseconds=window)),
        draw(st.sampled_from(DIMS)),
        strategy,
        burst=draw(st.none() | st.integers(1, 6)) if strategy.uses_burst else None,
        shadow=draw(st.integers(0, 4)) == 0,
    )


ctx = st.fixed_dictionaries({"u": st.sampled_from(VALUES), "c": st.sampled_from(VALUES)})
# an op names contexts by their index in a small per-example pool, so that keys repeat and
# limits are reached
pick = st.integers(0, 2)
hit_one = st.tuples(st.just("hit"), pick, st.just(1))
retry = st.tuples(st.just("retry"), st.just(0), st.sampled_from([-1, 0]))
op = st.one_of(
    st.tuples(st.just("hit"), pick, st.integers(0, 3)),
    hit_one,
    hit_one,
    hit_one,
    retry,
    st.tuples(st.just("peek"), pick, st.integers(0, 3)),
    st.tuples(st.just("refund"), pick, st.integers(0, 3)),
    # refund(decision) of the k-th admitted hit so far (exact, once)
    st.tuples(st.just("undo"), st.just(0), st.integers(0, 30)),
    st.tuples(st.just("undo"), st.just(0), st.integers(0, 30)),
    # a reset of the states keyed by exactly some of the dimensions (a bit mask of them)
    st.tuples(st.just("reset"), pick, st.integers(0, 3)),
    st.tuples(st.just("many"), st.lists(pick, min_size=1, max_size=5), st.integers(0, 2)),
    st.tuples(st.just("advance"), st.just(0), st.integers(0, 40).map(lambda n: n * 50_000)),
    st.tuples(st.just("advance"), st.just(0), st.integers(1, 3)),
    # a clock that steps back (a failover to a server whose clock lags, see LAG)
    st.tuples(st.just("back"), st.just(0), st.integers(1, 6).map(lambda n: n * 50_000)),
    # to 1 µs before, or exactly to, the moment the last denied hit said it would fit
    st.tuples(st.just("retry"), st.just(0), st.sampled_from([-1, 0])),
    # a per-key limit: (context, rule) and (limit or None: exempt; window in 100 ms; ttl in
    # 100 ms or 0: for ever); cleared; read
    st.tuples(
        st.just("limit"),
        st.tuples(pick, st.integers(0, 3)),
        st.tuples(st.none() | st.integers(1, 6), st.integers(1, 30), st.integers(0, 20)),
    ),
    st.tuples(st.just("clear"), st.tuples(pick, st.integers(0, 3)), st.just(0)),
    st.tuples(st.just("limits"), pick, st.just(0)),
)


def _only(policy: Policy, context: dict[str, str], reads: bool = True) -> dict[str, Any]:
    """A context's dimensions of ``policy``, and (``reads``) what its rules read (a zone)
    if given."""
    out = {d: context[d] for d in policy.dimensions}
    if reads:
        out.update((r, context[r]) for r in policy.reads if r in context)
    return out


def _limit(guard: Guard, policy: Policy, context: dict[str, str], arg: Any, n: Any) -> None:
    """Set (``n`` given) or clear a per-key limit of one rule for a context's partition."""
    plan = guard._policies.plan(policy.name)
    index = arg[1] % len(policy.rules)
    if policy.rules[index].quiet is not None:  # no rate to limit (refused: tested apart)
        return
    part = next(p for p in plan.parts if index in p.rule_index)
    partition = part.layouts[0].partition
    where = {} if partition is None else {partition: context[partition]}
    rule = policy.rules[index].id
    if n == 0:
        guard.clear_limit("p", rule, **where)
        return
    limit, window, ttl = n
    length = timedelta(microseconds=window * 100_000)
    if policy.rules[index].calendar:  # a calendar rule's limit keeps its period
        length = policy.rules[index].rate.window
    rate = None if limit is None else Rate(limit, length)
    guard.set_limit("p", rule, rate, ttl=ttl / 10 or None, **where)


def _replay(
    guard: Guard, clock: ManualClock, policy: Policy, pool: list[dict[str, str]], ops: list[Any]
) -> list[object]:
    out: list[object] = []
    # the largest cost any hit may ask for (ConfigError above it is tested elsewhere)
    largest = min((r.capacity for r in policy.rules if not r.shadow), default=3)
    retry_us = 0
    latest = clock.now()
    admitted: list[Decision] = []
    for kind, arg, n in ops:
        latest = max(latest, clock.now())
        if kind == "advance":
            clock.advance(n / 1_000_000)
        elif kind == "hours":  # calendar periods: across local midnights and DST changes
            clock.advance(n * 3600)
        elif kind == "back":
            # a server whose clock lags the latest time seen by at most LAG: below the grace
            # for which both backends keep expired states, so they agree exactly
            clock.set(max(clock.now() - n / 1_000_000, latest - LAG, 0), backwards=True)
        elif kind == "retry":
            clock.advance(max(0, retry_us + n) / 1_000_000)
        elif kind == "many":
            contexts = [_only(policy, pool[i % len(pool)]) for i in arg]
            decisions = guard.hit_many("p", contexts, min(n, largest))
            admitted += [d for d in decisions if d.receipt is not None]
            out.append(decisions)
        elif kind in ("limit", "clear"):
            _limit(guard, policy, pool[arg[0] % len(pool)], arg, n)
        elif kind == "limits":
            out.append(guard.limits_for("p", **_only(policy, pool[arg % len(pool)], False)))
        elif kind == "undo":
            fresh = [d for d in admitted if d.receipt is not None and not d.receipt.spent]
            if fresh:
                out.append(guard.refund(fresh[n % len(fresh)]))
        else:
            context = _only(policy, pool[arg % len(pool)])
            if kind == "hit":
                decision = guard.hit("p", min(n, largest), **context)
                retry_us = round(decision.retry_after * 1_000_000)
                if decision.receipt is not None:
                    admitted.append(decision)
                    out.append(decision.receipt.times_us)
                out.append(decision)
            elif kind == "peek":  # what a hit of that cost would get
                out.append(guard.peek("p", min(n, largest), **context))
            elif kind == "refund":
                out.append(guard.refund("p", n, **context))
            else:
                dims = [d for i, d in enumerate(policy.dimensions) if n >> i & 1]
                try:
                    out.append(guard.reset("p", **{d: context[d] for d in dims}))
                except ConfigError as exc:  # no rule keyed by exactly those dimensions
                    out.append(str(exc))
        out.append(clock.now_us())
    return out


def _assert_alike(
    backends: list[Any], policy: Policy, pool: list[dict[str, str]], ops: list[Any], start: int
) -> None:
    """The same operations on each backend, from the same pinned time, decide alike."""
    results = []
    for backend in backends:
        clock = ManualClock(start)
        results.append(_replay(Guard(backend, [policy], clock=clock), clock, policy, pool, ops))
    for result in results[1:]:
        assert result == results[0]


def _unique(
    rules: list[Rule],
    priorities: tuple[str, ...] = (),
    quiet: QuietHours | None = None,
    names: Sequence[str] = (),
) -> Policy:
    """``rules`` as a policy, named ``r0``, ``r1``... (or ``names``)."""
    names = names or [f"r{i}" for i in range(len(rules))]
    return Policy(
        "p",
        *(
            Rule(
                r.rate,
                r.by,
                r.strategy,
                name=names[i],
                burst=r.burst,
                shadow=r.shadow,
                calendar=r.calendar,
                tz=r.tz,
                tz_from=r.tz_from,
                only=r.only,
                caps=dict(r.caps) or None,
            )
            for i, r in enumerate(rules)
        ),
        priorities=priorities,
        quiet=quiet,
    )


#: A policy of up to four rules, the contexts its operations draw from, the operations, and
#: where the clock starts (near time 0, a ManualClock()'s default, every packed time is at
#: its smallest): what the differential tests replay on each store.
replays = given(
    rules=st.lists(rule(), min_size=1, max_size=4),
    pool=st.lists(ctx, min_size=1, max_size=3),
    ops=st.lists(op, min_size=1, max_size=40),
    start=st.sampled_from([1_700_000_000, 0]),
)


@settings(max_examples=examples(80))
@replays
def test_memory_redis_and_cluster_decide_alike(
    redis_backend: RedisBackend,
    binned_backend: RedisBackend,
    cluster_backend: RedisBackend,
    scripts_backend: RedisBackend,
    scripts_binned_backend: RedisBackend,
    scripts_cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    scripts_server: RedisServer,
    scripts_cluster: list[RedisServer],
    rules: list[Rule],
    pool: list[dict[str, str]],
    ops: list[Any],
    start: int,
) -> None:
    """... and Redis with records shared in bins (on one server with the plain records:
    other keys), and servers and a cluster without Redis Functions (EVAL scripts; on the
    server, records in bins too)."""
    flush([redis_server, *redis_cluster])
    flush_scripts([scripts_server, *scripts_cluster])
    policy = _unique(rules)
    backends = [
        MemoryBackend(),
        redis_backend,
        binned_backend,
        cluster_backend,
        scripts_backend,
        scripts_binned_backend,
        scripts_cluster_backend,
    ]
    _assert_alike(backends, policy, pool, ops, start)


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


ZONES = ["UTC", "Asia/Shanghai", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"]


@st.composite
def calendar_rule(draw: st.DrawFn) -> Rule:
    period = draw(st.sampled_from(["1 day", "7 days", "1 month"]))
    zone = draw(st.sampled_from([None, *ZONES]))  # None: each hit's own (tz_from)
    return Rule(
        f"{draw(st.integers(1, 5))} per {period}",
        draw(st.sampled_from(DIMS[1:])),
        calendar=True,
        tz=zone,
        tz_from="tz" if zone is None else None,
        shadow=draw(st.integers(0, 4)) == 0,
    )


calendar_ctx = st.fixed_dictionaries(
    {
        "u": st.sampled_from(VALUES),
        "c": st.sampled_from(VALUES),
        "tz": st.sampled_from(ZONES),
        "priority": st.sampled_from(["t", "m"]),
    }
)


@st.composite
def priority_rule(draw: st.DrawFn) -> Rule:
    """A rule for one priority only, or capped for one (its capacity permitting)."""
    r = draw(rule())
    only = draw(st.sampled_from([None, ("m",), ("t",)]))
    caps = None
    if r.capacity > 1 and draw(st.booleans()):
        capped = draw(st.sampled_from(only or ("t", "m")))
        caps = {capped: draw(st.integers(1, r.capacity - 1))}
    return Rule(r.rate, r.by, r.strategy, burst=r.burst, shadow=r.shadow, only=only, caps=caps)


@st.composite
def quiet_hours(draw: st.DrawFn) -> QuietHours | None:
    start = draw(st.sampled_from(["21:00", "00:30", "12:00", "23:59", "01:30"]))
    end = draw(
        st.sampled_from(["08:00", "06:45", "00:00", "13:00", "03:00"]).filter(
            lambda end: end != start
        )
    )
    zone = draw(st.sampled_from([None, "UTC", "America/New_York"]))  # None: the hit's
    exempt = draw(st.sampled_from([(), ("t",)]))
    if draw(st.booleans()):
        return None
    return QuietHours(start, end, tz=zone, tz_from="tz" if zone is None else None, exempt=exempt)


calendar_op = st.one_of(
    op,
    st.tuples(st.just("hours"), st.just(0), st.integers(1, 30)),
    st.tuples(st.just("hours"), st.just(0), st.integers(1, 3)),
)
# just before local midnights and the 2026 DST changes of New York and Berlin, and 0
DAY_EDGES = [
    1_772_945_999,  # 2026-03-08 04:59:59 UTC: New York's last second before a 23-hour day
    1_793_505_599,  # 2026-11-01 03:59:59 UTC: before its 25-hour day
    1_774_738_799,  # 2026-03-28 22:59:59 UTC: Berlin, before its 23-hour day
    1_792_879_199,  # 2026-10-24 21:59:59 UTC: before its 25-hour day
    0,
]


@settings(max_examples=examples(60))
@example(  # a batch on a new bin: its denied second hit ran before the first's write
    rules=[Rule("1/day", by="u", calendar=True, tz_from="tz", shadow=True)],
    quiet=QuietHours("21:00", "08:00", tz_from="tz"),
    pool=[
        {"u": "a", "c": "a", "tz": "Asia/Shanghai", "priority": "t"},
        {"u": "a", "c": "a", "tz": "UTC", "priority": "t"},
    ],
    ops=[("many", [0, 1], 1)],
    start=1_772_945_999,
)
@given(
    rules=st.lists(calendar_rule() | rule() | priority_rule(), min_size=1, max_size=3),
    quiet=quiet_hours(),
    pool=st.lists(calendar_ctx, min_size=1, max_size=3),
    ops=st.lists(calendar_op, min_size=1, max_size=40),
    start=st.sampled_from(DAY_EDGES),
)
def test_messaging_rules_decide_alike(
    redis_backend: RedisBackend,
    binned_backend: RedisBackend,
    cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    rules: list[Rule],
    quiet: QuietHours | None,
    pool: list[dict[str, str]],
    ops: list[Any],
    start: int,
) -> None:
    """Calendar rules (fixed zones and each hit's own) beside rolling ones, rules for some
    priorities only or capped for one, quiet hours (crossing midnight or not, exempting a
    priority or not); hits an hour or a day apart across local midnights and DST changes,
    zones and priorities changing between hits of a partition, per-key limits."""
    flush([redis_server, *redis_cluster])
    prioritized = quiet is not None or any(r.only or r.caps for r in rules)
    policy = _unique(rules, ("t", "m") if prioritized else (), quiet)
    backends = [MemoryBackend(), redis_backend, binned_backend, cluster_backend]
    _assert_alike(backends, policy, pool, ops, start)


@pytest.mark.parametrize("strategy", [Strategy.SLIDING_LOG, Strategy.CONCURRENCY])
@pytest.mark.parametrize("store", EVERY_STORE)
def test_a_window_made_longer_counts_the_same_entries_in_every_store(
    request: pytest.FixtureRequest, store: str, strategy: Strategy
) -> None:
    """Entries that left the window while a later write kept the log are dropped by that
    write in every store: the Lua kept them until the cap pushed them out (the Python twin
    dropped them), so a per-key limit that made the window longer counted one more hit on
    Redis than in memory."""
    backend = MemoryBackend() if store == "memory" else request.getfixturevalue(f"{store}_backend")
    clock = ManualClock(START)
    leases = strategy is Strategy.CONCURRENCY
    rate = "5 concurrent" if leases else "5 per 30 seconds"
    rule = Rule(rate, by="u", strategy=strategy, name="r", lease=30.0 if leases else None)
    guard = Guard(backend, [Policy("p", rule)], clock=clock)
    take = guard.take_lease if strategy is Strategy.CONCURRENCY else guard.hit
    for step in (0, 20, 20):  # at 0, 20 and 40 s: the first has left the 30 s window
        clock.advance(step)
        assert take("p", u="a").allowed
    longer = "5 concurrent" if strategy is Strategy.CONCURRENCY else "5 per 60 seconds"
    guard.set_limit("p", "r", longer, u="a")
    if strategy is Strategy.CONCURRENCY:  # a lease's length is the rule's: a deploy
        rule = Rule(rate, by="u", strategy=strategy, name="r", lease=60.0)
        guard = Guard(backend, [Policy("p", rule)], clock=clock)
    assert guard.peek("p", u="a").remaining == 3  # the hits at 20 and 40 s


@pytest.mark.parametrize("strategy", RATE_STRATEGIES)
def test_a_per_key_limit_that_makes_the_window_longer_decides_alike(
    redis_backend: RedisBackend,
    binned_backend: RedisBackend,
    scripts_backend: RedisBackend,
    cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    scripts_server: RedisServer,
    strategy: Strategy,
) -> None:
    """Hits under a short window, some of them out of it by the last; then a per-key limit
    over a longer one: every store counts the same hits again (each strategy's state as its
    writes left it)."""
    flush([redis_server, *redis_cluster])
    flush_scripts([scripts_server])
    seen = []
    for backend in (
        MemoryBackend(),
        redis_backend,
        binned_backend,
        scripts_backend,
        cluster_backend,
    ):
        clock = ManualClock(START)
        guard = Guard(
            backend,
            [Policy("p", Rule("5 per 30 seconds", by="u", strategy=strategy, name="r"))],
            clock=clock,
        )
        for step in (0, 10, 10, 10, 10):
            clock.advance(step)
            guard.hit("p", u="a")
        guard.set_limit("p", "r", "5 per 120 seconds", u="a")
        seen.append([guard.peek("p", u="a"), guard.hit("p", u="a"), guard.hit("p", 2, u="a")])
    assert all(found == seen[0] for found in seen[1:])


@settings(max_examples=examples(40))
@replays
def test_a_real_redis_6_2_decides_as_memory(
    redis62_server: RedisServer,
    rules: list[Rule],
    pool: list[dict[str, str]],
    ops: list[Any],
    start: int,
) -> None:
    """The store ``scripts="eval"`` is for, for real: Redis 6.2 has no Functions, and keeps
    no global of a script between calls (6.2.7 and later), so every call builds the library;
    its records plain and in bins decide as memory's."""
    flush_scripts([redis62_server])
    plain = RedisBackend(Redis(port=redis62_server.port, socket_timeout=5), scripts="eval")
    binned = RedisBackend(Redis(port=redis62_server.port, db=1, socket_timeout=5), bins=2)
    try:
        _assert_alike([MemoryBackend(), plain, binned], _unique(rules), pool, ops, start)
    finally:
        plain.close()
        binned.close()


@pytest.mark.parametrize("strategy", [Strategy.SLIDING_LOG, Strategy.ROLLING_WINDOW])
@pytest.mark.parametrize("store", EVERY_STORE[:-1])  # the cluster: the same function
def test_a_tiers_rate_is_the_rules_own_for_its_contexts_on_every_store(
    request: pytest.FixtureRequest, store: str, strategy: Strategy
) -> None:
    """1 per 2 s, 1 a second for plan "pro": a pro hit, a second, then a hit of another
    plan on the same key. Memory kept the state by the rule's base rate under the tier (2 s,
    the keeping a per-key limit gets) and denied it; Redis kept the tier's, as the specs it
    reads say, and admitted it (found by the operations model). A tier's rate is the rule's
    own for its contexts, on every store: a log keeps the tier's second, so it admits; a
    rolling window's ring, carried to the 2 s window's sub-windows, still counts the pro
    hit's, so it denies (the safe side, as any change of window)."""
    backend = MemoryBackend() if store == "memory" else request.getfixturevalue(f"{store}_backend")
    clock = ManualClock(START)
    tier = TierRates("plan", {"pro": "1/second"})
    rule = Rule("1 per 2 seconds", by="u", strategy=strategy, name="r", rate_for=tier)
    guard = Guard(backend, [Policy("p", rule)], clock=clock)
    assert guard.hit("p", u="a", plan="pro").allowed
    clock.advance(1)
    assert guard.hit("p", u="a", plan="free").allowed == (strategy is Strategy.SLIDING_LOG)


@pytest.mark.parametrize("strategy", [Strategy.SLIDING_LOG, Strategy.ROLLING_WINDOW])
@pytest.mark.parametrize("store", EVERY_STORE[:-1])  # the cluster: the same function
def test_a_stricter_per_key_limit_never_makes_a_rule_forget_its_own_window(
    request: pytest.FixtureRequest, store: str, strategy: Strategy
) -> None:
    """100 an hour, all taken; then 1 a minute for two minutes, one hit under it; then the
    rule's own rate again: the hour's hits still count. Under the limit each write kept only
    what the limit's window and count need, so once it was cleared the hour began afresh:
    201 admitted in three minutes (review)."""
    backend = MemoryBackend() if store == "memory" else request.getfixturevalue(f"{store}_backend")
    clock = ManualClock(START)
    rule = Rule("100/hour", by="u", strategy=strategy, name="r")
    guard = Guard(backend, [Policy("p", rule)], clock=clock)
    admitted = sum(guard.hit("p", u="a").allowed for _ in range(100))
    clock.advance(60)
    guard.set_limit("p", "r", "1/minute", u="a")
    clock.advance(60)
    admitted += guard.hit("p", u="a").allowed
    clock.advance(60)
    guard.clear_limit("p", "r", u="a")
    admitted += sum(guard.hit("p", u="a").allowed for _ in range(200))
    assert admitted == 101
