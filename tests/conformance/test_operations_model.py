"""The operations around the engine, held to a reference model: hits, per-key limits (set,
cleared, lapsing, exempt), tiers, resets by dimensions and by rule, and deploys that change a
rule's strategy, rename it, add rules (new parts among them) or remove them, in random
sequences on every store (memory, Redis, Redis in bins, Cluster), on a pinned clock.

The model is written from what the docs promise, in plain terms: a state per rule (a
sliding log per set of dimensions, shared by its sliding-log rules) named by what it is and
the values it is keyed by; a per-key limit per rule and partition value, read as written by
the rule's strategy of the moment; a reset forgets the states keyed by exactly the
dimensions it is given; a rolling window's counts per sub-window, moved to another
window's sub-windows as if each came at its last µs (docs/strategies/rolling-window.md).
Every hit's decision (allowed, and which rules said no) and every ``limits_for`` must be
the model's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
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
from redis import Redis
from redis.cluster import RedisCluster

from freqguard import ConfigError, Guard, ManualClock, Policy, Rate, Rule, TierRates
from freqguard.backends.base import SyncBackend
from freqguard.backends.memory import MemoryBackend
from freqguard.backends.redis import RedisBackend
from freqguard.script.strategies.rolling_window import SUB_WINDOWS
from tests.conftest import START, examples, flush
from tests.servers import RedisServer

KINDS = ("sliding-log", "fixed-window", "gcra", "token-bucket", "rolling-window")
BUCKETS = ("gcra", "token-bucket")
NAMES = ("a", "b", "c", "d", "e", "f")
DIMS = (("u",), ("u", "c"), ("t",), ())
WINDOWS = (1_000_000, 2_000_000)
U, T, C = ("17", "a"), ("17", "b"), ("x", "y")


# -- the model -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MRule:
    name: str
    by: tuple[str, ...]
    kind: str
    limit: int
    window: int  # µs
    burst: int | None = None
    tier: tuple[int, int] | None = None  # the plan "pro"'s (limit, window)

    def rule(self) -> Rule:
        rate_for = None
        if self.tier is not None:
            tier = Rate(self.tier[0], timedelta(microseconds=self.tier[1]))
            rate_for = TierRates("plan", {"pro": tier})
        return Rule(
            Rate(self.limit, timedelta(microseconds=self.window)),
            self.by,
            self.kind,
            name=self.name,
            burst=self.burst,
            rate_for=rate_for,
        )

    @property
    def capacity(self) -> int:
        return self.burst or self.limit if self.kind in BUCKETS else self.limit


@dataclass
class Lim:
    limit: int
    window: int
    exempt: bool
    expiry: int  # 0: never

    def lives(self, now: int) -> bool:
        return self.expiry == 0 or self.expiry > now


@dataclass
class State:
    expiry: int
    entries: list[int] = field(default_factory=list)  # a sliding log's
    start: int = 0  # a fixed window's, and its count
    count: int = 0
    tat: int = 0  # gcra's
    tokens: int = 0  # a token bucket's, and when its last whole token was credited
    last: int = 0
    slots: dict[int, int] = field(default_factory=dict)  # a rolling window's, by start
    grain: int = 0  # their length, µs
    carry: int = 0  # the units that left its ring inside the rule's own window
    carried: int = 0  # the last µs of the newest of their sub-windows


@dataclass(frozen=True)
class Params:
    capacity: int
    window: int
    interval: int
    exempt: bool
    # the rule's own window and count (its tier's, for a context of that tier), whatever
    # limit applies: a log and a rolling window keep what they need too (notes 87 and 88)
    own: int = 0
    own_cap: int = 0


def _partition(rule: MRule) -> str | None:
    """The dimension a rule's limits are kept by: the anchor rule keeps "u" first in the
    policy's order, so "u" wherever a rule has it, else its one dimension."""
    return None if not rule.by else ("u" if "u" in rule.by else rule.by[0])


class Model:
    def __init__(self) -> None:
        self.states: dict[tuple[Any, ...], State] = {}
        self.limits: dict[tuple[str, str | None], Lim] = {}

    # what a rule is, for a context, now
    def params(self, rule: MRule, ctx: dict[str, str], now: int) -> Params:
        limit, window = rule.limit, rule.window
        if rule.tier is not None and ctx.get("plan") == "pro":
            limit, window = rule.tier
        own = (limit, window)  # a tier's rate is the rule's own for its contexts
        exempt = False
        part = _partition(rule)
        found = self.limits.get((rule.name, None if part is None else ctx[part]))
        if found is not None and found.lives(now):
            if found.exempt:
                exempt = True
            else:
                limit, window = found.limit, found.window
        if rule.kind in BUCKETS:
            return Params(rule.burst or limit, window, math.ceil(window / limit), exempt)
        return Params(limit, window, 0, exempt, own[1], own[0])

    @staticmethod
    def key(rule: MRule, dims: tuple[str, ...], ctx: dict[str, str]) -> tuple[Any, ...]:
        what = ("log",) if rule.kind == "sliding-log" else (rule.name, rule.kind)
        return (*what, dims, tuple(ctx[d] for d in dims))

    def groups(
        self, rules: list[MRule], order: tuple[str, ...], ctx: dict[str, str]
    ) -> dict[tuple[Any, ...], list[MRule]]:
        found: dict[tuple[Any, ...], list[MRule]] = {}
        for r in rules:
            dims = tuple(d for d in order if d in r.by)
            found.setdefault(self.key(r, dims, ctx), []).append(r)
        return found

    def hit(
        self, rules: list[MRule], order: tuple[str, ...], ctx: dict[str, str], cost: int, now: int
    ) -> tuple[bool, set[str]]:
        """A hit, part by part (a part: the rules of one partition, in the order the policy
        first names them): a part that denies stops it, and the parts before, which had
        consumed, give back exactly what they took (their states consumed, then refunded
        by the hit's marks); the parts after only check."""
        need = cost or 1
        params = {r.name: self.params(r, ctx, now) for r in rules}
        parts: dict[str | None, list[MRule]] = {}
        for r in rules:
            parts.setdefault(_partition(r), []).append(r)
        denied: set[str] = set()
        decided = []
        for members in parts.values():
            groups = self.groups(members, order, ctx)
            views, passed = {}, {}
            for key, group in groups.items():
                state = self.states.get(key)
                views[key] = state if state is not None and state.expiry > now else None
                for r in group:
                    passed[r.name] = self.check(r.kind, views[key], params[r.name], now, need)
                    if not passed[r.name] and not params[r.name].exempt:
                        denied.add(r.name)
            decided.append((groups, views, passed, not (denied & {m.name for m in members})))
        allowed = not denied
        if cost == 0:
            return allowed, denied
        for groups, views, passed, admitted in decided:
            if not admitted:
                break  # the first part that denies: it and the parts after consume nothing
            for key, group in groups.items():
                lone = len(group) == 1 and params[group[0].name].exempt
                if lone and not passed[group[0].name]:
                    continue  # a lone exempt rule's state counts only what it admits
                window = max(max(params[r.name].window, params[r.name].own) for r in group)
                cap = max(max(params[r.name].capacity, params[r.name].own_cap) for r in group)
                p = params[group[0].name]
                state = self.consume(group[0].kind, views[key], p, window, cap, now, cost)
                if not allowed:  # given back: a later part denied
                    state = self.refund(group[0].kind, state, views[key], p, now, cost)
                self.states[key] = state
        return allowed, denied

    @staticmethod
    def refund(
        kind: str, state: State, before: State | None, p: Params, now: int, cost: int
    ) -> State:
        """What a refund of the hit that left ``state`` (``before`` it) leaves, at once:
        the expiry the hit set stays."""
        if kind == "sliding-log":  # the hit's own units: the newest at its time
            at_now = [t for t in state.entries if t == now]
            keep = len(state.entries) - min(cost, len(at_now))
            return replace(state, entries=state.entries[:keep])
        if kind == "fixed-window":
            return replace(state, count=max(0, state.count - cost))
        if kind == "rolling-window":  # to the hit's own sub-window
            slots = dict(state.slots)
            slots[now - now % state.grain] -= cost
            return replace(state, slots=slots)
        if kind == "gcra":
            return replace(state, tat=max(now, before.tat if before else now))
        tokens, last = Model.tokens(before, p, now)  # as loaded before the hit
        if tokens >= p.capacity:  # full again: stored as a full bucket of this capacity
            return replace(state, tokens=p.capacity, last=now)
        return replace(state, tokens=tokens, last=last)

    @staticmethod
    def check(kind: str, state: State | None, p: Params, now: int, need: int) -> bool:
        if kind == "sliding-log":
            entries = state.entries if state else []
            return sum(t > now - p.window for t in entries) + need <= p.capacity
        if kind == "fixed-window":
            start = now - now % p.window
            count = state.count if state and state.start == start else 0
            return count + need <= p.capacity
        if kind == "rolling-window":
            return sum(Model.ring(state, p, now)[0].values()) + need <= p.capacity
        if kind == "gcra":
            tat = state.tat if state and state.tat > now else now
            return tat + need * p.interval - now - p.capacity * p.interval <= 0
        tokens, _ = Model.tokens(state, p, now)
        return tokens >= need

    @staticmethod
    def ring(state: State | None, p: Params, now: int) -> tuple[dict[int, int], int, int]:
        """A rolling window's counts that count at ``now``: each sub-window whose last µs is
        inside the window; a state kept at another grain moved to this one's sub-windows,
        each sub-window's units as if they came at its last µs (or now, if earlier). And
        its carry: under a limit of a shorter window than the rule's own, the units that
        left the ring and are still inside the own window, with the last µs of the newest;
        once the ring is the state's window again, carried back as if they all came then
        (or now, if earlier)."""
        grain = -(-p.window // SUB_WINDOWS)
        own = max(p.own, p.window)
        out: dict[int, int] = {}
        carry, last = (state.carry, state.carried) if state else (0, 0)
        if last + own <= now:
            carry = last = 0
        for start, count in (state.slots if state else {}).items():
            assert state is not None
            end = start + state.grain - 1
            if state.grain != grain:
                end = min(end, now)
                start = end - end % grain
            if start + grain - 1 > now - p.window:
                out[start] = out.get(start, 0) + count
            elif count and end + own > now:
                carry, last = carry + count, max(last, end)
        if carry and own == p.window:
            at = min(last, now)
            out[at - at % grain] = out.get(at - at % grain, 0) + carry
            carry = last = 0
        return out, carry, last

    @staticmethod
    def tokens(state: State | None, p: Params, now: int) -> tuple[int, int]:
        if state is None:
            return p.capacity, now
        tokens, last = state.tokens, state.last
        if now > last:
            earned = (now - last) // p.interval
            tokens, last = tokens + earned, last + earned * p.interval
        if tokens >= p.capacity:
            return p.capacity, now
        return tokens, last

    @staticmethod
    def consume(
        kind: str, state: State | None, p: Params, window: int, cap: int, now: int, cost: int
    ) -> State:
        if kind == "sliding-log":
            entries = [t for t in (state.entries if state else []) if t > now - window]
            entries = (entries + [now] * cost)[-cap:]
            return State(entries[-1] + window, entries=entries)
        if kind == "fixed-window":
            start = now - now % p.window
            count = state.count if state and state.start == start else 0
            return State(start + p.window, start=start, count=count + cost)
        if kind == "rolling-window":
            grain = -(-p.window // SUB_WINDOWS)
            slots, carry, last = Model.ring(state, p, now)
            start = now - now % grain
            slots[start] = slots.get(start, 0) + cost
            expiry = start + grain - 1 + max(p.own, p.window)
            return State(expiry, slots=slots, grain=grain, carry=carry, carried=last)
        if kind == "gcra":
            tat = (state.tat if state and state.tat > now else now) + cost * p.interval
            return State(tat, tat=tat)
        tokens, last = Model.tokens(state, p, now)
        tokens -= cost
        return State(last + (p.capacity - tokens) * p.interval, tokens=tokens, last=last)


# -- the machine -------------------------------------------------------------------------------

rule_specs = st.builds(
    lambda by, kind, limit, window, burst, tier: (by, kind, limit, window, burst, tier),
    st.sampled_from(DIMS),
    st.sampled_from(KINDS),
    st.integers(1, 4),
    st.sampled_from(WINDOWS),
    st.none() | st.integers(1, 3),
    st.none() | st.tuples(st.integers(1, 6), st.sampled_from(WINDOWS)),
)


def _made(name: str, spec: tuple[Any, ...]) -> MRule:
    by, kind, limit, window, burst, tier = spec
    return MRule(name, by, kind, limit, window, burst if kind in BUCKETS else None, tier)


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
        if any(r.tier for r in self.deployed):
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

    def _hit(self, ctx: dict[str, str], cost: int) -> None:
        assert self.guard is not None
        now = self.clock.now_us()
        if cost > min(r.capacity for r in self.deployed):
            with pytest.raises(ConfigError, match="exceeds the capacity"):
                self.guard.hit("p", cost, **ctx)
            return
        decision = self.guard.hit("p", cost, **ctx)
        allowed, denied = self.model.hit(self.deployed, self.order, ctx, cost, now)
        got = (decision.allowed, {r.id for r in decision.denied_by})
        assert got == (allowed, denied), (ctx, cost)

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
            part = _partition(r)
            found = self.model.limits.get((r.name, None if part is None else ctx[part]))
            if found is not None and found.lives(now):
                expected[r.name] = (
                    None
                    if found.exempt
                    else Rate(found.limit, timedelta(microseconds=found.window))
                )
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
        self.clock.advance(1e-6)  # a pinned reset ends its microsecond (design note 43)

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


def test_operations_hold_to_the_model(any_store: SyncBackend) -> None:
    class OnThisStore(Operations):
        def __init__(self) -> None:
            self.store = _emptied(any_store)
            super().__init__()

    run_state_machine_as_test(
        OnThisStore,
        settings=settings(max_examples=examples(50), stateful_step_count=40, deadline=None),
    )


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
    redis_server: RedisServer,
) -> None:
    """The shrunk case of the operations model's failure, on Redis: the fixed window ``c``
    is reported with its unit left (memory: denied by ``b`` and ``c``)."""
    flush([redis_server])
    assert _deployed_again(RedisBackend(Redis(port=redis_server.port))) == {"b", "c"}
