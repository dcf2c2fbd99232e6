"""Policies: named sets of rules decided together and atomically."""

from __future__ import annotations

from freqguard.errors import ConfigError
from freqguard.rules import Rule, check_name

__all__ = ["Policy"]


class Policy:
    """A named set of rules decided together: a hit is allowed only if every non-shadow rule
    allows it, and then every rule consumes; if any denies, nothing is consumed.

    Args:
        name: the policy's name; part of every storage key.
        *rules: one or more :class:`Rule`.

    Raises:
        ConfigError: for a bad name, no rules, a non-Rule, or two rules with the same id.
    """

    __slots__ = ("name", "rules")

    def __init__(self, name: str, *rules: Rule) -> None:
        self.name = check_name("policy name", name)
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
        self.rules: tuple[Rule, ...] = tuple(rules)

    @property
    def dimensions(self) -> tuple[str, ...]:
        """Every dimension a hit must name, in first-use order."""
        return tuple(dict.fromkeys(d for rule in self.rules for d in rule.by))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Policy):
            return NotImplemented
        return (self.name, self.rules) == (other.name, other.rules)

    def __hash__(self) -> int:
        return hash((self.name, self.rules))

    def __repr__(self) -> str:
        inner = ", ".join(repr(rule) for rule in self.rules)
        return f"Policy({self.name!r}, {inner})"
