"""Memory, Redis and Redis Cluster make identical decisions (pinned clocks), for every strategy,
for random sequences of hits, peeks, refunds, resets, batches and time steps, with dimension
values that contain ``{``, ``}``, ``:``, non-ASCII and nothing at all."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import Guard, ManualClock, MemoryBackend, Policy, Rate, Rule, Strategy
from freqguard.backends.redis import RedisBackend
from tests.conftest import flush
from tests.servers import RedisServer

VALUES = ["a", "{x}", "}{", "a:b", "é", "", "18829340001", "ü" * 70, "=1", "*p"]
DIMS = [(), ("u",), ("u", "c"), ("c",), ("c", "u")]


@st.composite
def rule(draw: st.DrawFn) -> Rule:
    strategy = draw(st.sampled_from(list(Strategy)))
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
    st.tuples(st.just("peek"), pick, st.just(1)),
    st.tuples(st.just("refund"), pick, st.integers(0, 3)),
    st.tuples(st.just("reset"), pick, st.just(1)),
    st.tuples(st.just("many"), st.lists(pick, min_size=1, max_size=5), st.integers(0, 2)),
    st.tuples(st.just("advance"), st.just(0), st.integers(0, 40).map(lambda n: n * 50_000)),
    st.tuples(st.just("advance"), st.just(0), st.integers(1, 3)),
    # to 1 µs before, or exactly to, the moment the last denied hit said it would fit
    st.tuples(st.just("retry"), st.just(0), st.sampled_from([-1, 0])),
)


def _only(policy: Policy, context: dict[str, str]) -> dict[str, Any]:
    return {d: context[d] for d in policy.dimensions}


def _replay(
    guard: Guard, clock: ManualClock, policy: Policy, pool: list[dict[str, str]], ops: list[Any]
) -> list[object]:
    out: list[object] = []
    # the largest cost any hit may ask for (ConfigError above it is tested elsewhere)
    largest = min((r.capacity for r in policy.rules if not r.shadow), default=3)
    retry_us = 0
    for kind, arg, n in ops:
        if kind == "advance":
            clock.advance(n / 1_000_000)
        elif kind == "retry":
            clock.advance(max(0, retry_us + n) / 1_000_000)
        elif kind == "many":
            contexts = [_only(policy, pool[i % len(pool)]) for i in arg]
            out.append(guard.hit_many("p", contexts, min(n, largest)))
        else:
            context = _only(policy, pool[arg % len(pool)])
            if kind == "hit":
                decision = guard.hit("p", min(n, largest), **context)
                retry_us = round(decision.retry_after * 1_000_000)
                out.append(decision)
            elif kind == "peek":
                out.append(guard.peek("p", **context))
            elif kind == "refund":
                out.append(guard.refund("p", n, **context))
            else:
                guard.reset("p", **context)
        out.append(clock.now_us())
    return out


def _unique(rules: list[Rule]) -> Policy:
    return Policy(
        "p",
        *(
            Rule(r.rate, r.by, r.strategy, name=f"r{i}", burst=r.burst, shadow=r.shadow)
            for i, r in enumerate(rules)
        ),
    )


@settings(max_examples=300)
@given(
    rules=st.lists(rule(), min_size=1, max_size=4),
    pool=st.lists(ctx, min_size=1, max_size=3),
    ops=st.lists(op, min_size=1, max_size=40),
)
def test_memory_redis_and_cluster_decide_alike(
    redis_backend: RedisBackend,
    cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    rules: list[Rule],
    pool: list[dict[str, str]],
    ops: list[Any],
) -> None:
    flush([redis_server, *redis_cluster])
    policy = _unique(rules)
    results = []
    for backend in (MemoryBackend(), redis_backend, cluster_backend):
        clock = ManualClock(1_700_000_000)
        results.append(_replay(Guard(backend, [policy], clock=clock), clock, policy, pool, ops))
    assert results[1] == results[0]
    assert results[2] == results[0]
