"""The operations a guard's methods run, prepared: a hit (its deny-cache answer, its
decision remembered and told), a peek, reset or refund by context, a batch, an acquire."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from time import perf_counter
from typing import Any, NamedTuple

from freqguard.clock import Clock
from freqguard.decision import Decision
from freqguard.engine.accounting import Accounting
from freqguard.engine.denycache import DenyCache, Key
from freqguard.engine.failover import (
    settle_many,
)
from freqguard.engine.ops import Op, acquire_op, decide_op, many_op, reset_op
from freqguard.engine.plan import PolicyPlan
from freqguard.engine.resets import reset_calls
from freqguard.errors import (
    CapExceeded,
    ConfigError,
)
from freqguard.rules import Rule
from freqguard.script.calls import Reply, ScriptCall
from freqguard.script.contract import CHECK, HIT

__all__ = ["Hits"]


class Hits(Accounting):
    """Each public operation but ``refund(decision)``, as an operation to drive."""

    def _first_call(self, plan: PolicyPlan, cost: object, ctx: Mapping[str, object]) -> ScriptCall:
        """The one call of a one-call hit, validated (the breaker counts no failures: see
        :meth:`_one_call`)."""
        checked, texts = plan.check_cost(cost), plan.texts(ctx)
        return plan.call(texts, self._now(), checked, HIT)

    def _first_reply(self, plan: PolicyPlan, call: ScriptCall, reply: Reply) -> Decision:
        return plan.decide([reply], call.texts, call.cost, HIT)

    def _hit(
        self, policy: str, cost: object, ctx: Mapping[str, object], cached: bool = True
    ) -> _Hit:
        """A hit's plan, texts and cost, and its answer when the deny cache has one."""
        plan, texts, checked = self._request(policy, cost, ctx, HIT)
        cache = self._cache if cached else None
        answer, mark = None, _NO_MARK
        if cache is not None:
            answer = cache.get(plan.name, _cache_key(plan, texts), checked)
            if answer is not None:
                self._decided(answer, texts, 0.0)
            mark = cache.mark(plan.name)
        start = perf_counter() if self.observers else 0.0
        return _Hit(plan, texts, checked, answer, start, mark)

    def _hit_op(self, hit: _Hit) -> Op[Decision]:
        plan, texts, cost = hit.plan, hit.texts, hit.cost
        now = self._now()
        return self._guarded(
            plan, lambda p: decide_op(p, texts, cost, HIT, now), self._fail(plan, cost), cost
        )

    def _hit_done(self, hit: _Hit, decision: Decision) -> Decision:
        """Remember a denial, tell the observers."""
        cache = self._cache
        if cache is not None and not decision.allowed and decision.source == "backend":
            key = _cache_key(hit.plan, hit.texts)
            cache.put(hit.plan.name, key, hit.cost, decision, hit.mark)
        if self.observers:
            self._decided(decision, hit.texts, perf_counter() - hit.start)
        return decision

    def _decide(
        self, policy: str, cost: object, ctx: Mapping[str, object], mode: int
    ) -> Op[Decision]:
        """A peek, or a refund or reset by context (which the deny cache must forget)."""
        plan, texts, checked = self._request(policy, cost, ctx, mode)
        now = self._now()
        if mode != CHECK:
            self._forget(plan, texts)
        return self._guarded(
            plan, lambda p: decide_op(p, texts, checked, mode, now), self._fail(plan, checked)
        )

    def _reset(
        self, policy: str, rules: Iterable[str | Rule] | None, ctx: Mapping[str, object]
    ) -> tuple[Op[None], tuple[str, ...]]:
        """A reset (see :mod:`freqguard.engine.resets`), and the ids of the rules it resets;
        the denials it may free are forgotten."""
        plan = self._lookup(policy)
        calls, ids, given = reset_calls(plan, rules, ctx, self._now())
        self._forget(plan, given if len(given) == len(plan.dimensions) else None)
        return reset_op(calls), ids

    def _forget(self, plan: PolicyPlan, texts: Mapping[str, str] | None) -> None:
        """A refund or reset of ``texts``: the denials it may free are forgotten. When every
        rule is keyed by the whole context, only that context's; else (or with ``texts``
        None: a per-key limit changed) all of the policy's (a state shared by several
        contexts may have been freed)."""
        if self._cache is not None:
            dims = set(plan.dimensions)
            whole = texts is not None and all(set(r.by) == dims for r in plan.policy.rules)
            self._cache.forget(plan.name, _cache_key(plan, texts) if texts and whole else None)

    def _many(
        self, policy: str, contexts: Iterable[Mapping[str, object]], cost: object
    ) -> tuple[list[_Hit], list[_Hit], Op[list[Decision]]]:
        """A batch: every context validated first; those the deny cache answers are not sent.
        Hits that failed (a cluster node, say) are answered by ``on_error``, the rest by the
        store."""
        plan = self._lookup(policy)
        hits = [self._hit(policy, cost, ctx) for ctx in contexts]
        sent = [hit for hit in hits if hit.cached is None]
        checked = plan.check_cost(cost)
        texts = [dict(hit.texts) for hit in sent]

        how, there = self._on_failure(plan, checked)

        def rerun(indices: list[int]) -> Op[list[Any]]:  # the failed hits, on the fallback
            return many_op(there, [texts[i] for i in indices], checked, self._now, True)

        batch = many_op(plan, texts, checked, self._now, self._node_of is not None)
        return hits, sent, settle_many(batch, how, self._fail(plan, checked), rerun)

    def _many_done(
        self, hits: list[_Hit], sent: list[_Hit], decided: list[Decision]
    ) -> list[Decision]:
        share = (perf_counter() - hits[0].start) / len(hits) if self.observers and hits else 0.0
        answers = iter(decided)
        out = []
        for hit in hits:
            if hit.cached is not None:
                out.append(hit.cached)
                continue
            decision = next(answers)
            out.append(self._hit_done(hit._replace(start=perf_counter() - share), decision))
        return out

    def _acquire(
        self,
        policy: str,
        timeout: float | None,
        cost: object,
        ctx: Mapping[str, object],
        clock: Clock,
    ) -> tuple[_Hit, Op[Decision]]:
        hit = self._hit(policy, cost, ctx, cached=False)  # it waits for its turn anyway
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 <= timeout < float("inf")
        ):
            raise ConfigError(f"timeout must be None or finite seconds >= 0, got {timeout!r}")
        plan, texts, checked = hit.plan, hit.texts, hit.cost
        fail = self._fail(plan, checked)

        def attempt(now: int | None) -> Op[Decision]:
            return self._guarded(
                plan, lambda p: decide_op(p, texts, checked, HIT, now), fail, checked
            )

        op = acquire_op(plan, attempt, checked, timeout, self._now, clock)
        return hit, (self._told(hit, op) if self.observers else op)

    def _told(self, hit: _Hit, op: Op[Decision]) -> Op[Decision]:
        """``op``, its giving up (``CapExceeded``) told to the observers as the denial it is."""
        try:
            return (yield from op)
        except CapExceeded as exc:
            self._decided(exc.decision, hit.texts, perf_counter() - hit.start)
            raise


class _Hit(NamedTuple):
    plan: PolicyPlan
    texts: Mapping[str, str]
    cost: int
    cached: Decision | None
    start: float
    mark: tuple[int, float]  # the deny cache's, before the store was asked


_NO_MARK = (0, 0.0)


def _cache_key(plan: PolicyPlan, texts: Mapping[str, str]) -> Key:
    """A context's deny-cache entry: its values in the policy's dimension order, then those
    its rules read (a plan, a zone, a priority: a denial at one tier, in one zone or of one
    priority is not another's)."""
    values = [texts[d] for d in plan.dimensions]
    values.extend([texts.get(name, "") for name in plan.reads])
    return DenyCache.key(plan.name, values)
