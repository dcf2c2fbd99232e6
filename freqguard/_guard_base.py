"""What Guard and AsyncGuard share: policies, validation, failure handling, the deny cache
and the observers; everything but the few lines that send (``freqguard.guard``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from time import perf_counter
from typing import Any, NamedTuple, TypeVar

from freqguard.backends.base import Reply, ScriptCall
from freqguard.bounds import check_time
from freqguard.clock import Clock
from freqguard.core import Op, PolicyPlan, acquire_op, decide_op, many_op, refund_op
from freqguard.decision import Decision, Receipt, with_source
from freqguard.denycache import DenyCache, Key
from freqguard.errors import (
    BackendUnavailable,
    CapExceeded,
    ConfigError,
    PartialFailure,
    raise_failures,
)
from freqguard.failure import (
    Breaker,
    CircuitOpen,
    Fallback,
    check_on_error,
    elsewhere,
    fail_answer,
    mark_all,
    resilient,
    settle_many,
    shared_out,
)
from freqguard.observe import Observer, backend_label
from freqguard.policy import Policy
from freqguard.rules import check_name
from freqguard.script import CHECK, HIT, REFUND

__all__ = ["DEFAULT_BREAKER", "GuardBase", "check_backend", "maybe_applied", "unspend"]

T = TypeVar("T")
_log = logging.getLogger("freqguard")
DEFAULT_BREAKER: Any = object()  # "a new Breaker()": a default argument must not be shared


def check_backend(guard: str, backend: object, methods: tuple[str, ...]) -> None:
    """Refuse, at construction, a backend the guard could not drive: the alternative is an
    AttributeError at the first hit, far from the mistake."""
    if all(callable(getattr(backend, name, None)) for name in methods) and hasattr(
        backend, "clock"
    ):
        return
    if isinstance(backend, (list, tuple)) and backend and isinstance(backend[0], Policy):
        got = f"a {type(backend).__name__} of policies: pass policies=[...]"
    elif isinstance(backend, Policy):
        got = "a Policy: pass policies=[...]"
    elif isinstance(backend, str):
        maker = "backend_from_url" if guard == "Guard" else "async_backend_from_url"
        got = f"the string {backend!r}: pass {maker}({backend!r})"
    else:
        got = repr(backend)
        other = "AsyncGuard" if guard == "Guard" else "Guard"
        twins = ("aexecute", "aexecute_many") if guard == "Guard" else ("execute", "execute_many")
        if all(callable(getattr(backend, name, None)) for name in twins):
            got += f": {type(backend).__name__} serves {other}, not {guard}"
    kind = "a sync" if guard == "Guard" else "an async"
    raise TypeError(
        f"{guard} needs {kind} backend (with {', '.join(methods)} and clock) as its first "
        f"argument, got {got}"
    )


class GuardBase:
    """Policies, clock, validation, failure handling, deny cache, observers: all but I/O."""

    _methods: tuple[str, ...]  # what a backend (and a fallback backend) must offer

    def __init__(
        self,
        backend: object,
        policies: Iterable[Policy],
        clock: Clock | None,
        prefix: str,
        on_error: object,
        deny_cache: object,
        observers: Iterable[Observer],
        breaker: Breaker | None,
    ) -> None:
        if isinstance(policies, Policy):
            raise TypeError(
                f"policies takes a list of policies: pass policies=[policy], got {policies!r}"
            )
        self.clock = clock
        self.prefix = check_name("key prefix", prefix)
        self.on_error = check_on_error(on_error, type(self).__name__, self._methods)
        self._given_on_error = self.on_error  # as given: a view adapts it (_adopt)
        self._adapt: Callable[[object], object] = _same
        if breaker is not None and not isinstance(breaker, Breaker):
            raise ConfigError(f"breaker must be a Breaker or None, got {breaker!r}")
        self.breaker = breaker
        self.observers: tuple[Observer, ...] = tuple(observers)
        for observer in self.observers:
            if not isinstance(observer, Observer):
                raise TypeError(f"observers must have decided() and failed(), got {observer!r}")
        self._cache = _deny_cache(deny_cache, clock)
        self._plain = not self.observers and self._cache is None
        self._broke: set[tuple[int, str, type[Exception]]] = set()  # observers' errors logged
        self._label = backend_label(backend)
        # a backend of several nodes (Redis Cluster) names each call's: one circuit each
        self._node_of: Callable[[ScriptCall], object] | None = getattr(backend, "node_of", None)
        self._plans: dict[str, PolicyPlan] = {}
        self._on_error: dict[str, object] = {}
        self._shared: dict[tuple[str, int], tuple[PolicyPlan, PolicyPlan]] = {}  # _shared_out
        for policy in policies:
            self.add_policy(policy)

    def add_policy(self, policy: Policy) -> None:
        """Register a policy; re-adding an equal one is a no-op, a different one an error."""
        if not isinstance(policy, Policy):
            raise ConfigError(f"add_policy takes a Policy, got {policy!r}")
        known = self._plans.get(policy.name)
        if known is not None:
            if known.policy == policy:
                return
            raise ConfigError(f"a different policy named {policy.name!r} is already registered")
        # stored as given (a view of this guard adapts what it reads: _Adapted), checked as
        # this guard will drive it
        on_error = self._given_on_error if policy.on_error is None else policy.on_error
        where = f"policy {policy.name!r} on {type(self).__name__}"
        check_on_error(self._adapt(on_error), where, self._methods)
        plan = PolicyPlan(policy, self.prefix)
        if isinstance(on_error, Fallback):  # its shared-out rules checked now, not at a hit
            self._shared_out(plan, on_error.workers)
        self._plans[policy.name] = plan
        self._on_error[policy.name] = on_error

    def _adopt(self, other: GuardBase, fallback: Callable[[object], object]) -> None:
        """Share ``other``'s registry, breaker, deny cache and observers, not copies: a
        policy added to either, now or later, is known to both (an async view of a sync
        guard). ``fallback`` adapts its fallback backends to this guard's kind."""
        self._plans = other._plans
        self._on_error = _Adapted(other._on_error, fallback)
        self.on_error = fallback(other.on_error)
        self._given_on_error, self._adapt = other._given_on_error, fallback
        self.breaker, self.observers, self._cache = other.breaker, other.observers, other._cache
        self._shared = other._shared
        self._plain = other._plain

    @property
    def policies(self) -> Mapping[str, Policy]:
        """The registered policies by name."""
        return {name: plan.policy for name, plan in self._plans.items()}

    def _lookup(self, policy: str) -> PolicyPlan:
        """The plan registered under a policy's name."""
        plan = self._plans.get(policy)
        if plan is None:
            known = ", ".join(sorted(self._plans)) or "none"
            raise ConfigError(f"unknown policy {policy!r} (registered: {known})")
        return plan

    def _now(self) -> int | None:
        return None if self.clock is None else check_time(self.clock.now_us())

    def _request(
        self, policy: str, cost: object, ctx: Mapping[str, object], mode: int
    ) -> tuple[PolicyPlan, dict[str, str], int]:
        """A request's plan, context (as text) and cost, validated."""
        plan = self._lookup(policy)
        checked = plan.check_cost(cost, upper=mode == HIT)
        return plan, plan.texts(ctx), checked

    def _one_call(self, plan: PolicyPlan) -> bool:
        """Whether a hit of ``plan`` may take the one-call path: one slot, and nothing to do
        around the call (no observers, no deny cache, failures raised, no store failures
        being counted: the breaker has nothing to check or reset)."""
        breaker = self.breaker
        return (
            plan.single_slot
            and self._plain
            and self._on_error[plan.name] == "raise"
            and (breaker is None or not breaker.counting)
        )

    # -- failures --------------------------------------------------------------------------

    def _guarded(
        self,
        plan: PolicyPlan,
        make: Callable[[PolicyPlan], Op[T]],
        answer: Callable[[str, BackendUnavailable], T],
        cost: int = 0,
    ) -> Op[T]:
        """``make(plan)``, with a store failure answered by the policy's ``on_error`` (a
        fallback runs it again there, with the plan it decides with there; a hit of a
        ``cost`` its shared-out limits can never admit fails closed instead, to wait for
        the store)."""
        how, there = self._on_failure(plan, cost)
        if how == "raise":
            return make(plan)
        return resilient(lambda: make(plan), how, answer, mark_all, lambda: make(there))

    def _on_failure(self, plan: PolicyPlan, cost: int = 0) -> tuple[object, PolicyPlan]:
        """How a store failure of ``plan`` is answered (``"raise"``, ``"allow"``, ``"deny"``
        or the backend to fall back on) and the plan a fallback decides with: ``plan``
        itself, or its limits shared out (:class:`~freqguard.failure.Fallback`), made once.
        A ``cost`` the shared-out limits can never admit fails closed instead."""
        on_error = self._on_error[plan.name]
        if not isinstance(on_error, Fallback):
            return on_error, plan
        there = self._shared_out(plan, on_error.workers)
        return (on_error.backend if there.fits(cost) else "deny"), there

    def _shared_out(self, plan: PolicyPlan, workers: int) -> PolicyPlan:
        """``plan`` with its limits shared out among ``workers``, made once."""
        made = self._shared.get((plan.name, workers))
        if made is None or made[0] is not plan:
            scaled = PolicyPlan(shared_out(plan.policy, workers), self.prefix)
            made = self._shared[(plan.name, workers)] = (plan, scaled)
        return made[1]

    def _fail(self, plan: PolicyPlan, cost: int) -> Callable[[str, BackendUnavailable], Decision]:
        rules, breaker = plan.policy.rules, self.breaker
        return lambda source, exc: fail_answer(plan.name, rules, cost, source, exc, breaker)

    def _first_call(self, plan: PolicyPlan, cost: object, ctx: Mapping[str, object]) -> ScriptCall:
        """The one call of a one-call hit, validated (the breaker counts no failures: see
        :meth:`_one_call`)."""
        checked, texts = plan.check_cost(cost), plan.texts(ctx)
        return plan.call(texts, self._now(), checked, HIT)

    def _first_reply(self, plan: PolicyPlan, call: ScriptCall, reply: Reply) -> Decision:
        return plan.decide([reply], call.texts, call.cost, HIT)

    def _node(self, call: ScriptCall) -> object:
        """The store node ``call`` goes to (None: the store has one)."""
        node_of = self._node_of
        return None if node_of is None else node_of(call)

    def _admitted(self, policy: str, calls: list[ScriptCall]) -> list[ScriptCall]:
        """The calls the breaker lets go to the store: ``calls`` itself while it counts no
        failures; else a :class:`_Sent` holding each call's node, named once here for the
        check and the accounting both (a slot map learnt again meanwhile must not send a
        probe's answer to another node), without the calls of open circuits. When every
        call is held back, :class:`CircuitOpen` is raised (the observers told)."""
        breaker = self.breaker
        if breaker is None or not breaker.counting:
            return calls
        nodes = [self._node(call) for call in calls]
        held: dict[int, CircuitOpen] = {}
        if breaker.tripped:
            what = f"policy {policy!r} on {self._label}"
            verdicts: dict[object, CircuitOpen | None] = {}
            for index, node in enumerate(nodes):
                if node not in verdicts:  # one check per node: the first may be its probe
                    try:
                        breaker.check(what, node)
                        verdicts[node] = None
                    except CircuitOpen as exc:
                        verdicts[node] = exc
                blocked = verdicts[node]
                if blocked is not None:
                    held[index] = blocked
            if len(held) == len(calls):
                error = held[0]
                self._failed(error, policy)
                raise error
        return _Sent([c for i, c in enumerate(calls) if i not in held], nodes, held)

    def _finished(
        self,
        policy: str,
        step: list[ScriptCall],
        sent: list[ScriptCall],
        outcome: list[Reply] | BackendUnavailable,
    ) -> list[Reply]:
        """The replies to ``step``, of which ``sent`` went to the store and got ``outcome``:
        the breaker and observers told; a failure raised, as it came when every call got it,
        else as a :class:`~freqguard.PartialFailure` with each call's reply or error."""
        if sent is step and type(outcome) is list:  # the common case: nothing to tell
            return outcome
        results = _each(sent, outcome)
        nodes = None
        if isinstance(sent, _Sent):
            answered = iter(results)
            results = [sent.held.get(i) or next(answered) for i in range(len(step))]
            nodes = sent.nodes
        self._account(policy, step, results, nodes)
        raise_failures(results, "calls")
        return results

    def _store_failed(self, exc: BackendUnavailable, policy: str, calls: list[ScriptCall]) -> None:
        """A call of the one-call path failed."""
        self._account(policy, calls, _each(calls, exc))

    def _account(
        self,
        policy: str,
        calls: list[ScriptCall],
        results: list[Any],
        nodes: list[object] | None = None,
    ) -> None:
        """Tell the observers of each failure (an open circuit too: error="CircuitOpen"), and
        the breaker of each node's outcome (``nodes``: as named when the calls were
        admitted): a failure when the node did not answer, a success when it did (an error
        reply, e.g. out of memory, says it is up)."""
        seen: set[int] = set()
        for result in results:
            if isinstance(result, BackendUnavailable) and id(result) not in seen:
                seen.add(id(result))
                self._failed(result, policy)
        breaker = self.breaker
        if breaker is None:
            return
        down: set[object] = set()
        up: set[object] = set()
        if nodes is None:  # named now; a failure names its own (the map may have changed)
            nodes = [
                result.node
                if isinstance(result, BackendUnavailable) and result.node is not None
                else self._node(call)
                for call, result in zip(calls, results, strict=True)
            ]
        for node, result in zip(nodes, results, strict=True):
            if isinstance(result, CircuitOpen):
                continue  # not called
            failed = isinstance(result, BackendUnavailable) and not result.answered
            (down if failed else up).add(node)
        for node in up - down:
            breaker.succeeded(node)
        for node in down:
            breaker.failed(node)

    # -- operations ------------------------------------------------------------------------

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

    def _decided(self, decision: Decision, texts: Mapping[str, str], seconds: float) -> None:
        for observer in self.observers:
            try:
                observer.decided(decision, texts, seconds)
            except Exception as exc:  # an observer never changes a decision
                self._observer_broke(observer, "decided", exc)

    def _failed(self, error: BackendUnavailable, policy: str) -> None:
        for observer in self.observers:
            try:
                observer.failed(error, policy, self._label)
            except Exception as exc:  # nor how a failure is answered
                self._observer_broke(observer, "failed", exc)

    def _observer_broke(self, observer: Observer, method: str, exc: Exception) -> None:
        """Log an observer's error once per observer, method and kind of error: it changes
        no decision, no ``on_error`` answer and no breaker count."""
        seen = (id(observer), method, type(exc))
        if seen in self._broke:
            return
        self._broke.add(seen)
        _log.error(
            "freqguard: observer %r raised in %s(), ignored (logged once): %r",
            observer,
            method,
            exc,
            exc_info=exc,
        )

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

    def _forget(self, plan: PolicyPlan, texts: Mapping[str, str]) -> None:
        """A refund or reset of ``texts``: the denials it may free are forgotten. When every
        rule is keyed by the whole context, only that context's; else all of the policy's
        (a state shared by several contexts may have been freed)."""
        if self._cache is not None:
            dims = set(plan.dimensions)
            whole = all(set(rule.by) == dims for rule in plan.policy.rules)
            self._cache.forget(plan.name, _cache_key(plan, texts) if whole else None)

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

    def _refund(
        self, target: str | Decision, cost: int | None, ctx: Mapping[str, object]
    ) -> Op[Decision] | Decision:
        """A refund by context (the newest units) or of one decision (exactly its own); a
        decision that consumed nothing is answered as it is."""
        if not isinstance(target, Decision):
            return self._decide(target, 1 if cost is None else cost, ctx, REFUND)
        if cost is not None or ctx:
            raise ConfigError(
                "refund(decision) takes no cost or context: it gives back exactly what that "
                "hit took; use refund(policy, cost, **context) to give back the newest units"
            )
        receipt = target.receipt
        if receipt is None:
            return target
        plan = self._lookup(target.policy)
        with _CLAIM:  # two refunds of one decision at once: only one goes through
            if receipt.spent:
                raise ConfigError(f"this decision of policy {target.policy!r} was already refunded")
            receipt.spent = True
        try:
            self._forget(plan, receipt.context)
            on_error = self._on_error[plan.name]
            if target.source == "fallback":  # it consumed on the fallback: give back there
                backend, there = self._on_failure(plan)
                return _marked(
                    elsewhere(refund_op(there, receipt, self._now()), backend), "fallback"
                )
            op = refund_op(plan, receipt, self._now())
            if on_error == "raise":
                return op
            # a receipt of the store is no use to a fallback: answered as failing open
            how = on_error if isinstance(on_error, str) else "allow"
            return resilient(lambda: op, how, self._unrefunded(plan, receipt), mark_all)
        except BaseException:
            unspend(receipt)
            raise

    def _unrefunded(
        self, plan: PolicyPlan, receipt: Receipt
    ) -> Callable[[str, BackendUnavailable], Decision]:
        """The answer to a refund the store could not take: nothing given back (the receipt
        can be refunded again later), the degraded answer of ``on_error``."""
        fail = self._fail(plan, receipt.cost)

        def answer(source: str, exc: BackendUnavailable) -> Decision:
            if not exc.sent:  # surely not applied: it can be refunded again
                unspend(receipt)
            return fail(source, exc)

        return answer


_CLAIM = threading.Lock()


def maybe_applied(exc: BaseException) -> bool:
    """Whether a refund that raised ``exc`` may still be applied by the store: then its
    receipt stays spent (a second refund could give back twice); an under-refund errs on
    the strict side."""
    if isinstance(exc, BackendUnavailable):
        return exc.sent
    return not isinstance(exc, ConfigError)  # e.g. cancelled while the call was out


def unspend(receipt: Receipt | None) -> None:
    """A refund that failed gives its receipt back, so that it can be tried again."""
    if receipt is not None:
        receipt.spent = False


class _Adapted(dict[str, object]):
    """A live view of another guard's per-policy ``on_error``, each value adapted once (a
    hit reads it: no adapter may be made per hit)."""

    def __init__(self, source: dict[str, object], adapt: Callable[[object], object]) -> None:
        super().__init__()
        self._source, self._adapt = source, adapt
        self._made: dict[int, tuple[object, object]] = {}  # id(value) -> (value, adapted)

    def __getitem__(self, name: str) -> object:
        value = self._source[name]
        made = self._made.get(id(value))
        if made is None or made[0] is not value:
            made = self._made[id(value)] = (value, self._adapt(value))
        return made[1]

    def __setitem__(self, name: str, value: object) -> None:
        self._source[name] = value


class _Sent(list[ScriptCall]):
    """The calls of a step the breaker let through; ``nodes``: the node of each call of the
    step; ``held``: the positions in the step of those held back, and the open circuit each
    met."""

    def __init__(
        self, sent: list[ScriptCall], nodes: list[object], held: dict[int, CircuitOpen]
    ) -> None:
        super().__init__(sent)
        self.nodes, self.held = nodes, held


def _same(value: object) -> object:
    return value


def _each(calls: list[ScriptCall], outcome: list[Reply] | BackendUnavailable) -> list[Any]:
    """Each call's reply or error."""
    if isinstance(outcome, PartialFailure):
        return list(outcome.results)
    if isinstance(outcome, BackendUnavailable):
        return [outcome] * len(calls)
    return list(outcome)


def _marked(op: Op[Decision], source: str) -> Op[Decision]:
    return with_source((yield from op), source)


class _Hit(NamedTuple):
    plan: PolicyPlan
    texts: Mapping[str, str]
    cost: int
    cached: Decision | None
    start: float
    mark: tuple[int, float]  # the deny cache's, before the store was asked


_NO_MARK = (0, 0.0)


def _cache_key(plan: PolicyPlan, texts: Mapping[str, str]) -> Key:
    """A context's deny-cache entry: its values in the policy's dimension order."""
    return DenyCache.key(plan.name, [texts[d] for d in plan.dimensions])


def _deny_cache(deny_cache: object, clock: Clock | None) -> DenyCache | None:
    """The guard's deny cache: ``deny_cache`` denials (0: none) on a monotonic clock, or
    on the guard's own when it pins its time (its denials are in that time); or the
    :class:`DenyCache` given."""
    if isinstance(deny_cache, DenyCache):
        return deny_cache
    if deny_cache == 0 and not isinstance(deny_cache, bool):
        return None
    if clock is None:
        return DenyCache(deny_cache)  # type: ignore[arg-type] # (checked there)
    return DenyCache(deny_cache, clock=clock.now)  # type: ignore[arg-type]
