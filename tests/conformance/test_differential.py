"""Memory, Redis (records in hashes of their own, or shared in bins) and Redis Cluster make
identical decisions (pinned clocks), for every strategy, for random sequences of hits, peeks,
refunds, resets, batches, per-key limits set, lapsing and cleared, and time steps (back ones
too), with dimension values that contain ``{``, ``}``, ``:``, non-ASCII and nothing at all;
and a real Redis 6.2 as memory does. The generators and the replay are here, imported by
other modules too (``rule``, ``ctx``, ``op``, ``_replay``, ``_assert_alike``, ``_unique``).

Beside it: messaging rules (calendar rules across local midnights and DST changes,
priorities, quiet hours) in ``test_differential_messaging.py``; the clock's edges (long runs
that make the Lua re-encode its logs and prune its records, clocks that step back, a retry's
microsecond, refunds near time 0) in ``test_differential_clock.py``; windows that a per-key
limit or a tier changes in ``test_differential_windows.py``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
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
)
from freqguard.backends.redis import RedisBackend
from freqguard.script.contract import STALE_GRACE_US
from tests.conftest import examples, flush, flush_scripts
from tests.reference import RATE_STRATEGIES
from tests.servers import RedisServer

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
    guard: Guard,
    clock: ManualClock,
    policy: Policy,
    pool: list[dict[str, str]],
    ops: list[Any],
    deploys: Sequence[Policy] = (),
) -> list[object]:
    """``ops`` on ``guard``; a ``deploy`` op registers the n-th of ``deploys`` (a policy
    named ``p`` too) on a new guard of the same store and clock, whose operations follow
    (a refund of a decision made before it included)."""
    out: list[object] = []
    # the largest cost any hit may ask for (ConfigError above it is tested elsewhere)
    largest = min((r.capacity for r in policy.rules if not r.shadow), default=3)
    retry_us = 0
    latest = clock.now()
    admitted: list[Decision] = []
    for kind, arg, n in ops:
        latest = max(latest, clock.now())
        if kind == "deploy":
            policy = deploys[n % len(deploys)]
            guard = Guard(guard.backend, [policy], clock=clock)
            largest = min((r.capacity for r in policy.rules if not r.shadow), default=3)
        elif kind == "advance":
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
                try:  # after a deploy that changed the policy: refused alike everywhere
                    out.append(guard.refund(fresh[n % len(fresh)]))
                except ConfigError as exc:
                    out.append(str(exc))
        else:
            context = _only(policy, pool[arg % len(pool)])
            if kind == "hit":
                try:  # a cost past a per-key limit's capacity: refused alike everywhere
                    decision = guard.hit("p", min(n, largest), **context)
                except ConfigError as exc:
                    out.append(str(exc))
                    continue
                retry_us = round(decision.retry_after * 1_000_000)
                if decision.receipt is not None:
                    admitted.append(decision)
                    out.append(decision.receipt.times_us)
                out.append(decision)
            elif kind == "peek":  # what a hit of that cost would get
                try:
                    out.append(guard.peek("p", min(n, largest), **context))
                except ConfigError as exc:
                    out.append(str(exc))
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
    backends: list[Any],
    policy: Policy,
    pool: list[dict[str, str]],
    ops: list[Any],
    start: int,
    deploys: Sequence[Policy] = (),
) -> None:
    """The same operations on each backend, from the same pinned time, decide alike."""
    results = []
    for backend in backends:
        clock = ManualClock(start)
        guard = Guard(backend, [policy], clock=clock)
        results.append(_replay(guard, clock, policy, pool, ops, deploys))
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
