"""The audit's drivers: one thread's or task's stream of actions on a guard, and the log of
what came back, the times read from the engine's decisions."""

from __future__ import annotations

import bisect
import random
import time
import traceback
from collections.abc import Iterator, Sequence
from functools import partial
from typing import NamedTuple

from freqguard import (
    AsyncGuard,
    Decision,
    Guard,
    MemoryBackend,
    Policy,
    Rule,
)
from tests.audit.workload import (
    _BY_NAME,
    COSTS,
    HELD,
    LIMIT_SHARE,
    LIMITED,
    NO_REFUNDS,
    POLICIES,
    REFUND_DELAYS,
    VALUES,
    Admission,
    Refund,
    WorkerLog,
)

# -- how the engine is read (the one place that knows its API) ----------------------------


def admission_times(guard: Guard | AsyncGuard, decision: Decision) -> tuple[int, ...]:
    """Per rule, the µs the backend recorded an admitted hit at."""
    assert decision.receipt is not None, "an admitted hit of cost > 0 has a receipt"
    return decision.receipt.times_us


def reply_times(guard: Guard | AsyncGuard, decision: Decision) -> tuple[int, ...]:
    """Per rule, the µs its part judged the call at, read from the replies a decision keeps
    for its lazy report. A refund's Decision shows no time of its own, and a bucket's
    give-back depends on it; this reaches into the engine (``Decision._report``,
    ``Reply.now``) and fails loudly if that changes."""
    report = decision._report
    assert isinstance(report, partial), "read the replies before the report is built"
    replies = report.args[0]
    plan = guard._policies.plan(decision.policy)
    times = [0] * len(plan.policy.rules)
    for part, reply in zip(plan.parts, replies, strict=True):
        for index in part.rule_index:
            times[index] = reply.now
    return tuple(times)


def refund(guard: Guard, decision: Decision) -> tuple[int, ...]:
    """Give back an admission: a refund, or a lease's release (its leases only)."""
    if guard.policies[decision.policy].leases:
        return reply_times(guard, guard.release(decision))
    return reply_times(guard, guard.refund(decision))


async def arefund(guard: AsyncGuard, decision: Decision) -> tuple[int, ...]:
    if guard.policies[decision.policy].leases:
        return reply_times(guard, await guard.release(decision))
    return reply_times(guard, await guard.refund(decision))


def memory_backend() -> MemoryBackend:
    return MemoryBackend()


# -- drivers -------------------------------------------------------------------------------


def first_part(policy: Policy) -> frozenset[int]:
    """The rules of a policy's first part, or every rule when it has one part (a rule's part
    is a dimension all rules share, else its own first dimension in policy order)."""
    shared = [d for d in policy.dimensions if all(d in r.by for r in policy.rules)]

    def part(rule: Rule) -> str | None:
        own = [d for d in policy.dimensions if d in rule.by]
        return shared[0] if shared else (own[0] if own else None)

    first = part(policy.rules[0])
    return frozenset(i for i, r in enumerate(policy.rules) if part(r) == first)


_FIRST = {p.name: first_part(p) for p in POLICIES}


class Action(NamedTuple):
    kind: str  # "hit", "many", "refund" or "limit"
    policy: str
    contexts: list[dict[str, str]]
    cost: int
    held: tuple[int, Decision] | None = None
    limit: tuple[str, str | None] | None = None  # a "limit": the rule, its rate (None: clear)


class Driver:
    """One thread's or task's stream of actions, and the log of what came back."""

    def __init__(self, worker: int, seed: int, refund_share: float, many_share: float) -> None:
        self.log = WorkerLog(worker)
        self.rng = random.Random(seed)
        self.refund_share, self.many_share = refund_share, many_share
        self.held: list[tuple[float, int, Decision]] = []  # (due, aid, decision), by due
        self.seq = 0

    def actions(self, deadline: float, max_ops: int) -> Iterator[Action]:
        for _ in range(max_ops):
            if time.monotonic() >= deadline:
                return
            yield self.next()

    def done(
        self,
        guard: Guard | AsyncGuard,
        action: Action,
        result: list[Decision] | tuple[int, ...],
        start: int,
    ) -> None:
        """Log what came back: a refund's times, or the decisions of a hit or batch."""
        end = time.monotonic_ns()
        if action.kind == "limit":
            self.log.counts[action.policy, "limits"] += 1
        elif isinstance(result, tuple):
            self.refunded(action, result, start, end)
        else:
            self.decided(guard, action, result, start, end)

    def next(self) -> Action:
        rng = self.rng
        if self.held and (self.held[0][0] <= time.monotonic() or len(self.held) > HELD):
            _, aid, decision = self.held.pop(0)
            return Action("refund", decision.policy, [], 0, (aid, decision))
        if rng.random() < LIMIT_SHARE:
            (name, rule), rates = rng.choice(sorted(LIMITED.items()))
            rate = rng.choice((None, *rates))
            return Action(
                "limit", name, [{"user": rng.choice(VALUES["user"])}], 0, None, (rule, rate)
            )
        policy = rng.choice(POLICIES)
        many = rng.random() < self.many_share and not policy.leases  # a lease: one at once
        contexts = [
            {d: rng.choice(VALUES[d]) for d in policy.dimensions}
            for _ in range(rng.randint(2, 5) if many else 1)
        ]
        kind = "lease" if policy.leases else "many" if many else "hit"
        return Action(kind, policy.name, contexts, rng.choice(COSTS))

    def decided(
        self,
        guard: Guard | AsyncGuard,
        action: Action,
        decisions: Sequence[Decision],
        start: int,
        end: int,
    ) -> None:
        policy = _BY_NAME[action.policy]
        counts = self.log.counts
        counts[action.policy, "batches" if action.kind == "many" else "singles"] += 1
        for ctx, decision in zip(action.contexts, decisions, strict=True):
            counts[action.policy, "hits"] += 1
            if not decision.allowed:
                counts[action.policy, "denied"] += 1
                first = _FIRST[action.policy]
                if len(first) < len(policy.rules) and not any(
                    policy.rules[i] in decision.denied_by for i in first
                ):
                    counts[action.policy, "compensated"] += 1  # a later part said no
                continue
            counts[action.policy, "admitted"] += 1
            took = 0
            for i, rule in enumerate(policy.rules):
                if not rule.shadow or decision.rules[i].allowed:
                    took |= 1 << i
            self.seq += 1
            aid = self.log.worker << 32 | self.seq
            values = tuple(ctx[d] for d in policy.dimensions)
            times = admission_times(guard, decision)
            self.log.admissions.append(
                Admission(
                    aid, self.seq, action.policy, times, action.cost, values, took, start, end
                )
            )
            # every lease is released, most of them within their lease (0.3 s)
            share = 0.9 if policy.leases else self.refund_share
            if action.policy not in NO_REFUNDS and self.rng.random() < share:
                # refunded at once, or as a vendor call fails later: a bucket's give-back
                # depends on where its span is by then
                due = time.monotonic() + self.rng.choice(REFUND_DELAYS)
                bisect.insort(self.held, (due, aid, decision), key=lambda h: h[0])

    def refunded(self, action: Action, times: tuple[int, ...], start: int, end: int) -> None:
        assert action.held is not None
        self.seq += 1
        self.log.refunds.append(Refund(action.held[0], self.seq, times, start, end))
        self.log.counts[action.policy, "refunds"] += 1


def _call(guard: Guard, action: Action) -> list[Decision] | tuple[int, ...]:
    if action.limit is not None:
        rule, rate = action.limit
        if rate is None:
            guard.clear_limit(action.policy, rule, **action.contexts[0])
        else:
            guard.set_limit(action.policy, rule, rate, user=action.contexts[0]["user"])
        return []
    if action.held is not None:
        return refund(guard, action.held[1])
    if action.kind == "many":
        return guard.hit_many(action.policy, action.contexts, action.cost)
    if action.kind == "lease":
        return [guard.take_lease(action.policy, action.cost, **action.contexts[0])]
    return [guard.hit(action.policy, action.cost, **action.contexts[0])]


async def _acall(guard: AsyncGuard, action: Action) -> list[Decision] | tuple[int, ...]:
    if action.limit is not None:
        rule, rate = action.limit
        if rate is None:
            await guard.clear_limit(action.policy, rule, **action.contexts[0])
        else:
            await guard.set_limit(action.policy, rule, rate, user=action.contexts[0]["user"])
        return []
    if action.held is not None:
        return await arefund(guard, action.held[1])
    if action.kind == "many":
        return await guard.hit_many(action.policy, action.contexts, action.cost)
    if action.kind == "lease":
        return [await guard.take_lease(action.policy, action.cost, **action.contexts[0])]
    return [await guard.hit(action.policy, action.cost, **action.contexts[0])]


def drive(guard: Guard, driver: Driver, deadline: float, max_ops: int) -> None:
    """A thread's loop: act until the deadline (system-wide monotonic) or ``max_ops``."""
    try:
        for action in driver.actions(deadline, max_ops):
            start = time.monotonic_ns()
            driver.done(guard, action, _call(guard, action), start)
    except Exception:
        driver.log.errors.append(traceback.format_exc())


async def adrive(guard: AsyncGuard, driver: Driver, deadline: float, max_ops: int) -> None:
    """:func:`drive` for a task."""
    try:
        for action in driver.actions(deadline, max_ops):
            start = time.monotonic_ns()
            driver.done(guard, action, await _acall(guard, action), start)
    except Exception:
        driver.log.errors.append(traceback.format_exc())
