"""The operations around the engine, held to a reference model: hits, per-key limits (set,
cleared, lapsing, exempt), tiers, resets by dimensions and by rule, and deploys that change a
rule's strategy, rename it, add rules (new parts among them) or remove them, in random
sequences on every store (memory, Redis, Redis in bins, Cluster), on a pinned clock.

The model, written from what the docs promise, is in ``operations_model.py``. Every hit's
decision (allowed, and which rules said no) and every ``limits_for`` must be the model's.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from redis.cluster import RedisCluster

from freqguard import ConfigError, Decision, Guard, ManualClock, Policy, Rate, Rule
from freqguard.backends.base import SyncBackend
from freqguard.backends.memory import MemoryBackend
from freqguard.backends.redis import RedisBackend
from tests.conformance.operations_model import BUCKETS, Lim, Model, MRule, _partition
from tests.conftest import START, examples

KINDS = ("sliding-log", "fixed-window", "gcra", "token-bucket", "rolling-window")
NAMES = ("a", "b", "c", "d", "e", "f")
DIMS = (("u",), ("u", "c"), ("t",), ())
WINDOWS = (1_000_000, 2_000_000)
U, T, C = ("17", "a"), ("17", "b"), ("x", "y")


# -- the machine -------------------------------------------------------------------------------

rule_specs = st.builds(
    lambda by, kind, limit, window, burst, tier, own: (by, kind, limit, window, burst, tier, own),
    st.sampled_from(DIMS),
    st.sampled_from(KINDS),
    st.integers(1, 4),
    st.sampled_from(WINDOWS),
    st.none() | st.integers(1, 3),
    st.none() | st.tuples(st.integers(1, 6), st.sampled_from(WINDOWS)),
    st.booleans(),  # a tier by the rule's own last dimension, for one of its values
)
#: the value of each dimension an own-dimension tier is for
_TIER_VALUE = {"u": "a", "t": "b", "c": "y"}


def _made(name: str, spec: tuple[Any, ...]) -> MRule:
    by, kind, limit, window, burst, tier, own = spec
    bucket = burst if kind in BUCKETS else None
    if own and by:
        return MRule(name, by, kind, limit, window, bucket, tier, (by[-1], _TIER_VALUE[by[-1]]))
    return MRule(name, by, kind, limit, window, bucket, tier)


class Operations(RuleBasedStateMachine):
    store: SyncBackend  # set per test

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(START)
        self.model = Model()
        self.deployed: list[MRule] = []
        self.guard: Guard | None = None

    @initialize(specs=st.lists(rule_specs, min_size=0, max_size=3), kind=st.sampled_from(KINDS))
    def start(self, specs: list[tuple[Any, ...]], kind: str) -> None:
        self.deployed = [MRule("anchor", ("u",), kind, 3, 1_000_000)]
        self.deployed += [_made(NAMES[i], spec) for i, spec in enumerate(specs)]
        self._deploy()

    def _deploy(self) -> None:
        policy = Policy("p", *[r.rule() for r in self.deployed])
        self.order = policy.dimensions
        self.guard = Guard(self.store, [policy], clock=self.clock)

    def _ctx(self, u: str, t: str, c: str, plan: str) -> dict[str, str]:
        values = {"u": u, "t": t, "c": c}
        ctx = {d: values[d] for d in self.order}
        if any(r.tier and r.tier_from[0] == "plan" for r in self.deployed):
            ctx["plan"] = plan
        return ctx

    # -- operations

    @rule(
        hits=st.lists(
            st.tuples(
                st.sampled_from(U),
                st.sampled_from(T),
                st.sampled_from(C),
                st.sampled_from(("", "pro")),
                st.sampled_from((1, 1, 1, 2, 0)),
            ),
            min_size=1,
            max_size=6,
        )
    )
    def hit(self, hits: list[tuple[str, str, str, str, int]]) -> None:
        for u, t, c, plan, cost in hits:
            self._hit(self._ctx(u, t, c, plan), cost)

    def _hit(self, ctx: dict[str, str], cost: int) -> Decision | None:
        """The machine's hit, checked against the model; its decision (None: refused as
        past a capacity)."""
        assert self.guard is not None
        now = self.clock.now_us()
        # a denial of a cost past a denying rule's capacity as decided for the hit (its
        # tier's, a per-key limit's) is refused, having counted nothing, as the model
        capacity = {r.name: self.model.params(r, ctx, now).capacity for r in self.deployed}
        allowed, denied = self.model.hit(self.deployed, self.order, ctx, cost, now)
        past = [r for r in self.deployed if r.name in denied and cost > capacity[r.name]]
        if past and not all(self._lapses(r, ctx, cost, now) for r in past):
            with pytest.raises(ConfigError, match="exceeds the capacity"):
                self.guard.hit("p", cost, **ctx)
            return None
        decision = self.guard.hit("p", cost, **ctx)
        got = (decision.allowed, {r.id for r in decision.denied_by})
        assert got == (allowed, denied), (ctx, cost)
        return decision

    def _lapses(self, rule: MRule, ctx: dict[str, str], cost: int, now: int) -> bool:
        """Whether only a per-key limit that lapses (a ttl) puts ``cost`` past ``rule``'s
        capacity, the rule's own (its tier's, for a context of that tier) holding it: a
        denial told to retry then."""
        found = self.model.limit_of(rule, ctx)
        tiered = rule.tier is not None and ctx.get(rule.tier_from[0]) == rule.tier_from[1]
        limit = rule.tier[0] if tiered and rule.tier is not None else rule.limit
        own = rule.burst or limit if rule.kind in BUCKETS else limit
        return found is not None and found.expiry > now and own >= cost

    @rule(us=st.sampled_from((1, 999, 250_000, 500_000, 1_000_000, 2_500_000)))
    def advance(self, us: int) -> None:
        self.clock.advance(us / 1_000_000)

    @rule(
        index=st.integers(0, 5),
        value=st.sampled_from(("17", "a", "b")),
        limit=st.none() | st.integers(1, 5),
        window=st.sampled_from(WINDOWS),
        ttl=st.none() | st.sampled_from((0.5, 3.0)),
    )
    def set_limit(
        self, index: int, value: str, limit: int | None, window: int, ttl: float | None
    ) -> None:
        assert self.guard is not None
        target = self.deployed[index % len(self.deployed)]
        part = _partition(target)
        where = {} if part is None else {part: value}
        rate = None if limit is None else Rate(limit, timedelta(microseconds=window))
        self.guard.set_limit("p", target.name, rate, ttl=ttl, **where)
        now = self.clock.now_us()
        record = None if part is None else value
        self._cleanup(record)
        self.model.limits[(target.name, record)] = Lim(
            target.limit if limit is None else limit,
            target.window if limit is None else window,
            limit is None,
            0 if ttl is None else now + round(ttl * 1_000_000),
            part,
        )

    @rule(index=st.integers(0, 5), value=st.sampled_from(("17", "a", "b")))
    def clear_limit(self, index: int, value: str) -> None:
        assert self.guard is not None
        target = self.deployed[index % len(self.deployed)]
        part = _partition(target)
        self.guard.clear_limit("p", target.name, **({} if part is None else {part: value}))
        record = None if part is None else value
        self._cleanup(record)
        self.model.limits.pop((target.name, record), None)

    def _cleanup(self, record: str | None) -> None:
        """A change of a record's limits drops those of rules gone from the policy (on a
        pinned time, never the expired ones)."""
        names = {r.name for r in self.deployed}
        for key in [k for k in self.model.limits if k[1] == record and k[0] not in names]:
            del self.model.limits[key]

    @rule(u=st.sampled_from(U), t=st.sampled_from(T), c=st.sampled_from(C))
    def check_limits(self, u: str, t: str, c: str) -> None:
        assert self.guard is not None
        ctx = self._ctx(u, t, c, "")
        ctx.pop("plan", None)
        now = self.clock.now_us()
        expected: dict[str, Rate | None] = {}
        for r in self.deployed:
            found = self.model.limit_of(r, ctx)
            if found is not None and found.lives(now):
                expected[r.name] = (
                    None
                    if found.exempt
                    else Rate(found.limit, timedelta(microseconds=found.window))
                )
            elif (
                r.tier is not None
                and r.tier_from[0] in r.by
                and ctx.get(r.tier_from[0]) == (r.tier_from[1])
            ):  # a tier by the key's own value: the key's rate (docs/limits.md)
                expected[r.name] = Rate(r.tier[0], timedelta(microseconds=r.tier[1]))
            else:
                expected[r.name] = Rate(r.limit, timedelta(microseconds=r.window))
        assert self.guard.limits_for("p", **ctx) == expected

    @rule(
        mask=st.integers(0, 7),
        u=st.sampled_from(U),
        t=st.sampled_from(T),
        c=st.sampled_from(C),
    )
    def reset(self, mask: int, u: str, t: str, c: str) -> None:
        assert self.guard is not None
        given = {
            d: v for bit, (d, v) in enumerate((("u", u), ("t", t), ("c", c))) if mask >> bit & 1
        }
        given = {d: v for d, v in given.items() if d in self.order}
        chosen = [r for r in self.deployed if set(r.by) == set(given)]
        if not chosen:
            with pytest.raises(ConfigError, match="no rule is keyed by exactly"):
                self.guard.reset("p", **given)
            return
        assert set(self.guard.reset("p", **given)) == {r.name for r in chosen}
        self._forget(chosen, given)

    @rule(index=st.integers(0, 5), u=st.sampled_from(U), t=st.sampled_from(T), c=st.sampled_from(C))
    def reset_rule(self, index: int, u: str, t: str, c: str) -> None:
        assert self.guard is not None
        target = self.deployed[index % len(self.deployed)]
        given = {d: {"u": u, "t": t, "c": c}[d] for d in target.by}
        sharing = [
            r for r in self.deployed if r.kind == "sliding-log" and set(r.by) == set(target.by)
        ]
        if target.kind == "sliding-log" and len(sharing) > 1:
            with pytest.raises(ConfigError, match="count in one sliding log"):
                self.guard.reset("p", rules=[target.name], **given)
            return
        assert self.guard.reset("p", rules=[target.name], **given) == (target.name,)
        self._forget([target], given)

    def _forget(self, chosen: list[MRule], given: dict[str, str]) -> None:
        for r in chosen:
            dims = tuple(d for d in self.order if d in r.by)
            self.model.states.pop(self.model.key(r, dims, given), None)
        # a pinned reset ends after its call and after every state's birth (design notes
        # 43 and 102: a refunded or regrained state may be born past its call's µs, so the
        # tombstone, and what follows it, can lie some µs ahead): the model moves on a
        # millisecond, past them; what the tombstone's µs does is
        # test_generations_across_resets.py's (a new user's run found the model 1 µs off)
        self.clock.advance(1e-3)

    # -- deploys

    @rule(index=st.integers(1, 5), kind=st.sampled_from(KINDS))
    def deploy_strategy(self, index: int, kind: str) -> None:
        i = index % len(self.deployed)
        old = self.deployed[i]
        burst = old.burst if kind in BUCKETS else None
        self.deployed[i] = replace(old, kind=kind, burst=burst)
        self._deploy()

    @rule(index=st.integers(1, 5), name=st.sampled_from(NAMES))
    def deploy_rename(self, index: int, name: str) -> None:
        if len(self.deployed) < 2 or name in {r.name for r in self.deployed}:
            return
        i = 1 + (index - 1) % (len(self.deployed) - 1)
        self.deployed[i] = replace(self.deployed[i], name=name)
        self._deploy()

    @rule(name=st.sampled_from(NAMES), spec=rule_specs)
    def deploy_add(self, name: str, spec: tuple[Any, ...]) -> None:
        if len(self.deployed) >= 5 or name in {r.name for r in self.deployed}:
            return
        self.deployed.append(_made(name, spec))
        self._deploy()

    @rule(index=st.integers(1, 5))
    def deploy_remove(self, index: int) -> None:
        if len(self.deployed) < 2:
            return
        del self.deployed[1 + (index - 1) % (len(self.deployed) - 1)]
        self._deploy()

    @invariant()
    def time_moves_forward(self) -> None:
        assert self.clock.now_us() >= int(START * 1_000_000)


def _emptied(store: SyncBackend) -> SyncBackend:
    """A fresh store for each run: a new memory backend, or the Redis one emptied."""
    if isinstance(store, MemoryBackend):
        return MemoryBackend()
    client = store.client  # type: ignore[attr-defined]
    if isinstance(client, RedisCluster):
        client.flushdb(target_nodes=RedisCluster.PRIMARIES)
    else:
        client.flushdb()
    return store


def run_on(store: SyncBackend, machine: type[Operations], count: int) -> None:
    """``machine``'s runs (``count`` examples in CI's slow job, fewer in the quick one),
    each on ``store`` emptied."""

    class OnThisStore(machine):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            self.store = _emptied(store)
            super().__init__()

    run_state_machine_as_test(
        OnThisStore,
        settings=settings(max_examples=examples(count), stateful_step_count=40, deadline=None),
    )


def test_operations_hold_to_the_model(any_store: SyncBackend) -> None:
    run_on(any_store, Operations, 50)


def _shared_record_policy(kind: str) -> Policy:
    return Policy(
        "p",
        Rule("3/second", by="u", name="anchor"),
        Rule("1/second", by="t", name="d", strategy=kind),
        Rule("1/second", by="u", name="b"),
        Rule("1/second", by="u", name="c", strategy="fixed-window"),
    )


def _deployed_again(backend: SyncBackend) -> set[str]:
    """One hit with u=t=17 (one record), the t rule deployed as gcra, the same hit: the
    rules that deny it."""
    clock = ManualClock(START)
    assert Guard(backend, [_shared_record_policy("sliding-log")], clock=clock).hit(
        "p", u="17", t="17"
    )
    again = Guard(backend, [_shared_record_policy("gcra")], clock=clock).hit("p", u="17", t="17")
    return {r.id for r in again.denied_by}


def test_memory_keeps_the_others_counts_when_a_rule_sharing_the_record_is_redeployed() -> None:
    assert _deployed_again(MemoryBackend()) == {"b", "c"}


def test_redis_keeps_the_others_counts_when_a_rule_sharing_the_record_is_redeployed(
    redis_backend: RedisBackend,
) -> None:
    """The shrunk case of the operations model's failure, on Redis: the fixed window ``c``
    was reported with its unit left (memory: denied by ``b`` and ``c``). Design note 94.
    (A client of its own, never closed, left a socket that a later test's collection
    found: CI failed on its ResourceWarning; the suite's backend is closed after.)"""
    assert _deployed_again(redis_backend) == {"b", "c"}
