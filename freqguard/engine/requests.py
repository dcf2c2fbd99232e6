"""What a call brings, checked: its context's names and values, and its cost, before the
store decides it and, for a cost no rule as decided could grant, after a denial. The
checks of :class:`~freqguard.engine.plan.PolicyPlan`, which inherits them. No I/O."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence

from freqguard.decision import Decision
from freqguard.errors import ConfigError, shown
from freqguard.policy import Policy
from freqguard.rules import Rule
from freqguard.script.calls import Part, Reply
from freqguard.script.keys import value_text

__all__ = ["Narrower", "Requests", "Unfit"]

#: A rule a cost is past the capacity of, as decided (:meth:`Requests.narrower`): its index
#: in the policy, the rule as decided, that capacity, and its turn (µs; 0: none).
Narrower = tuple[int, Rule, int, int]


class Unfit(ConfigError):
    """A cost no rule as decided for its hit could ever grant (a ``ConfigError`` naming
    ``cost``), with the denial the store made of it (it consumed nothing)."""

    def __init__(self, message: str, decision: Decision) -> None:
        super().__init__(message, argument="cost")
        self.decision = decision

    def __reduce__(self) -> tuple[object, ...]:  # as every freqguard error, it pickles
        return (Unfit, (str(self), self.decision))


class Requests:
    """The checks of a call's context and cost, on a compiled policy's facts."""

    __slots__ = ()
    name: str
    policy: Policy
    dimensions: tuple[str, ...]
    parts: tuple[Part, ...]
    _dimset: frozenset[str]
    _accepts: frozenset[str]
    _most: int
    _narrow: Rule | None

    def _rules(self, replies: Sequence[Reply]) -> tuple[Rule, ...]:
        raise NotImplementedError  # the rules as the replies decided them (PolicyPlan)

    def parts_for(
        self, texts: Mapping[str, str], now: int | None, *, bare: bool = False
    ) -> tuple[Part, ...]:
        raise NotImplementedError  # the parts a call of texts runs (PolicyPlan)

    def texts(self, ctx: Mapping[str, object]) -> dict[str, str]:
        """Validate a hit's context and turn its values into text (the dimensions, and the
        values the policy's ``rate_for`` functions read, where given)."""
        if ctx.keys() != self._dimset:
            keys = ctx.keys()
            if self._dimset <= keys <= self._accepts:
                return {d: value_text(self.name, d, v) for d, v in ctx.items()}
            missing = [d for d in self.dimensions if d not in ctx]
            # as text, cut short: a mapping given to hit_many may hold any key
            unknown = sorted(str(k)[:64] for k in ctx if k not in self._accepts)
            wanted = ", ".join(self.dimensions) or "none"
            if self.policy.reads:
                wanted += f"; and may read: {', '.join(self.policy.reads)}"
            problems = []
            if missing:
                problems.append(f"missing dimension(s) {', '.join(missing)}")
            if unknown:
                named = ", ".join(_meant(name, self._accepts) for name in unknown)
                problems.append(f"unknown dimension(s) {named}")
            raise ConfigError(
                f"policy {self.name!r}: {'; '.join(problems)} (it takes: {wanted})",
                argument=f"context.{(unknown or missing)[0]}",
            )
        # a str as it is, without a call (the usual value); any other checked by value_text
        return {d: v if type(v) is str else value_text(self.name, d, v) for d, v in ctx.items()}

    def check_cost(self, cost: object, *, upper: bool = True) -> int:
        """Validate a cost: an integer >= 0 that some hit could ever be granted."""
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
            named = ""
            if isinstance(cost, str) and cost.isascii() and cost.isdigit():
                named = f"; a cost is an integer: {int(cost[:12])}, not {cost[:12]!r}"
            elif isinstance(cost, str) and self.dimensions:  # limits' identifiers, by position
                named = f"; the context is given by name: {self.dimensions[0]}={cost[:40]!r}"
            raise ConfigError(
                f"cost must be an integer >= 0, got {shown(cost)} (policy {self.name!r}){named}",
                argument="cost",
            )
        if upper and cost > self._most:
            raise ConfigError(
                f"cost {shown(cost)} exceeds the largest capacity a rule of policy {self.name!r} "
                f"could be decided at ({self._most}): no hit of that cost could ever be allowed",
                argument="cost",
            )
        return cost

    def check_fits(self, narrower: Sequence[Narrower], cost: int, decision: Decision) -> None:
        """After a denial (``decision``): refuse a cost no hit of this context could ever be
        granted (a rule's capacity as decided for it: its tier's or per-key limit's rate,
        less what its priority must leave), as an error rather than a denial for ever. A
        per-key limit that lapses (set with a ``ttl``) is not for ever: its denial stands,
        told to retry once it lapses (``narrower``, from :meth:`narrower`, says when).

        Raises:
            Unfit: naming the rule and the capacity, and carrying the denial (an HTTP
                integration answers it as the denial it is; a fallback fails closed).
        """
        for _, rule, takes, turn in narrower:
            if takes > 0 and not turn:  # none: a per-key limit below the reserve of other
                raise Unfit(  # priorities, a denial (no cost is at fault)
                    f"cost {shown(cost)} exceeds the capacity {takes} of rule {rule.id!r} "
                    f"(policy {self.name!r}) for this hit: no hit of that cost could ever "
                    "be allowed",
                    decision,
                )

    def narrower(
        self, replies: Sequence[Reply], cost: int, texts: Mapping[str, str] | None
    ) -> list[Narrower]:
        """Each rule that denied a hit whose ``cost`` is past its capacity as decided: its
        index, the rule, that capacity, and its *turn*: the µs until a hit of ``cost`` passes
        it once the per-key limit that makes it so lapses (set with a ``ttl``), the state as
        it is now read at the rule's own numbers then (its tier's, its priority's reserve);
        0 where no such limit lapses, or the rule without it cannot hold the cost either."""
        out: list[Narrower] = []
        rules = self._rules(replies)
        own: tuple[Part, ...] | None = None  # the parts as decided without per-key limits
        for number, (part, reply) in enumerate(zip(self.parts, replies)):  # noqa: B905
            params = [p for spec in reply.part.specs for p in spec.rules]
            stored = {limit.tag: limit for limit in reply.limits}  # with their expiries
            applied = reply.part.limits  # those that applied (one another keying's may not)
            for at, (index, p, wait) in enumerate(zip(part.rule_index, params, reply.waits)):  # noqa: B905
                takes = p.capacity - p.reserve
                if not wait or p.shadow or takes >= cost:
                    continue
                limit = stored.get(p.tag)
                if limit is not None and (not applied or applied[at] != limit._replace(expiry=0)):
                    limit = None  # stored, but another keying's or a tier's instead
                turn = 0
                if limit is not None and limit.expiry > reply.now:
                    if own is None:
                        own = self.parts if texts is None else self.parts_for(texts, reply.now)
                    turn = _turn(reply, own[number], at, cost, limit.expiry - reply.now)
                out.append((index, rules[index], takes, turn))
        return out

    def fits(self, cost: int) -> bool:
        """Whether a hit of ``cost`` could be allowed by the rules as written that bind every
        hit (not a tier's, not one priority's): a fallback's shared-out plan asks."""
        return self._narrow is None or cost <= self._narrow.capacity


#: The keyword arguments of the guard's calls, which a misspelling makes a dimension.
_KEYWORDS = ("cost", "timeout", "ttl", "rules")


def _meant(name: str, accepts: Iterable[str]) -> str:
    """An unknown name, with the dimension (or keyword argument) it was likely meant as."""
    close = difflib.get_close_matches(name[:64], sorted(accepts), n=1)
    if close:
        return f"{name} (did you mean {close[0]}?)"
    if name in _KEYWORDS:  # a keyword of another of the guard's calls
        return f"{name} (an argument of another call, not of this one)"
    close = difflib.get_close_matches(name[:64], _KEYWORDS, n=1)
    return f"{name} (did you mean {close[0]}=?)" if close else name


def _turn(reply: Reply, own: Part, at: int, cost: int, lapse: int) -> int:
    """µs until a hit of ``cost`` passes the rule at ``at`` in ``reply``'s part once its
    per-key limit lapses (in ``lapse`` µs): its state as the store keeps it, loaded then as
    the store loads it at the rule's own numbers (``own``, the part without limits), no
    other hit coming first; 0 when those numbers cannot hold the cost either."""
    first = 0
    for spec, state in zip(own.specs, reply.kept()):  # noqa: B905 (one a state)
        if at < first + len(spec.rules):
            rule = spec.rules[at - first]
            if rule.capacity - rule.reserve < cost:
                return 0
            later = reply.now + lapse
            twin = spec.twin
            return lapse + twin.check(
                twin.load(state, later, spec), later, cost + rule.reserve, rule
            )
        first += len(spec.rules)
    raise AssertionError("unreachable: a part's rules are its states' rules")
