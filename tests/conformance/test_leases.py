"""Concurrency rules: leases taken by ``Guard.lease`` and given back when the block ends.

Memory, Redis (hashes, bins of records, scripts) and Redis Cluster decide every random
sequence of leases taken, given back out of order, and time moving alike, and as a model of
held leases says; threads, processes' worth of tasks and a cluster never hold more than N at
once; a denied lease takes nothing; the rate rules beside it keep counting the call."""

from __future__ import annotations

import asyncio
import pickle
import threading
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import (
    AsyncGuard,
    ConfigError,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    Rate,
    Rule,
    Strategy,
    async_backend_from_url,
    backend_from_url,
)
from freqguard.backends.redis import RedisBackend
from freqguard.config import loads
from tests.conftest import examples, flush, flush_scripts
from tests.reference import RATE_STRATEGIES
from tests.servers import RedisServer

# -- the rule and the guard's face ----------------------------------------------------------


def test_a_concurrency_rule_is_written_n_concurrent_with_a_lease() -> None:
    rule = Rule("10 concurrent", by="user", lease=60)
    assert (rule.strategy, rule.limit, rule.lease) == (Strategy.CONCURRENCY, 10, 60)
    assert repr(rule) == "Rule('10 concurrent', by=('user',), lease=60)"
    assert Rule("2 concurrent", lease=0.5).lease == 0.5
    same = Rule(Rate(10, timedelta(seconds=60)), "user", "concurrency")
    assert same == rule
    assert pickle.loads(pickle.dumps(rule)) == rule


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"rate": "10 concurrent"}, "needs lease=SECONDS"),
        ({"rate": "10/minute", "lease": 60}, "lease=60 applies to a concurrency rule only"),
        ({"rate": "10/minute", "strategy": "concurrency"}, "written 'N concurrent'"),
        ({"rate": "10 concurrent", "lease": 60, "strategy": "gcra"}, "not gcra"),
        ({"rate": "0 concurrent", "lease": 60}, "at least 1, got 0"),
        ({"rate": "10001 concurrent", "lease": 60}, "at most 10000 leases"),
        ({"rate": "2 concurrent", "lease": float("nan")}, "lease must be a number"),
        ({"rate": "2 concurrent", "lease": -1}, "got -1"),
        ({"rate": "2 concurrent", "lease": True}, "got True"),
        ({"rate": "2 concurrent", "lease": "60"}, "got '60'"),
        ({"rate": "2 concurrent", "lease": 1e-9}, "at least one microsecond"),
        ({"rate": "2 concurrent", "lease": 1e12}, "at most 10 years"),
    ],
)
def test_a_concurrency_rule_missing_a_part_is_refused_naming_it(
    kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace("=", "=")):
        Rule(**kwargs)


LLM = Policy("llm", Rule("2 concurrent", by="user", lease=60), Rule("5/minute", by="user"))


def test_hit_and_its_kin_on_a_policy_with_leases_point_to_lease() -> None:
    guard = Guard(policies=[LLM], clock=ManualClock(1_000))
    for call in (
        lambda: guard.hit("llm", user="u"),
        lambda: guard.hit_many("llm", [{"user": "u"}]),
        lambda: guard.acquire("llm", timeout=1, user="u"),
    ):
        with pytest.raises(ConfigError, match=r"guard\.lease\('llm'"):
            call()
    assert guard.peek("llm", user="u").remaining == 2  # nothing was taken


def test_a_lease_is_given_back_however_its_block_ends_and_the_rate_keeps_counting() -> None:
    clock = ManualClock(1_000)
    guard = Guard(policies=[LLM], clock=clock)
    failing = guard.lease("llm", user="u")

    def call() -> None:
        with failing as decision:
            assert decision.allowed
            raise RuntimeError("the call failed")

    with pytest.raises(RuntimeError):
        call()
    with (
        guard.lease("llm", user="u") as a,
        guard.lease("llm", user="u") as b,
        guard.lease("llm", user="u") as c,
    ):
        assert [a.allowed, b.allowed, c.allowed] == [True, True, False]
        assert [r.id for r in c.denied_by] == ["cc.2.60s"]
        assert c.retry_after == 60.0  # the oldest lease frees itself then at the latest
    rules = {r.rule.id: r for r in guard.peek("llm", user="u").rules}
    # 3 calls made (the denied one took nothing): the rate counts them, the leases are free
    assert rules["sl.5.60s"].remaining == 2
    assert rules["cc.2.60s"].remaining == 2


def test_a_denied_rate_takes_no_lease_and_a_lease_never_given_back_frees_itself() -> None:
    clock = ManualClock(1_000)
    guard = Guard(policies=[LLM], clock=clock)
    for _ in range(5):
        with guard.lease("llm", user="u") as d:
            assert d.allowed
    with guard.lease("llm", user="u") as d:
        assert not d.allowed
        assert [r.id for r in d.denied_by] == ["sl.5.60s"]
    assert guard.peek("llm", user="v").allowed
    held = guard.lease("llm", user="v")
    assert held.__enter__().allowed  # its holder dies: never given back
    other = guard.lease("llm", user="v")
    assert other.__enter__().allowed
    with guard.lease("llm", user="v") as d:
        assert not d.allowed
    clock.advance(60)  # both leases free themselves
    with guard.lease("llm", user="v") as d:
        assert d.allowed


def test_a_per_key_limit_of_leases_and_a_reset_and_a_config_file() -> None:
    guard = Guard(policies=[LLM], clock=ManualClock(1_000))
    guard.set_limit("llm", "cc.2.60s", "1 concurrent", user="vip")
    with guard.lease("llm", user="vip") as a, guard.lease("llm", user="vip") as b:
        assert [a.allowed, b.allowed] == [True, False]
    with pytest.raises(ConfigError, match="written 'N concurrent'"):
        guard.set_limit("llm", "cc.2.60s", "3/minute", user="vip")
    held = guard.lease("llm", user="w")
    held.__enter__()
    guard.lease("llm", user="w").__enter__()
    guard.reset("llm", user="w")
    with guard.lease("llm", user="w") as d:
        assert d.allowed
    text = (
        '[[policy]]\nname = "llm"\nrules = [{ rate = "3 concurrent", by = "user", lease = 30 }]\n'
    )
    loaded = loads(text, "toml").policies[0]
    assert loaded.rules[0] == Rule("3 concurrent", by="user", lease=30)


def test_an_async_guard_takes_a_lease_with_async_with() -> None:
    guard = AsyncGuard(policies=[LLM], clock=ManualClock(1_000))

    async def main() -> list[bool]:
        async with (
            guard.lease("llm", user="u") as a,
            guard.lease("llm", user="u") as b,
            guard.lease("llm", user="u") as c,
        ):
            out = [a.allowed, b.allowed, c.allowed]
        async with guard.lease("llm", user="u") as d:
            return [*out, d.allowed]

    assert asyncio.run(main()) == [True, True, False, True]


# -- every store alike, and as the model ----------------------------------------------------

VALUES = ["a", "{x}", "é"]


@st.composite
def lease_policy(draw: st.DrawFn) -> Policy:
    by = draw(st.sampled_from([("u",), ()]))
    lease_us = draw(st.integers(1, 30)) * 100_000 + draw(st.sampled_from([0, 1, 333]))
    lease = Rate(draw(st.integers(1, 4)), timedelta(microseconds=lease_us))
    rules = [Rule(lease, by, "concurrency")]
    for i in range(draw(st.integers(0, 2))):
        strategy = draw(st.sampled_from(RATE_STRATEGIES))
        window = draw(st.integers(1, 30)) * 100_000
        rate = Rate(draw(st.integers(1, 6)), timedelta(microseconds=window))
        rules.append(Rule(rate, draw(st.sampled_from([("u",), ()])), strategy, name=f"r{i}"))
    return Policy("p", *rules)


op = st.one_of(
    st.tuples(st.just("take"), st.integers(0, 2), st.integers(1, 2)),
    st.tuples(st.just("take"), st.integers(0, 2), st.just(1)),
    st.tuples(st.just("give"), st.integers(0, 30), st.just(0)),
    st.tuples(st.just("advance"), st.just(0), st.integers(1, 40).map(lambda n: n * 50_000)),
    st.tuples(st.just("advance"), st.just(0), st.integers(1, 3)),
    st.tuples(st.just("peek"), st.integers(0, 2), st.just(0)),
)


class HeldModel:
    """The leases held, by context: (time taken, cost), given back ones removed."""

    def __init__(self, limit: int, lease_us: int) -> None:
        self.limit, self.lease_us = limit, lease_us
        self.held: dict[str, list[tuple[int, int]]] = {}

    def units(self, key: str, now: int) -> list[int]:
        live = [t for t, n in self.held.get(key, []) for _ in range(n) if t > now - self.lease_us]
        return sorted(live)

    def wait(self, key: str, now: int, cost: int) -> int:
        """µs until ``cost`` more leases can be held (0: now), with none given back."""
        live = self.units(key, now)
        excess = len(live) + cost - self.limit
        if excess <= 0:
            return 0
        if excess > len(live):
            return live[-1] + self.lease_us - now if live else self.lease_us
        return live[excess - 1] + self.lease_us - now


def _replay(guard: Guard, clock: ManualClock, policy: Policy, ops: list[Any]) -> list[object]:
    only = len(policy.rules) == 1
    rule = policy.rules[0]
    model = HeldModel(rule.limit, rule.rate.window_us)
    held: list[tuple[AbstractContextManager[Decision], str, int, int]] = []
    out: list[object] = []
    for name, arg, n in ops:
        ctx = {d: VALUES[arg % len(VALUES)] for d in policy.dimensions}
        key = VALUES[arg % len(VALUES)] if rule.by else ""
        now = clock.now_us()
        if name == "advance":
            clock.advance(n / 1_000_000)
        elif name == "peek":
            d = guard.peek("p", **ctx)
            out.append(("peek", d.allowed, d.remaining, round(d.retry_after * 1e6)))
        elif name == "take":
            n = min(n, *(r.capacity for r in policy.rules))  # a larger cost is refused
            lease = guard.lease("p", n, **ctx)
            d = lease.__enter__()
            wait = model.wait(key, now, n)
            if only:  # the model decides a policy of leases alone, exactly
                assert d.allowed == (wait == 0), (model.units(key, now), n)
                assert abs(round(d.retry_after * 1e6) - wait) <= 1
            if d.allowed:
                assert len(model.units(key, now)) + n <= rule.limit  # never more held
                held.append((lease, key, now, n))
                model.held.setdefault(key, []).append((now, n))
            out.append(("take", d.allowed, round(d.retry_after * 1e6), d.denied_by))
        elif held:  # give back the n-th lease held, out of order
            given, k, taken, cost = held.pop(arg % len(held))
            given.__exit__(None, None, None)
            model.held[k].remove((taken, cost))
    for left, *_ in held:
        left.__exit__(None, None, None)
    return out


@settings(max_examples=examples(40))
@given(policy=lease_policy(), ops=st.lists(op, min_size=1, max_size=40))
def test_every_store_holds_leases_alike_and_as_the_model(
    redis_backend: RedisBackend,
    binned_backend: RedisBackend,
    cluster_backend: RedisBackend,
    scripts_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    scripts_server: RedisServer,
    policy: Policy,
    ops: list[Any],
) -> None:
    flush([redis_server, *redis_cluster])
    flush_scripts([scripts_server])
    results = []
    for backend in (MemoryBackend(), redis_backend, binned_backend, cluster_backend):
        clock = ManualClock(1_700_000_000)
        results.append(_replay(Guard(backend, [policy], clock=clock), clock, policy, ops))
    clock = ManualClock(1_700_000_000)
    results.append(_replay(Guard(scripts_backend, [policy], clock=clock), clock, policy, ops))
    for result in results[1:]:
        assert result == results[0]


# -- many at once, on the store's own time ----------------------------------------------------

CAP = Policy("cap", Rule("3 concurrent", by="k", lease=60))


def _threads(guard: Guard) -> tuple[int, int]:
    """16 threads take leases of one key 40 times each: the most held at once, and how many
    were denied."""
    lock = threading.Lock()
    inflight, most, denied = [0], [0], [0]
    barrier = threading.Barrier(16)

    def worker() -> None:
        barrier.wait()
        for _ in range(40):
            with guard.lease("cap", k="hot") as d:
                if not d.allowed:
                    with lock:
                        denied[0] += 1
                    continue
                with lock:
                    inflight[0] += 1
                    most[0] = max(most[0], inflight[0])
                with lock:
                    inflight[0] -= 1

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return most[0], denied[0]


@pytest.mark.usefixtures("fast_switching")
def test_threads_never_hold_more_than_the_limit_on_memory() -> None:
    most, _ = _threads(Guard(MemoryBackend(), [CAP]))
    assert 1 <= most <= 3


def test_threads_never_hold_more_than_the_limit_on_redis_and_a_cluster(
    redis_server: RedisServer, redis_cluster: list[RedisServer]
) -> None:
    flush([redis_server, *redis_cluster])
    for url in (redis_server.url, f"redis+cluster://127.0.0.1:{redis_cluster[0].port}"):
        guard = Guard(backend_from_url(url), [CAP])
        try:
            most, _ = _threads(guard)
            assert 1 <= most <= 3
            assert guard.peek("cap", k="hot").remaining == 3  # every lease given back
        finally:
            guard.close()


def test_asyncio_tasks_never_hold_more_than_the_limit_on_redis(redis_server: RedisServer) -> None:
    flush([redis_server])

    async def main() -> tuple[int, int, int]:
        guard = AsyncGuard(async_backend_from_url(redis_server.url), [CAP])
        inflight, most, denied, asked = 0, 0, 0, 0
        gate, everyone = asyncio.Event(), asyncio.Event()

        async def task() -> None:
            nonlocal inflight, most, denied, asked
            async with guard.lease("cap", k="hot") as d:
                asked += 1
                if asked == 32:
                    everyone.set()
                if not d.allowed:
                    denied += 1
                    return
                inflight += 1
                most = max(most, inflight)
                await gate.wait()  # hold it until every task has asked
                inflight -= 1

        tasks = [asyncio.create_task(task()) for _ in range(32)]
        await asyncio.wait_for(everyone.wait(), 30)  # bounded: a real server answers
        gate.set()
        await asyncio.gather(*tasks)
        free = (await guard.peek("cap", k="hot")).remaining
        await guard.aclose()
        return most, denied, free

    assert asyncio.run(main()) == (3, 29, 3)


def test_a_lease_decorates_a_function_with_a_lease_each_call() -> None:
    """``@guard.lease(...)``, as contextlib's context managers decorate: a lease taken for
    each call and given back as it returns, sync and async (review: the class that replaced
    the generator's context manager dropped it)."""
    guard = Guard(policies=[LLM], clock=ManualClock(1_000))
    aguard = AsyncGuard(policies=[LLM], clock=ManualClock(1_000))

    @guard.lease("llm", user="u")
    def call() -> int:
        return guard.peek("llm", user="u").rules[0].remaining

    @aguard.lease("llm", user="u")
    async def acall() -> int:
        return (await aguard.peek("llm", user="u")).rules[0].remaining

    assert [call(), call()] == [1, 1]
    assert guard.peek("llm", user="u").rules[0].remaining == 2
    assert asyncio.run(acall()) == 1
    assert asyncio.run(aguard.peek("llm", user="u")).rules[0].remaining == 2
