"""A guard's use of its deny cache (:class:`~freqguard.engine.denycache.DenyCache`): asked
before a hit goes to the store, told the store's denials, and made to forget those a refund,
a reset or a per-key limit may free."""

from __future__ import annotations

from collections.abc import Mapping

from freqguard.clock import Clock
from freqguard.decision import Decision, lapsing
from freqguard.engine.denycache import DenyCache, Key
from freqguard.engine.plan import PolicyPlan

__all__ = ["Denials"]


class Denials:
    """A guard's deny cache in use (``cache`` None: the guard has none, and every method
    but :meth:`forget` is never called).

    Args:
        deny_cache: remember up to this many denials (0: none), on a monotonic clock, or on
            the guard's own when it pins its time (its denials are in that time); or the
            :class:`DenyCache` to use.
        clock: the guard's clock, when it pins its time.
    """

    __slots__ = ("cache",)

    def __init__(self, deny_cache: object, clock: Clock | None) -> None:
        self.cache: DenyCache | None
        if isinstance(deny_cache, DenyCache):
            self.cache = deny_cache
        elif (
            isinstance(deny_cache, (int, float))
            and not isinstance(deny_cache, bool)
            and deny_cache == 0
        ):
            self.cache = None
        elif clock is None:
            self.cache = DenyCache(deny_cache)  # type: ignore[arg-type] # (checked there)
        else:
            self.cache = DenyCache(deny_cache, clock=clock.now)  # type: ignore[arg-type]

    def answer(self, plan: PolicyPlan, texts: Mapping[str, str], cost: int) -> Decision | None:
        """The denial remembered for this hit, as of now, or None: ask the store."""
        assert self.cache is not None
        return self.cache.get(plan.name, _key(plan, texts), cost)

    def snapshot(self, plan: PolicyPlan) -> tuple[int, float]:
        """What :meth:`remember` must be given, read before the store is asked."""
        assert self.cache is not None
        return self.cache.snapshot(plan.name)

    def remember(
        self,
        plan: PolicyPlan,
        texts: Mapping[str, str],
        cost: int,
        decision: Decision,
        snapshot: tuple[int, float],
    ) -> None:
        """Remember a denial of the store's (none of another source: a fail-closed answer
        says nothing of the caps), unless a rule at another rate than its own denied it
        while the record held a per-key limit with a ``ttl`` (:func:`lapsing`), which may
        lapse before the denial's ``retry_after`` (a tier's rate does not; a change of
        either forgets the cache's denials)."""
        if self.cache is None or decision.allowed or decision.source != "backend":
            return
        own = plan.policy.rules
        if lapsing(decision) and not all(any(r is o for o in own) for r in decision.denied_by):
            return
        self.cache.put(plan.name, _key(plan, texts), cost, decision, snapshot)

    def forget(self, plan: PolicyPlan, texts: Mapping[str, str] | None) -> None:
        """A refund or reset of ``texts``: the denials it may free are forgotten. When every
        rule is keyed by the whole context, only that context's; else (or with ``texts``
        None: a per-key limit changed) all of the policy's (a state shared by several
        contexts may have been freed)."""
        if self.cache is not None:
            dims = set(plan.dimensions)
            whole = texts is not None and all(set(r.by) == dims for r in plan.policy.rules)
            self.cache.forget(plan.name, _key(plan, texts) if texts and whole else None)


def _key(plan: PolicyPlan, texts: Mapping[str, str]) -> Key:
    """A context's deny-cache entry: its values in the policy's dimension order, then those
    its rules read (a plan, a zone, a priority: a denial at one tier, in one zone or of one
    priority is not another's)."""
    values = [texts[d] for d in plan.dimensions]
    values.extend([texts.get(name, "") for name in plan.reads])
    return DenyCache.key(plan.name, values)
