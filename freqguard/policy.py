"""Policies: named sets of rules decided together and atomically."""

from __future__ import annotations

from typing import Any, Literal

from freqguard.errors import ConfigError
from freqguard.rules import Rule, check_name

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
        ConfigError: for a bad name, no rules, a non-Rule, two rules with the same id, or a
            bad ``on_error``.
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
