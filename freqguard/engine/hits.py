"""A guard's operations by policy and context, prepared to drive: a hit (the deny cache asked
first, its decision remembered and told), a peek, a refund or reset by context, a batch, an
acquire; each validated, and a store failure answered by the policy's ``on_error``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from time import perf_counter
from typing import Any, NamedTuple

from freqguard.clock import Clock
from freqguard.decision import Decision
from freqguard.engine.denials import Denials
from freqguard.engine.failover import Failover, settle_many
from freqguard.engine.observers import Observers
from freqguard.engine.ops import (
    Op,
    acquire_op,
    decide_op,
    give_back,
    many_op,
    reset_op,
    seconds_or_none,
    taken_on,
)
from freqguard.engine.plan import PolicyPlan
from freqguard.engine.registry import PolicyRegistry
from freqguard.engine.requests import Unfit
from freqguard.engine.resets import reset_calls
from freqguard.errors import CapExceeded, ConfigError, shown
from freqguard.rules import Rule
from freqguard.script.calls import Reply, ScriptCall
from freqguard.script.contract import CHECK, HIT, REFUND

__all__ = ["Hit", "Hits"]


class Hit(NamedTuple):
    """A hit, prepared: its plan, context (as text) and cost, validated; the deny cache's
    answer (None: ask the store); when it started (for the observers); the deny cache's
    snapshot, read before the store was asked; and, for a hit that is one script call with
    no failure to answer around it (:meth:`Hits.hit`'s ``lone``), that call, which the
    guard sends alone instead of driving an operation."""

    plan: PolicyPlan
    texts: Mapping[str, str]
    cost: int
    cached: Decision | None
    start: float
    snapshot: tuple[int, float]
    call: ScriptCall | None = None


_NO_SNAPSHOT = (0, 0.0)
_new = tuple.__new__


class Hits:
    """Each operation of a guard by policy and context, as an operation to drive
    (:mod:`freqguard.engine.ops`), and what is done with its answer.

    Args:
        policies: the guard's registry.
        failover: the policies' ``on_error``.
        denials: the guard's deny cache in use.
        observers: the guard's observers, told of each decision.
        now: the time the guard's calls are made at (None: the store's).
        nodes: whether the store has several nodes (a Redis Cluster: a batch can fail on
            one and be answered by the others).
    """

    __slots__ = ("_denials", "_failover", "_nodes", "_now", "_observers", "_plain", "_policies")

    def __init__(
        self,
        policies: PolicyRegistry,
        failover: Failover,
        denials: Denials,
        observers: Observers,
        now: Callable[[], int | None],
        nodes: bool,
    ) -> None:
        self._policies = policies
        self._failover = failover
        self._denials = denials
        self._observers = observers
        self._now = now
        self._nodes = nodes
        self._plain = denials.cache is None

    def hit(
        self,
        policy: str,
        cost: object,
        ctx: Mapping[str, object],
        cached: bool = True,
        lease: bool = False,
        lone: bool = False,
    ) -> Hit:
        """A hit validated, and the deny cache's answer to it (``cached``: asked). A policy
        that holds leases is hit only by ``Guard.lease`` (``lease``), never from the deny
        cache: a lease given back frees its denials before their time. With ``lone`` (the
        guard's accounting has nothing to do around a call), a hit that is one script call
        whose failure is raised carries that call, to be sent alone (``Guard._run``) and
        decided by :meth:`hit_done` as :func:`decide_op` decides its one call; any other
        is driven as :meth:`hit_op`."""
        plan = self._policies.plan(policy)
        if plan.leased and not lease:
            raise ConfigError(
                f"policy {policy!r} has a concurrency rule: take its leases with "
                f"guard.lease({policy!r}, ...) (a with block gives each back), not with hit, "
                "hit_many or acquire"
            )
        if lease and not plan.leased:
            raise ConfigError(
                f"policy {policy!r} counts no calls in flight (no 'N concurrent' rule): "
                f"guard.lease would take its rate units and give nothing back; hit it with "
                f"guard.hit({policy!r}, ...), or give it a concurrency rule"
            )
        checked = plan.check_cost(cost)
        texts = plan.texts(ctx)
        start = perf_counter() if self._observers.active else 0.0
        if lone and self._plain and plan.single_part and self._failover.of(plan) == "raise":
            lone_call = plan.call(texts, self._now(), checked, HIT)  # the usual hit: one call
            # tuple.__new__: a NamedTuple's own __new__ is a Python call, 2-4% of a hit
            return _new(Hit, (plan, texts, checked, None, start, _NO_SNAPSHOT, lone_call))
        answer, snapshot = None, _NO_SNAPSHOT
        if not self._plain and cached and not lease:
            denials = self._denials
            answer = denials.answer(plan, texts, checked)
            if answer is not None:
                self._observers.decided(answer, texts, 0.0)
            snapshot = denials.snapshot(plan)
        call: ScriptCall | None = None
        if lone and plan.single_part and not lease and self._failover.of(plan) == "raise":
            call = plan.call(texts, self._now(), checked, HIT)
        return Hit(plan, texts, checked, answer, start, snapshot, call)

    def hit_op(self, hit: Hit) -> Op[Decision]:
        """The operation that decides ``hit`` (see :func:`~freqguard.engine.ops.decide_op`)."""
        texts, cost, now = hit.texts, hit.cost, self._now()
        return self._told(
            hit,
            self._failover.guarded(
                hit.plan, lambda plan: decide_op(plan, texts, cost, HIT, now), cost, hit=True
            ),
        )

    def hit_done(self, hit: Hit, decided: Decision | Reply) -> Decision:
        """The hit's decision (its operation's, or made of its lone call's reply as
        :func:`decide_op` makes it), a denial remembered, the observers told."""
        if isinstance(decided, Reply):
            try:
                decision = hit.plan.decide([decided], hit.texts, hit.cost, HIT)
            except Unfit as unfit:  # told, as any denial
                if self._observers.active:
                    self._observers.decided(unfit.decision, hit.texts, perf_counter() - hit.start)
                raise
        else:
            decision = decided
        if not self._plain:
            self._denials.remember(hit.plan, hit.texts, hit.cost, decision, hit.snapshot)
        if self._observers.active:
            self._observers.decided(decision, hit.texts, perf_counter() - hit.start)
        return decision

    def decide(
        self, policy: str, cost: object, ctx: Mapping[str, object], mode: int
    ) -> Op[Decision]:
        """A peek, or a refund or reset by context (which the deny cache must forget)."""
        plan = self._policies.plan(policy)
        if mode == REFUND and plan.leased:
            raise ConfigError(
                f"policy {policy!r} has a concurrency rule: a refund by context would give "
                f"back the newest leases, another caller's too; give a lease back with "
                f"guard.release(decision), or refund(decision) to give back its rate units too"
            )
        checked = plan.check_cost(cost, upper=mode != REFUND)  # a peek as a hit of that cost
        texts = plan.texts(ctx)
        now = self._now()
        if mode != CHECK:
            self._denials.forget(plan, texts)
        return self._failover.guarded(
            plan, lambda p: decide_op(p, texts, checked, mode, now), checked
        )

    def reset(
        self, policy: str, rules: Iterable[str | Rule] | None, ctx: Mapping[str, object]
    ) -> tuple[Op[None], tuple[str, ...]]:
        """A reset (see :mod:`freqguard.engine.resets`), and the ids of the rules it resets;
        the denials it may free are forgotten."""
        plan = self._policies.plan(policy)
        calls, ids, given = reset_calls(plan, rules, ctx, self._now())
        self._denials.forget(plan, given if len(given) == len(plan.dimensions) else None)
        return reset_op(calls), ids

    def many(
        self, policy: str, contexts: Iterable[Mapping[str, object]], cost: object
    ) -> tuple[list[Hit], list[Hit], Op[list[Decision]]]:
        """A batch: every context validated first; those the deny cache answers are not sent.
        Hits that failed (a cluster node, say) are answered by ``on_error``, the rest by the
        store."""
        plan = self._policies.plan(policy)
        if isinstance(contexts, (Mapping, str, bytes)):
            raise ConfigError(
                f"hit_many takes a list of contexts (dicts of dimension values, "
                f"[{{'recipient': 'a'}}, ...]), got one {type(contexts).__name__}: "
                f"{shown(contexts, 60)}; for one hit, hit(policy, **context)",
                argument="contexts",
            )
        if not isinstance(contexts, Iterable):
            raise ConfigError(
                f"hit_many takes a list of contexts (dicts of dimension values), got "
                f"{shown(contexts)}",
                argument="contexts",
            )
        hits = []
        for index, ctx in enumerate(contexts):
            if not isinstance(ctx, Mapping):
                raise ConfigError(
                    f"hit_many's context {index} must be a dict of dimension values, got "
                    f"{type(ctx).__name__}: {shown(ctx, 60)}",
                    argument=f"contexts[{index}]",
                )
            try:
                hits.append(self.hit(policy, cost, ctx))
            except ConfigError as exc:  # a context's fault is named by its place in the batch
                exc.in_batch(index)
                raise
        sent = [hit for hit in hits if hit.cached is None]
        checked = plan.check_cost(cost)
        texts = [dict(hit.texts) for hit in sent]
        failover, now = self._failover, self._now

        how, there, given = failover.on_failure(plan, checked)  # given: the fallback

        def rerun(indices: list[int]) -> Op[list[Any]]:  # the failed hits, on the fallback
            op = many_op(there, [texts[i] for i in indices], checked, now, True)
            return taken_on(op, given)

        def undo(results: list[Any]) -> Op[None]:  # what the store admitted, given back
            taken = [r.receipt for r in results if isinstance(r, Decision) and r.receipt]
            return give_back([c for t in taken for c in plan.refund_calls(t, now())])

        batch = many_op(plan, texts, checked, now, self._nodes)
        answer = failover.answer(plan, checked)
        return hits, sent, settle_many(batch, how, answer, rerun, undo)

    def many_done(
        self, hits: list[Hit], sent: list[Hit], decided: list[Decision]
    ) -> list[Decision]:
        """Each hit's decision, in order: the deny cache's, or the store's (each done as
        :meth:`hit_done`, the batch's time shared among its hits)."""
        active = self._observers.active
        share = (perf_counter() - hits[0].start) / len(hits) if active and hits else 0.0
        answers = iter(decided)
        out = []
        for hit in hits:
            if hit.cached is not None:
                out.append(hit.cached)
                continue
            decision = next(answers)
            out.append(self.hit_done(hit._replace(start=perf_counter() - share), decision))
        return out

    def acquire(
        self,
        policy: str,
        timeout: float | None,
        cost: object,
        ctx: Mapping[str, object],
        clock: Clock,
    ) -> tuple[Hit, Op[Decision]]:
        """A hit that waits for its turn (at most ``timeout`` seconds on ``clock``)."""
        hit = self.hit(policy, cost, ctx, cached=False)  # it waits for its turn anyway
        if not seconds_or_none(timeout):
            raise ConfigError(f"timeout must be None or finite seconds >= 0, got {shown(timeout)}")
        plan, texts, checked = hit.plan, hit.texts, hit.cost
        failover = self._failover

        def attempt(now: int | None) -> Op[Decision]:
            return failover.guarded(
                plan, lambda p: decide_op(p, texts, checked, HIT, now), checked, hit=True
            )

        op = acquire_op(plan, attempt, checked, timeout, self._now, clock)
        return hit, (self._told(hit, op) if self._observers.active else op)

    def _told(self, hit: Hit, op: Op[Decision]) -> Op[Decision]:
        """``op``, its giving up (``CapExceeded``), or a cost no rule could grant (``Unfit``),
        told to the observers as the denial it is (a 429 for an integration)."""
        try:
            return (yield from op)
        except (CapExceeded, Unfit) as exc:
            if self._observers.active:
                self._observers.decided(exc.decision, hit.texts, perf_counter() - hit.start)
            raise
