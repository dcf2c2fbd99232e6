"""The accounting of a guard's store calls: the breaker's say before each step's calls (a
circuit per store node), and after them the breaker told each node's outcome and the
observers each failure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from freqguard.engine.breaker import Breaker, CircuitOpen
from freqguard.engine.observers import Observers
from freqguard.errors import (
    BackendUnavailable,
    ConfigError,
    PartialFailure,
    raise_failures,
)
from freqguard.script.calls import Reply, ScriptCall

__all__ = ["Accounting", "Outcome"]

#: What a step's calls got from the store: their replies, or the failure or refusal raised.
Outcome = list[Reply] | BackendUnavailable | ConfigError


class Accounting:
    """What a guard does around the store calls of each step.

    Args:
        breaker: the guard's breaker, or None.
        observers: the guard's observers, told of each failure.
        node_of: the backend's, when it has several nodes (Redis Cluster): the node each
            call goes to, a circuit each.
        label: the backend's label, for messages.
    """

    __slots__ = ("_breaker", "_label", "_node_of", "_observers")

    def __init__(
        self,
        breaker: Breaker | None,
        observers: Observers,
        node_of: Callable[[ScriptCall], object] | None,
        label: str,
    ) -> None:
        self._breaker = breaker
        self._observers = observers
        self._node_of = node_of
        self._label = label

    @property
    def quiet(self) -> bool:
        """Whether there is nothing to do around a call: the breaker (if any) counts no
        failures, so it has none to check and none to reset."""
        breaker = self._breaker
        return breaker is None or not breaker.counting

    def _node(self, call: ScriptCall) -> object:
        """The store node ``call`` goes to (None: the store has one)."""
        node_of = self._node_of
        return None if node_of is None else node_of(call)

    def admitted(self, policy: str, calls: list[ScriptCall]) -> list[ScriptCall]:
        """The calls the breaker lets go to the store: ``calls`` itself while it counts no
        failures; else a :class:`_Sent` holding each call's node, named once here for the
        check and the accounting both (a slot map learnt again meanwhile must not send a
        probe's answer to another node), without the calls of open circuits. When every
        call is held back, :class:`CircuitOpen` is raised (the observers told)."""
        breaker = self._breaker
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
                self._observers.failed(error, policy)
                raise error
        return _Sent([c for i, c in enumerate(calls) if i not in held], nodes, held)

    def finished(
        self,
        policy: str,
        step: list[ScriptCall],
        sent: list[ScriptCall],
        outcome: Outcome,
    ) -> list[Reply]:
        """The replies to ``step``, of which ``sent`` went to the store and got ``outcome``:
        the breaker and observers told; a failure raised, as it came when every call got it,
        else as a :class:`~freqguard.PartialFailure` with each call's reply or error. A
        refusal (a ``ConfigError``) is raised as it is, its ``results`` those of ``step``'s
        calls (the operation gives back what the others took): no outage, its nodes up."""
        if sent is step and type(outcome) is list:  # the common case: nothing to tell
            return outcome
        refused: ConfigError | None = None
        if isinstance(outcome, ConfigError):  # each call's reply or error, or the refusal
            refused, results = outcome, outcome.results or [outcome] * len(sent)
        else:
            results = _each(sent, outcome)
        nodes = None
        if isinstance(sent, _Sent):
            results, nodes = sent.placed(results), sent.nodes
        self._account(policy, step, results, nodes)
        if refused is not None:
            if refused.results is not None:
                refused.results = results
            raise refused
        raise_failures(results, "calls")
        return results

    def failed_alone(self, policy: str, call: ScriptCall, exc: BackendUnavailable) -> None:
        """The one call of a hit sent alone (while :attr:`quiet`) failed: the observers and
        the breaker told."""
        self._account(policy, [call], _each([call], exc))

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
                self._observers.failed(result, policy)
        breaker = self._breaker
        if breaker is None:
            return
        down: dict[object, BaseException] = {}  # by node: its last failure
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
            if isinstance(result, BackendUnavailable) and not result.answered:
                down[node] = result
            else:
                up.add(node)
        for node in up - down.keys():
            breaker.succeeded(node)
        for node, error in down.items():
            breaker.failed(node, error)


class _Sent(list[ScriptCall]):
    """The calls of a step the breaker let through; ``nodes``: the node of each call of the
    step; ``held``: the positions in the step of those held back, and the open circuit each
    met."""

    def __init__(
        self, sent: list[ScriptCall], nodes: list[object], held: dict[int, CircuitOpen]
    ) -> None:
        super().__init__(sent)
        self.nodes, self.held = nodes, held

    def placed(self, results: list[Any]) -> list[Any]:
        """Each call of the step's result: ``results`` (of the calls sent, in order) in
        their places, and the open circuit's error in each place held back."""
        answered = iter(results)
        return [self.held.get(i) or next(answered) for i in range(len(self.nodes))]


def _each(calls: list[ScriptCall], outcome: list[Any] | BackendUnavailable) -> list[Any]:
    """Each call's reply or error."""
    if isinstance(outcome, PartialFailure):
        return list(outcome.results)
    if isinstance(outcome, BackendUnavailable):
        return [outcome] * len(calls)
    return list(outcome)
