"""The reference model ``test_operations_model.py`` holds every store to, written from what
the docs promise, in plain terms: a state per rule (a sliding log per set of dimensions,
shared by its sliding-log rules) named by what it is and the values it is keyed by; a
per-key limit per rule and partition value, read as written by the rule's strategy of the
moment; a reset forgets the states keyed by exactly the dimensions it is given; a rolling
window's counts per sub-window, moved to another window's sub-windows as if each came at
its last µs (docs/strategies/rolling-window.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from freqguard import Rate, Rule, TierRates
from freqguard.script.strategies.rolling_window import SUB_WINDOWS

BUCKETS = ("gcra", "token-bucket")


@dataclass(frozen=True)
class MRule:
    name: str
    by: tuple[str, ...]
    kind: str
    limit: int
    window: int  # µs
    burst: int | None = None
    tier: tuple[int, int] | None = None  # the plan "pro"'s (limit, window)
    # what the tier reads, and the value it is for: "plan" "pro", or one of the rule's own
    # dimensions and one of its values (Envoy's rate for one descriptor value)
    tier_from: tuple[str, str] = ("plan", "pro")

    def rule(self) -> Rule:
        rate_for = None
        if self.tier is not None:
            tier = Rate(self.tier[0], timedelta(microseconds=self.tier[1]))
            rate_for = TierRates(self.tier_from[0], {self.tier_from[1]: tier})
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
    # the dimension it was set for (the rule's partition then): it applies while the rule
    # is still kept by it, and again once keyed back (a keying entry, contract.KEYING_WINDOW)
    dim: str | None = None

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
    # the rule's own window and count (with its tier's, for a context of that tier),
    # whatever limit applies: a log and a rolling window keep what they need too (notes 87,
    # 88 and 103)
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

    def limit_of(self, rule: MRule, ctx: dict[str, str]) -> Lim | None:
        """The limit stored for ``rule`` and its partition value in ``ctx`` (one a rule and
        value, whatever the dimension), if it was set for the rule's partition as it is."""
        part = _partition(rule)
        found = self.limits.get((rule.name, None if part is None else ctx[part]))
        return found if found is not None and found.dim == part else None

    # what a rule is, for a context, now
    def params(self, rule: MRule, ctx: dict[str, str], now: int) -> Params:
        limit, window = rule.limit, rule.window
        own = (limit, window)
        if rule.tier is not None:  # a table's rates are known ahead: a state keeps what
            # each needs, whatever the context's tier (note 115), and under the tier what
            # the rule's own rate needs too (note 103)
            own = (max(rule.tier[0], own[0]), max(rule.tier[1], own[1]))
        if rule.tier is not None and ctx.get(rule.tier_from[0]) == rule.tier_from[1]:
            limit, window = rule.tier
        exempt = False
        found = self.limit_of(rule, ctx)
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
