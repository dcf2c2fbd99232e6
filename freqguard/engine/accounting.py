"""Around each step's store calls: the breaker's say before, the breaker and the observers told
after, and a failure answered by the policy's ``on_error``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from freqguard.decision import Decision
from freqguard.engine.breaker import CircuitOpen
from freqguard.engine.failover import (
    fail_answer,
    mark_all,
    resilient,
)
from freqguard.engine.ops import Op
from freqguard.engine.plan import PolicyPlan
from freqguard.engine.registry import Registry
from freqguard.errors import (
    BackendUnavailable,
    PartialFailure,
    raise_failures,
)
from freqguard.observe.base import Observer
from freqguard.script.calls import Reply, ScriptCall

__all__ = ["Accounting"]

T = TypeVar("T")
_log = logging.getLogger("freqguard")


class Accounting(Registry):
    """What a guard does around the store calls of a step."""

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

    def _fail(self, plan: PolicyPlan, cost: int) -> Callable[[str, BackendUnavailable], Decision]:
        rules, breaker = plan.policy.rules, self.breaker
        return lambda source, exc: fail_answer(plan.name, rules, cost, source, exc, breaker)

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


class _Sent(list[ScriptCall]):
    """The calls of a step the breaker let through; ``nodes``: the node of each call of the
    step; ``held``: the positions in the step of those held back, and the open circuit each
    met."""

    def __init__(
        self, sent: list[ScriptCall], nodes: list[object], held: dict[int, CircuitOpen]
    ) -> None:
        super().__init__(sent)
        self.nodes, self.held = nodes, held


def _each(calls: list[ScriptCall], outcome: list[Reply] | BackendUnavailable) -> list[Any]:
    """Each call's reply or error."""
    if isinstance(outcome, PartialFailure):
        return list(outcome.results)
    if isinstance(outcome, BackendUnavailable):
        return [outcome] * len(calls)
    return list(outcome)
