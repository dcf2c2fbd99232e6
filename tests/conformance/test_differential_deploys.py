"""Memory, Redis (plain and in bins) and Redis Cluster decide alike across deploys: the
differential replay of ``test_differential.py`` (hits, peeks, refunds by context and by
receipt, resets, batches, per-key limits, time steps), with deploys in between that register
a policy of the same name whose rules are changed (a strategy, a rate, the dimensions, a
name; a rule added or dropped), and the first policy again. Refunds of decisions made before
a deploy are given back, or refused, alike; limits set under one rule's name follow it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from freqguard import ConfigError, MemoryBackend, Rule
from freqguard.backends.redis import RedisBackend
from tests.conformance.test_differential import DIMS, _assert_alike, _unique, ctx, op, rule
from tests.conftest import examples, flush
from tests.servers import RedisServer

NAMES = ("r0", "r1", "r2", "r3", "x", "y")


@st.composite
def changed(draw: st.DrawFn, rules: list[Rule]) -> tuple[list[Rule], list[str]]:
    """``rules`` (named r0, r1...) as a deploy changes them: each kept, changed in one way
    (its strategy, rate and burst drawn anew; its dimensions; its name) or dropped, and a
    rule perhaps added."""
    out: list[tuple[Rule, str]] = []
    for i, old in enumerate(rules):
        how = draw(st.sampled_from(("keep", "strategy", "by", "name", "drop")))
        name = f"r{i}"
        if how == "strategy":
            old = draw(rule())
        elif how == "by":
            by = draw(st.sampled_from(DIMS))
            old = Rule(old.rate, by, old.strategy, burst=old.burst, shadow=old.shadow)
        elif how == "name":
            name = draw(st.sampled_from(NAMES))
        if how != "drop":
            out.append((old, name))
    if draw(st.booleans()) or not out:
        out.append((draw(rule()), draw(st.sampled_from(NAMES))))
    names = [n for _, n in out]
    assume(len(set(names)) == len(names))
    return [r for r, _ in out], names


deploy = st.tuples(st.just("deploy"), st.just(0), st.integers(0, 1))
#: one op in four a deploy (``one_of`` would flatten ``op``'s branches beside it: 1 in 10)
steps = st.integers(0, 3).flatmap(lambda i: deploy if i == 0 else op)


@settings(max_examples=examples(60))
@given(
    data=st.data(),
    rules=st.lists(rule(), min_size=1, max_size=4),
    pool=st.lists(ctx, min_size=1, max_size=3),
    ops=st.lists(steps, min_size=6, max_size=40),
    start=st.sampled_from([1_700_000_000, 0]),
)
def test_memory_redis_and_cluster_decide_alike_across_deploys(
    redis_backend: RedisBackend,
    binned_backend: RedisBackend,
    cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    data: st.DataObject,
    rules: list[Rule],
    pool: list[dict[str, str]],
    ops: list[Any],
    start: int,
) -> None:
    policy = _unique(rules)
    other, names = data.draw(changed(rules))
    try:
        deployed = _unique(other, names=names)
    except ConfigError:  # e.g. two states whose field tags are alike: refused as built
        assume(False)
    flush([redis_server, *redis_cluster])
    backends = [MemoryBackend(), redis_backend, binned_backend, cluster_backend]
    _assert_alike(backends, policy, pool, ops, start, deploys=[deployed, policy])
