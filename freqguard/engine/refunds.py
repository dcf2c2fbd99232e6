"""A refund of one decision: exactly what that hit took, only once (its receipt spent), on
the backend that decided it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from freqguard.decision import Decision, Receipt, with_source
from freqguard.engine.denials import Denials
from freqguard.engine.failover import Failover, elsewhere, resilient
from freqguard.engine.ops import Op, refund_op
from freqguard.engine.plan import PolicyPlan
from freqguard.engine.registry import PolicyRegistry
from freqguard.errors import BackendUnavailable, ConfigError, shown

__all__ = ["Receipts", "maybe_applied", "unspend"]


class Receipts:
    """``refund(decision)``: the decision's receipt used once, and the operation that
    gives back what its hit took.

    Args:
        policies: the guard's registry.
        failover: the policies' ``on_error``.
        denials: the guard's deny cache in use (a refund may free a denial).
        now: the time the guard's calls are made at (None: the store's).
    """

    __slots__ = ("_denials", "_failover", "_now", "_policies")

    def __init__(
        self,
        policies: PolicyRegistry,
        failover: Failover,
        denials: Denials,
        now: Callable[[], int | None],
    ) -> None:
        self._policies = policies
        self._failover = failover
        self._denials = denials
        self._now = now

    def refund(
        self, decision: Decision, cost: int | None, ctx: Mapping[str, object]
    ) -> Op[Decision] | Decision:
        """The operation that gives back exactly what ``decision``'s hit took, its receipt
        spent (given back by :func:`unspend` if the refund surely did not happen); a
        decision that consumed nothing is answered as it is.

        Raises:
            ConfigError: a cost or context given, or the decision refunded already.
        """
        if cost is not None or ctx:
            raise ConfigError(
                "refund(decision) takes no cost or context: it gives back exactly what that "
                "hit took; use refund(policy, cost, **context) to give back the newest units"
            )
        return self._give_back(decision, lambda plan, receipt: receipt)

    def release(self, decision: Decision) -> Op[Decision] | Decision:
        """The operation that gives back the leases ``decision``'s hit took (its concurrency
        rules' units), the other rules' kept; its receipt spent, as by :meth:`refund`."""
        return self._give_back(decision, lambda plan, receipt: plan.leases_of(receipt), True)

    def _give_back(
        self,
        decision: Decision,
        sent: Callable[[PolicyPlan, Receipt], Receipt],
        leases: bool = False,
    ) -> Op[Decision] | Decision:
        """Claim ``decision``'s receipt and give back what ``sent`` makes of it; with
        ``leases``, by the plan it was taken under though the policy was replaced since (a
        lease is a time in a log: the same, whatever limit or lease the rule has now)."""
        if not isinstance(decision, Decision):  # release(...)'s only argument
            raise TypeError(
                f"release takes the Decision of a hit (its take_lease's), got {shown(decision)}"
            )
        receipt = decision.receipt
        if receipt is None:
            return decision
        failover, name = self._failover, decision.policy
        fallback = decision.source == "fallback"
        plan = self._policies.plan(name)
        if receipt.prefix not in (None, plan.prefix):  # another guard's keys: not these
            raise ConfigError(
                f"this decision of policy {name!r} was made by a guard of key prefix "
                f"{receipt.prefix!r}, and this guard's is {plan.prefix!r}: give it back "
                "through a guard of its prefix"
            )
        there = failover.on_failure(plan)[1] if fallback else plan  # its limits shared out
        if leases and there.fingerprint != receipt.fingerprint:  # a deploy since the take
            taken = failover.taken_under(name, receipt.fingerprint) if fallback else None
            if taken is None:  # the store's, or a plain fallback's: the plan itself
                taken = (self._policies.taken_under(name, receipt.fingerprint),) * 2
            plan, there = taken
        # a release of a decision that holds no lease (refused before its receipt is spent:
        # refund(decision) still gives its units back)
        if leases and not plan.leased and plan.fingerprint == receipt.fingerprint:
            raise ConfigError(
                f"this decision of policy {name!r} holds no lease (the policy has no "
                "concurrency rule): refund(decision) gives back what its hit took"
            )
        backend = receipt.fallback
        if fallback and backend is not None:
            backend = failover.drive(backend)  # as this face drives it
        elif fallback:  # a copy of the receipt (pickled): where the policy falls back now
            backend = failover.on_failure(plan)[0]
            if isinstance(backend, str):
                raise ConfigError(
                    f"this decision of policy {name!r} was taken on a fallback backend "
                    "the policy no longer has; it cannot be given back there"
                )
        with _CLAIM:  # two refunds of one decision at once: only one goes through
            if receipt.spent:
                raise ConfigError(
                    f"this decision of policy {decision.policy!r} was already refunded or released"
                )
            receipt.spent = True
        try:
            self._denials.forget(plan, receipt.context)
            given = sent(plan, receipt)
            if fallback:  # it consumed on the fallback: give back there
                return _marked(elsewhere(refund_op(there, given, self._now()), backend), "fallback")
            op = refund_op(plan, given, self._now())
            on_error = failover.of(plan)
            if on_error == "raise":
                return op
            # nothing given back is no denial, and a receipt of the store is no use to a
            # fallback: answered as failing open, whatever on_error is (docs/operations.md)
            return resilient(lambda: op, "allow", self._unrefunded(plan, receipt))
        except BaseException:
            unspend(receipt)
            raise

    def _unrefunded(
        self, plan: PolicyPlan, receipt: Receipt
    ) -> Callable[[str, BackendUnavailable], Decision]:
        """The answer to a refund the store could not take: nothing given back (the receipt
        can be refunded again later), the degraded answer of ``on_error``."""
        fail = self._failover.answer(plan, receipt.cost)

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
