"""A refund of one decision: exactly what that hit took, only once (its receipt spent), on
the backend that decided it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from freqguard.decision import Decision, Receipt, with_source
from freqguard.engine.failover import (
    elsewhere,
    mark_all,
    resilient,
)
from freqguard.engine.hits import Hits
from freqguard.engine.ops import Op, refund_op
from freqguard.engine.plan import PolicyPlan
from freqguard.errors import (
    BackendUnavailable,
    ConfigError,
)
from freqguard.script.contract import REFUND

__all__ = ["Refunds", "maybe_applied", "op_policy", "unspend"]


class Refunds(Hits):
    """``refund(decision)``."""

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


def _marked(op: Op[Decision], source: str) -> Op[Decision]:
    return with_source((yield from op), source)


def op_policy(target: str | Decision) -> str:
    """The policy a refund's target names."""
    return target.policy if isinstance(target, Decision) else target
