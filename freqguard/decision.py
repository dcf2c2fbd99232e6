"""The answer to a hit: allowed or not, and the state of every rule."""

from __future__ import annotations

from dataclasses import dataclass, field

from freqguard.rules import Rule

__all__ = ["Decision", "RuleState"]

_US = 1_000_000.0


@dataclass(frozen=True, slots=True)
class RuleState:
    """What one rule said.

    Attributes:
        rule: the rule.
        allowed: whether this rule admitted the hit (a shadow rule's "no" does not block).
        limit: the rule's capacity (its limit; the burst for token-bucket and gcra).
        remaining: cost units it would still admit now (after this hit, if it consumed).
        reset_after: seconds until the rule is back to full capacity.
        retry_after: seconds until this hit would fit; 0.0 when it did.
    """

    rule: Rule
    allowed: bool
    limit: int
    remaining: int
    reset_after: float
    retry_after: float


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer for one hit of one policy; true when allowed.

    The top-level ``remaining``, ``limit`` and ``reset_after`` are those of the binding rule:
    the denying rule that frees up last, or else the rule with the least remaining.
    ``retry_after`` is the seconds until every denying rule admits the hit (0.0 when allowed):
    a denied hit consumes nothing, so waiting that long is enough unless others get there
    first.

    Attributes:
        policy: the policy's name.
        allowed: whether the hit was admitted (and, for ``hit``, consumed by every rule).
        remaining: see above.
        limit: see above.
        reset_after: see above.
        retry_after: see above.
        denied_by: the non-shadow rules that said no, in policy order.
        rules: one :class:`RuleState` per rule of the policy, in policy order (built when
            first read: most callers only look at ``allowed``).
    """

    policy: str
    allowed: bool
    remaining: int
    limit: int
    reset_after: float
    retry_after: float
    denied_by: tuple[Rule, ...]
    # (rule, remaining, reset_after µs, retry_after µs) per rule, in policy order
    raw: tuple[tuple[Rule, int, int, int], ...] = field(repr=False)

    @property
    def rules(self) -> tuple[RuleState, ...]:
        return tuple(
            RuleState(rule, retry == 0, rule.capacity, remaining, reset / _US, retry / _US)
            for rule, remaining, reset, retry in self.raw
        )

    def headers(self, profile: str = "ietf") -> dict[str, str]:
        """Rate-limit response headers: ``"ietf"``, ``"draft6"``, ``"x-ratelimit"``, ``"none"``
        (see :mod:`freqguard.headers`)."""
        from freqguard.headers import rate_limit_headers

        return rate_limit_headers(self, profile)

    def __bool__(self) -> bool:
        return self.allowed


_new = object.__new__
_SETTERS = tuple(Decision.__dict__[name].__set__ for name in Decision.__slots__)


def make_decision(
    policy: str,
    allowed: bool,
    remaining: int,
    limit: int,
    reset_after: float,
    retry_after: float,
    denied_by: tuple[Rule, ...],
    raw: tuple[tuple[Rule, int, int, int], ...],
) -> Decision:
    """Build a Decision without the frozen ``__init__``, which costs more than the rest of
    decoding a reply; the instance is as frozen as any other."""
    decision: Decision = _new(Decision)
    values = (policy, allowed, remaining, limit, reset_after, retry_after, denied_by, raw)
    for setter, value in zip(_SETTERS, values, strict=True):
        setter(decision, value)
    return decision
