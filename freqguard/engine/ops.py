"""The I/O-free core shared by Guard and AsyncGuard.

A policy is compiled once into a :class:`PolicyPlan`: which slots it spans and which keys each
slot touches (both as :func:`freqguard.script.keys.policy_layout` lays them out), the integers each
rule needs, and how replies map back to rules. Operations are
generators that yield what to do (a batch of script calls, or a :class:`Sleep`) and receive the
replies; the sync and async guards only drive them (``freqguard/_async/guard.py``). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple, TypeVar

from freqguard.clock import Clock
from freqguard.decision import Decision, Receipt, make_decision
from freqguard.errors import BackendUnavailable, CapExceeded, ConfigError, PartialFailure
from freqguard.policy import Policy
from freqguard.rules import Rule
from freqguard.script.calls import Reply, ScriptCall, Slot
from freqguard.script.contract import CHECK, HIT, REFUND
from freqguard.script.keys import StateLayout, policy_layout, value_text
from freqguard.script.strategies import TWINS, RuleParams, StateSpec

__all__ = ["PolicyPlan", "Sleep", "acquire_op", "decide_op", "many_op", "refund_op", "undo"]

_US = 1_000_000.0
T = TypeVar("T")


class Sleep(NamedTuple):
    """An operation step: wait this many seconds, then resume."""

    seconds: float


Step = list[ScriptCall] | Sleep
Op = Generator[Step, list[Reply], T]


def rule_params(rule: Rule) -> RuleParams:
    window = rule.rate.window_us
    interval = -(-window // rule.limit) if rule.strategy.uses_burst else 0
    return RuleParams(rule.capacity, window, interval, rule.shadow)


def _compile_slot(states: tuple[StateLayout, ...], rules: tuple[Rule, ...]) -> Slot:
    """A slot of a policy (its states, from :func:`~freqguard.script.keys.policy_layout`),
    compiled."""
    specs: list[StateSpec] = []
    for state in states:
        first = rules[state.rules[0]]
        params = tuple(rule_params(rules[i]) for i in state.rules)
        twin = TWINS[first.strategy]
        window = max(p.window for p in params)
        cap = max(p.capacity for p in params)
        specs.append(StateSpec(twin, params, twin.horizon(params), first.shadow, window, cap))
    rule_index = [i for state in states for i in state.rules]
    return Slot.build(specs, [state.key for state in states], rule_index)


class PolicyPlan:
    """A policy compiled for execution: its slots (their keys as :mod:`freqguard.script.keys` lays
    them out, the integers each rule needs), how a hit is validated, and how replies map back
    to rules."""

    __slots__ = (
        "_dimset",
        "_narrow",
        "_order",
        "dimensions",
        "fingerprint",
        "name",
        "policy",
        "single_slot",
        "slots",
    )

    def __init__(self, policy: Policy, prefix: str) -> None:
        self.policy = policy
        self.name = policy.name
        self.dimensions = policy.dimensions
        self._dimset = frozenset(self.dimensions)
        rules = policy.rules
        self.slots = tuple(_compile_slot(states, rules) for states in policy_layout(policy, prefix))
        self.single_slot = len(self.slots) == 1
        # what a receipt must have been made by: the slots' specs and states (strategies,
        # capacities, windows, rule ids, dimensions), not just the policy's name
        self.fingerprint = "|".join(
            slot.spec_text + "@" + ",".join(layout.key_id for layout in slot.layouts)
            for slot in self.slots
        )
        self._order = tuple(index for slot in self.slots for index in slot.rule_index)
        enforcing = [r for r in rules if not r.shadow]
        # the enforcing rule with the least capacity bounds every cost; a policy of shadow
        # rules only never denies, so any cost goes
        self._narrow = min(enforcing, key=lambda r: r.capacity) if enforcing else None

    # -- requests --------------------------------------------------------------------------

    def texts(self, ctx: Mapping[str, object]) -> dict[str, str]:
        """Validate a hit's context and turn its values into text."""
        if ctx.keys() != self._dimset:
            missing = [d for d in self.dimensions if d not in ctx]
            unknown = sorted(set(ctx) - self._dimset)
            wanted = ", ".join(self.dimensions) or "none"
            problems = []
            if missing:
                problems.append(f"missing dimension(s) {', '.join(missing)}")
            if unknown:
                problems.append(f"unknown dimension(s) {', '.join(unknown)}")
            raise ConfigError(f"policy {self.name!r}: {'; '.join(problems)} (it takes: {wanted})")
        return {d: value_text(self.name, d, v) for d, v in ctx.items()}

    def check_cost(self, cost: object, *, upper: bool = True) -> int:
        """Validate a cost: an integer >= 0 that some hit could ever be granted."""
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
            raise ConfigError(f"cost must be an integer >= 0, got {cost!r} (policy {self.name!r})")
        if upper and self._narrow is not None and cost > self._narrow.capacity:
            rule = self._narrow.id
            raise ConfigError(
                f"cost {cost} exceeds the capacity {self._narrow.capacity} of rule {rule!r} "
                f"(policy {self.name!r}): no hit of that cost could ever be allowed"
            )
        return cost

    def fits(self, cost: int) -> bool:
        """Whether some hit of ``cost`` could ever be allowed (see :meth:`check_cost`)."""
        return self._narrow is None or cost <= self._narrow.capacity

    def calls(
        self, texts: Mapping[str, str], now: int | None, cost: int, mode: int
    ) -> list[ScriptCall]:
        """One script call per slot, in slot order."""
        return [ScriptCall(slot, texts, now, cost, mode) for slot in self.slots]

    def call(self, texts: Mapping[str, str], now: int | None, cost: int, mode: int) -> ScriptCall:
        """The one script call of a policy that lives on one slot."""
        return ScriptCall(self.slots[0], texts, now, cost, mode)

    # -- replies ---------------------------------------------------------------------------

    def decide(
        self,
        replies: list[Reply],
        texts: Mapping[str, str] | None = None,
        cost: int = 0,
        mode: int = CHECK,
    ) -> Decision:
        """Turn one reply per slot (in slot order) into a Decision; the per-rule report and
        the receipt of a hit that consumed are left to the Decision, built when first read."""
        receipt = None
        if mode == HIT and cost > 0 and texts is not None:
            receipt = partial(self._receipt, texts, cost, replies)
        if self.single_slot:
            reply = replies[0]
            waits = reply.waits
            if reply.allowed and not any(waits):  # the common case: no rule said no
                raw = partial(self._raw, replies)
                return make_decision(self.name, True, 0.0, (), raw, receipt)
            order = self.slots[0].rule_index
        else:
            waits = [wait for reply in replies for wait in reply.waits]
            order = self._order
        rules = self.policy.rules
        denied: list[Rule] = [None] * len(rules)  # type: ignore[list-item]
        longest = 0
        for index, wait in zip(order, waits):  # noqa: B905 (the slots built both)
            rule = rules[index]
            if wait and not rule.shadow:
                denied[index] = rule
                longest = max(longest, wait)
        denied_by = tuple(rule for rule in denied if rule is not None)
        allowed = not denied_by
        return make_decision(
            self.name,
            allowed,
            longest / _US,
            denied_by,
            partial(self._raw, replies),
            receipt if allowed else None,
        )

    def _receipt(self, texts: Mapping[str, str], cost: int, replies: list[Reply]) -> Receipt:
        times = [0] * len(self.policy.rules)
        for slot, reply in zip(self.slots, replies):  # noqa: B905
            for index in slot.rule_index:
                times[index] = reply.now
        marks = tuple(reply.marks(cost, HIT) for reply in replies)
        return Receipt(self.name, cost, tuple(times), texts, marks, self.fingerprint)

    def refund_calls(self, receipt: Receipt, now: int | None) -> list[ScriptCall]:
        """The calls that give back exactly what the hit of ``receipt`` consumed."""
        if receipt.policy != self.name or receipt.fingerprint != self.fingerprint:
            raise ConfigError(
                f"that decision's receipt is for policy {receipt.policy!r} as it was "
                f"registered then, not for policy {self.name!r} as it is now"
            )
        cost = receipt.cost
        return [
            ScriptCall(slot, receipt.context, now, cost, REFUND, marks)
            for slot, marks in zip(self.slots, receipt.marks)  # noqa: B905 (checked above)
        ]

    def _raw(self, replies: list[Reply]) -> tuple[tuple[Rule, int, int, int], ...]:
        """``(rule, remaining, reset_after µs, retry_after µs)`` per rule, in policy order."""
        rules = self.policy.rules
        raw: list[tuple[Rule, int, int, int]] = [None] * len(rules)  # type: ignore[list-item]
        for slot, reply in zip(self.slots, replies):  # noqa: B905
            report = reply.report()
            for index, (remaining, reset), wait in zip(  # noqa: B905
                slot.rule_index, report, reply.waits
            ):
                raw[index] = (rules[index], remaining, reset, wait)
        return tuple(raw)


# -- operations (sans-IO) ------------------------------------------------------------------


def decide_op(
    plan: PolicyPlan, texts: Mapping[str, str], cost: int, mode: int, now: int | None
) -> Op[Decision]:
    """One hit/check/refund/reset of one context.

    A policy on one slot is one script call (``Guard.hit`` sends that call itself, with the
    same :meth:`PolicyPlan.call` and :meth:`PolicyPlan.decide`, to spare a hit this
    generator). A hit on several slots goes slot by slot; when a slot denies, the slots that
    consumed give back exactly what this hit took there and the rest are only checked, so a
    denied hit consumes nothing (atomic per slot, compensated across slots).
    """
    calls = plan.calls(texts, now, cost, mode)
    if len(calls) == 1 or mode != HIT or cost == 0:
        return plan.decide((yield calls), texts, cost, mode)
    replies: list[Reply] = []
    unsure: BackendUnavailable | None = None  # a slot applied it, no replica acknowledged
    for i, call in enumerate(calls):
        try:
            (reply,) = yield [call]
        except GeneratorExit:
            raise
        except BaseException as exc:  # the store failed, or the caller was cancelled
            if not isinstance(exc, BackendUnavailable) or exc.applied is None:
                if replies:  # stopped midway: what this hit took so far goes back
                    yield undo(calls, replies)
                raise
            reply, unsure = exc.applied, exc  # applied: a later slot may still deny it
        if not reply.allowed:
            # give back exactly what this hit took in the earlier slots (their marks), never
            # the newest units there, which may be another caller's
            rest = [c._replace(mode=CHECK) for c in calls[i + 1 :]]
            others = yield undo(calls, replies) + rest
            return plan.decide([*others[:i], reply, *others[i:]])
        replies.append(reply)
    if unsure is not None:  # admitted, and not known to last: on_error answers it
        raise unsure
    return plan.decide(replies, texts, cost, mode)


def undo(calls: Sequence[ScriptCall], replies: Sequence[Reply]) -> list[ScriptCall]:
    """Calls that give back exactly what the hits among ``calls`` (the first
    ``len(replies)``) consumed, by their replies' marks: one for each that was admitted."""
    return [
        c._replace(mode=REFUND, marks=r.marks(c.cost, HIT))
        for c, r in zip(calls, replies)  # noqa: B905 (the replies of the first calls)
        if c.mode == HIT and c.cost and r.allowed
    ]


def refund_op(plan: PolicyPlan, receipt: Receipt, now: int | None) -> Op[Decision]:
    """Give back exactly what one hit consumed (its receipt), in every slot at once."""
    return plan.decide((yield plan.refund_calls(receipt, now)))


def many_op(
    plan: PolicyPlan,
    texts: list[dict[str, str]],
    cost: int,
    now: Callable[[], int | None],
    nodes: bool = False,
) -> Op[list[Decision | BackendUnavailable]]:
    """Many contexts at once, in order; one batch when the policy lives on one slot.

    A context whose calls failed gets its error in place of a decision, and the others are
    decided: on a store of several ``nodes`` (a Redis Cluster) a batch can fail on one node
    and be answered by the rest. On a store of one node, the first failure is everyone's:
    the contexts after it are not tried (each would wait for the same dead store).
    """
    if len(plan.slots) > 1 and cost > 0:
        results: list[Decision | BackendUnavailable] = []
        for t in texts:  # a comprehension cannot yield
            try:
                results.append((yield from decide_op(plan, t, cost, HIT, now())))
            except BackendUnavailable as exc:
                if not nodes:
                    return results + [exc] * (len(texts) - len(results))
                results.append(exc)
            except GeneratorExit:
                raise
            except BaseException:  # cancelled: the hits decided so far, never seen, go back
                taken = [r.receipt for r in results if isinstance(r, Decision) and r.receipt]
                if taken:
                    yield [c for receipt in taken for c in plan.refund_calls(receipt, now())]
                raise
        return results
    at = now()
    width = len(plan.slots)
    calls = [call for t in texts for call in plan.calls(t, at, cost, HIT)]
    try:
        replies: list[Any] = yield calls
    except PartialFailure as exc:  # some nodes answered
        replies = exc.results
    except BackendUnavailable as exc:
        return [exc] * len(texts)
    out: list[Decision | BackendUnavailable] = []
    for i, t in enumerate(texts):
        part = replies[i * width : (i + 1) * width]
        failed = next((r for r in part if isinstance(r, BackendUnavailable)), None)
        out.append(plan.decide(part, t, cost, HIT) if failed is None else failed)
    return out


def acquire_op(
    plan: PolicyPlan,
    attempt: Callable[[int | None], Op[Decision]],
    cost: int,
    timeout: float | None,
    now: Callable[[], int | None],
    clock: Clock,
) -> Op[Decision]:
    """Wait for this caller's own turn, then consume; never reserve future capacity.

    Each denial says exactly when the hit would fit (``retry_after``); the caller sleeps that
    long and tries again (``attempt(now)``: a hit), so there is no polling, and nothing is
    taken from the future. If the turn is further away than the timeout allows, it fails at
    once with ``CapExceeded``.
    """
    deadline = None if timeout is None else clock.now() + timeout
    while True:
        decision = yield from attempt(now())
        if decision.allowed:
            return decision
        if deadline is not None and clock.now() + decision.retry_after > deadline:
            raise CapExceeded(
                decision,
                f"policy {plan.name!r}: the next turn is in {decision.retry_after:.3f}s, "
                f"later than the timeout of {timeout}s allows",
            )
        yield Sleep(decision.retry_after)
