"""Policies: named sets of rules decided together and atomically."""

from __future__ import annotations

from typing import Any, Literal

from freqguard.bounds import MAX_POLICY_LOG_ENTRIES, MAX_RULES
from freqguard.errors import ConfigError
from freqguard.rules import Rule, Strategy, check_name

__all__ = ["OnError", "Policy"]

#: ``"raise"``, ``"allow"``, ``"deny"``, or a backend to fall back on (see freqguard.failure)
OnError = Literal["raise", "allow", "deny"] | Any


class Policy:
    """A named set of rules decided together: a hit is allowed only if every non-shadow rule
    allows it, and then every rule consumes; if any denies, nothing is consumed.

    Args:
        name: the policy's name; part of every storage key.
        *rules: one or more :class:`Rule`.
        on_error: what a store failure answers for this policy, overriding the guard's:
            ``"raise"``, ``"allow"``, ``"deny"`` or a backend to fall back on; None (the
            default) takes the guard's.

    Raises:
        ConfigError: for a bad name, no rules, a non-Rule, two rules with the same id, a
            bad ``on_error``, or a policy past its bounds: more than 32 rules, or sliding
            logs that could hold more than 20,000 entries in all (see
            :mod:`freqguard.bounds`).
    """

    __slots__ = ("name", "on_error", "rules")

    def __init__(self, name: str, *rules: Rule, on_error: OnError | None = None) -> None:
        self.name = check_name("policy name", name)
        if on_error is not None:
            from freqguard.failure import check_on_error

            check_on_error(on_error, f"policy {name!r}")
        self.on_error = on_error
        if not rules:
            raise ConfigError(f"policy {name!r} needs at least one rule")
        seen: dict[str, Rule] = {}
        for rule in rules:
            if not isinstance(rule, Rule):
                raise ConfigError(f"policy {name!r}: expected Rule objects, got {rule!r}")
            if rule.id in seen:
                raise ConfigError(
                    f"policy {name!r} has two rules with the id {rule.id!r}; "
                    "give them distinct names"
                )
            seen[rule.id] = rule
        _check_size(name, rules)
        self.rules: tuple[Rule, ...] = tuple(rules)

    @property
    def dimensions(self) -> tuple[str, ...]:
        """Every dimension a hit must name, in first-use order."""
        return tuple(dict.fromkeys(d for rule in self.rules for d in rule.by))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Policy):
            return NotImplemented
        return (self.name, self.rules, self.on_error) == (other.name, other.rules, other.on_error)

    def __hash__(self) -> int:
        return hash((self.name, self.rules))

    def __repr__(self) -> str:
        inner = ", ".join(repr(rule) for rule in self.rules)
        extra = "" if self.on_error is None else f", on_error={self.on_error!r}"
        return f"Policy({self.name!r}, {inner}{extra})"


def _check_size(name: str, rules: tuple[Rule, ...]) -> None:
    """Refuse a policy whose hits could cost unbounded work: too many rules, or logs that
    could hold too many entries in all (each rule is within its own bounds already)."""
    if len(rules) > MAX_RULES:
        raise ConfigError(
            f"policy {name!r} has {len(rules)} rules; a policy takes at most {MAX_RULES} "
            "(every hit checks every rule): split it into several policies"
        )
    shared: dict[frozenset[str], int] = {}  # non-shadow logs of one dimension set: one log
    alone = 0
    for rule in rules:
        if rule.strategy is Strategy.SLIDING_LOG:
            if rule.shadow:
                alone += rule.capacity
            else:
                dims = frozenset(rule.by)
                shared[dims] = max(shared.get(dims, 0), rule.capacity)
    entries = alone + sum(shared.values())
    if entries > MAX_POLICY_LOG_ENTRIES:
        raise ConfigError(
            f"policy {name!r}: its sliding logs could hold {entries} entries at once; a "
            f"policy's logs hold at most {MAX_POLICY_LOG_ENTRIES} in all (one per admitted "
            "unit, each trimmed by every hit): use gcra or fixed-window for the large rules"
        )
