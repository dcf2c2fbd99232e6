"""Values at the limits of every encoding: refused at construction when an encoding cannot
hold them exactly, and decided alike by memory, Redis and Redis Cluster (and as the
reference model says) right up to the bounds (freqguard/bounds.py)."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rate, Rule, Strategy
from freqguard.backends.redis import RedisBackend
from freqguard.bounds import (
    MAX_BURST,
    MAX_LIMIT,
    MAX_LOG_LIMIT,
    MAX_RULES,
    MAX_SPAN_US,
    MAX_TIME_US,
    MAX_WINDOW_US,
)
from freqguard.script.keys import policy_layout
from tests.conftest import examples, flush
from tests.reference import RATE_STRATEGIES, RefPolicy
from tests.servers import RedisServer


@pytest.mark.parametrize(
    ("rate", "strategy", "burst"),
    [
        ("1 per 3660 days", "gcra", 1000),  # admitted 2000 on Redis, 1000 in memory
        ("1/hour", "gcra", 20_000_000),  # a second full burst, and a TTL of ~1 ms
        ("1/day", "gcra", 100_000),  # denied the first full hit on Redis
        ("1/second", "token-bucket", 1_000_000_000),  # failed after HSET: state half-written
    ],
)
def test_buckets_whose_refill_leaves_the_integer_range_are_refused(
    rate: str, strategy: str, burst: int
) -> None:
    with pytest.raises(ConfigError, match=f"more than the bound of {MAX_SPAN_US} µs"):
        Rule(rate, by="u", strategy=strategy, burst=burst)


def test_a_bucket_right_at_the_bound_is_accepted() -> None:
    interval = 86_400_000_000  # one per day
    Rule("1/day", strategy="gcra", burst=MAX_SPAN_US // interval)
    with pytest.raises(ConfigError):
        Rule("1/day", strategy="gcra", burst=MAX_SPAN_US // interval + 1)


def test_a_sliding_log_above_its_ceiling_is_refused_naming_what_to_use() -> None:
    Rule(f"{MAX_LOG_LIMIT}/day")
    with pytest.raises(ConfigError, match="strategy='gcra'") as raised:
        Rule(f"{MAX_LOG_LIMIT + 1}/day")
    assert str(MAX_LOG_LIMIT) in str(raised.value)
    # the same cap in every window, at any limit
    assert "strategy='rolling-window' for the same cap" in str(raised.value)
    Rule("1000000000/day", strategy="fixed-window")  # a counter has no such ceiling
    Rule("1000000000/day", strategy="rolling-window")  # nor a ring of counts


@pytest.mark.parametrize("seconds", [1e11, -1.0, (MAX_TIME_US + 1) / 1e6])
def test_a_pinned_time_outside_the_bounds_is_refused(seconds: float) -> None:
    """A pinned clock at 1e11 s over-admitted: its µs leave 2^53 once a window is added."""
    clock = ManualClock(0)
    guard = Guard(MemoryBackend(), [Policy("p", Rule("1/second", by="u"))], clock=clock)
    clock._us = round(seconds * 1e6)
    with pytest.raises(ConfigError, match="time must be from 0 to"):
        guard.hit("p", u="x")


def test_the_backends_own_clock_is_held_to_the_bounds_too() -> None:
    backend = MemoryBackend(ManualClock(1e11))
    guard = Guard(backend, [Policy("p", Rule("1/second", by="u"))])
    with pytest.raises(ConfigError, match="time must be from 0 to"):
        guard.hit("p", u="x")


# -- decisions at the bounds, on every backend -------------------------------------------


@st.composite
def edge_rule(draw: st.DrawFn) -> Rule:
    strategy = draw(st.sampled_from(RATE_STRATEGIES))
    window = draw(st.sampled_from([1, 2, 999_999, MAX_WINDOW_US - 1, MAX_WINDOW_US]))
    if strategy is Strategy.SLIDING_LOG:
        limit = draw(st.sampled_from([1, 2, MAX_LOG_LIMIT - 1, MAX_LOG_LIMIT]))
    else:
        limit = draw(st.sampled_from([1, 2, MAX_LIMIT - 1, MAX_LIMIT]))
    burst = None
    if strategy.uses_burst:
        interval = -(-window // limit)
        most = min(MAX_BURST, MAX_SPAN_US // interval)
        if most < 1:
            return Rule(Rate(1, timedelta(microseconds=window)), ("u",), strategy)
        burst = draw(st.sampled_from(sorted({1, max(1, most - 1), most})))
    rate = Rate(limit, timedelta(microseconds=window))
    return Rule(rate, ("u",), strategy, burst=burst)


def _decisions(
    guard: Guard, clock: ManualClock, ops: list[tuple[int, int]], ref: RefPolicy
) -> list[object]:
    largest = min(r.capacity for r in guard.policies["p"].rules)
    out: list[object] = []
    for advance, fraction in ops:
        # in µs: a float time near MAX_TIME_US cannot hold every µs, and may round back
        clock.advance((min(MAX_TIME_US, clock.now_us() + advance) - clock.now_us()) / 1_000_000)
        cost = [0, 1, largest, max(1, largest - 1)][fraction]
        decision = guard.hit("p", cost, u="x")
        now = clock.now_us()
        allowed, expected = ref.hit(now, cost)
        got = [
            (s.remaining, round(s.reset_after * 1e6), round(s.retry_after * 1e6))
            for s in decision.rules
        ]
        assert (decision.allowed, got) == (allowed, expected), (now, cost)
        out.append(decision)
    return out


@settings(max_examples=examples(30))
@given(
    rule=edge_rule(),
    start=st.sampled_from([0, 1_700_000_000_000_000, MAX_TIME_US - MAX_SPAN_US, MAX_TIME_US]),
    ops=st.lists(
        st.tuples(
            st.sampled_from([0, 1, 500_000, MAX_WINDOW_US // 2, MAX_WINDOW_US]),
            st.integers(0, 3),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_every_backend_decides_as_the_reference_up_to_the_bounds(
    redis_backend: RedisBackend,
    cluster_backend: RedisBackend,
    redis_server: RedisServer,
    redis_cluster: list[RedisServer],
    rule: Rule,
    start: int,
    ops: list[tuple[int, int]],
) -> None:
    flush([redis_server, *redis_cluster])
    policy = Policy("p", rule)
    results = []
    for backend in (MemoryBackend(), redis_backend, cluster_backend):
        clock = ManualClock(start / 1_000_000)
        guard = Guard(backend, [policy], clock=clock)
        results.append(_decisions(guard, clock, ops, RefPolicy(policy.rules)))
    assert results[1] == results[0]
    assert results[2] == results[0]


# -- issue 17: the policy as a whole is bounded ------------------------------------------------


def test_a_policy_of_too_many_rules_is_refused_naming_the_bound() -> None:
    """300 rules failed only by chance, when two 2-byte field tags collided."""
    rules = [Rule("5/minute", by="u", strategy="gcra", name=f"r{n}") for n in range(MAX_RULES + 1)]
    with pytest.raises(ConfigError, match=rf"policy 'big' has {MAX_RULES + 1} rules.*{MAX_RULES}"):
        Policy("big", *rules)
    Policy("big", *rules[:MAX_RULES])  # at the bound: fine


def test_a_policy_whose_logs_could_hold_too_many_entries_is_refused() -> None:
    """100 shadow sliding-log rules at 10,000 cost 41 ms of Redis time a hit and a 5 MB
    record: each rule was within its bound, the policy as a whole was not."""
    rules = [Rule("10000/hour", by="u", shadow=True, name=f"shadow{n}") for n in range(3)]
    with pytest.raises(ConfigError, match=r"policy 'logs'.*30000 entries.*20000"):
        Policy("logs", *rules)
    # non-shadow logs of one dimension set share one log: counted once, at its largest
    Policy("shared", *(Rule(f"{10000 - n}/hour", by="u", name=f"r{n}") for n in range(3)))


@pytest.mark.parametrize("count", [2, MAX_RULES])
def test_field_tags_never_collide_within_a_policy(count: int) -> None:
    """Two states whose 2-byte tags collided made the policy unusable ("rename a rule");
    each state now has a 3-byte tag of its own (two alike, 1 in 16.7 million a pair, are
    refused: below), and those whose 2-byte tags collide are sent with their wide names."""
    names = _colliding_names() if count == 2 else [f"rule-{n}" for n in range(count)]
    policy = Policy("p", *(Rule("5/minute", by="u", strategy="gcra", name=n) for n in names))
    layout = policy_layout(policy, "fg")
    tags = [state.key.field_tag for part in layout for state in part]
    assert len(set(tags)) == len(tags)


def test_two_states_whose_whole_tags_collide_are_refused_naming_both() -> None:
    """A state's tag is its key id's alone (design note 94), so two alike would share a
    field: refused at construction, naming the fix, never a shared count."""
    seen: dict[bytes, str] = {}
    for n in range(100_000):
        key = f"r{n}/gcra@u".encode()
        tag = (
            hashlib.blake2b(key, digest_size=2).digest()
            + hashlib.blake2b(key, digest_size=1).digest()
        )
        if tag in seen:
            break
        seen[tag] = f"r{n}"
    rules = [Rule("5/minute", by="u", strategy="gcra", name=x) for x in (seen[tag], f"r{n}")]
    with pytest.raises(ConfigError, match=rf"'{seen[tag]}/gcra@u' and 'r{n}/gcra@u'.*rename"):
        policy_layout(Policy("p", *rules), "fg")


def _colliding_names() -> list[str]:
    """Two rule names whose states' 2-byte field tags collide."""
    seen: dict[bytes, str] = {}
    for n in range(100_000):
        name = f"r{n}"
        tag = hashlib.blake2b(f"{name}@u".encode(), digest_size=2).digest()
        if tag in seen:
            return [seen[tag], name]
        seen[tag] = name
    raise AssertionError("no collision found")


def test_the_redis_edges_frame_cache_is_bounded_as_the_luas_parsed_specs() -> None:
    """20,000 tier rates made +11.9 MB of FCALL frames that were never forgotten: the cache
    of frames per spec text forgets them all past MAX_FRAMES texts, as the Lua forgets its
    parsed specs past 1024."""
    from freqguard import Guard, Policy, Rule, TierRates
    from freqguard.backends import _resp

    rates = {f"t{n}": f"{n + 2}/hour" for n in range(3000)}
    policy = Policy("p", Rule("1/hour", by="u", name="r", rate_for=TierRates("plan", rates)))
    plan = Guard(policies=[policy])._policies.plan("p")
    for n in range(3000):
        texts = {"u": "a", "plan": f"t{n}"}
        _resp.encode(plan.call(texts, 1, 1, 0))
        assert len(_resp._FRAMES) <= _resp.MAX_FRAMES
    assert _resp.MAX_FRAMES == 1024
