"""What a policy takes, checked before the guard is called, so that a problem names the
field it is about: a context name the policy does not take (``context.plan``), a dimension
missing (``contexts[2].content``), a cost its rules could never grant (``cost``), a rate a
rule cannot take (``rate``), a ttl out of bounds (``ttl``).

The guard raises one :class:`~freqguard.ConfigError` for all of these, without saying
which argument it is about. So each is checked here first, in the order the guard checks,
by the engine's own I/O-free functions on a plan of the policy made for the purpose:
whatever they refuse is named by the stage that refused it, and the checks cannot drift
from the guard's. Nothing here touches the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from freqguard.engine.limits import limit_call, limits_calls
from freqguard.engine.plan import PolicyPlan
from freqguard.engine.resets import reset_calls
from freqguard.errors import ConfigError
from freqguard.policy import Policy
from freqguard.service.bodies import member
from freqguard.service.problems import invalid

__all__ = ["Checks"]


def _listed(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(names) or "none"


class Checks:
    """The checks of one policy's requests (a plan of it, made once)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.plan = PolicyPlan(policy, "checks")  # never sent: the prefix is moot
        # the policy's names, said once (Policy derives them from its rules at each ask)
        self.dimensions = tuple(policy.dimensions)
        self._limit_names = frozenset(self.dimensions)
        self._hit_names = frozenset((*self.dimensions, *policy.reads))

    def _takes(self, limits: bool) -> str:
        taken = f"policy {self.policy.name!r} takes: {_listed(self.policy.dimensions)}"
        if self.policy.reads and not limits:
            taken += f"; and may read: {_listed(self.policy.reads)}"
        return taken

    def names(self, context: Mapping[str, Any], path: str, *, limits: bool = False) -> None:
        """Refuse a name the policy does not take (a limit's context: a dimension; a hit's:
        a dimension or what its rules read), and, for a hit, a dimension missing."""
        accepted = self._limit_names if limits else self._hit_names
        for name in context:  # a dimension never takes a guard parameter's name (Rule)
            if name not in accepted:
                raise invalid(member(path, name), f"not a name {self._takes(limits)}")
        if not limits:
            for name in self.dimensions:
                if name not in context:
                    raise invalid(member(path, name), f"missing: {self._takes(limits)}")

    def hit(self, context: Mapping[str, Any], path: str, *, bare: bool = False) -> None:
        """A hit's (peek's, refund's, reset's) context, all the guard checks without the
        store: its names, its values, the zone and priority its rules read, its tier's
        rate. ``bare``: a reset's (a zone not given is taken as UTC)."""
        self.names(context, path)
        try:
            self.plan.parts_for(self.plan.texts(context), None, bare=bare)
        except ConfigError as exc:
            raise invalid(path, str(exc)) from None

    def reset(self, context: Mapping[str, Any], rules: list[str] | None) -> None:
        """A reset's context (any of the policy's dimensions, and what its rules read) and
        rules: what ``reset`` would forget, or what it refuses, named."""
        accepted = {*self.policy.dimensions, *self.policy.reads}
        for name in context:
            if name not in accepted:
                raise invalid(member("context", name), f"not a name {self._takes(False)}")
        known = {rule.id for rule in self.policy.rules}
        for index, rule in enumerate(rules or ()):
            if rule not in known:
                raise invalid(
                    f"rules[{index}]",
                    f"policy {self.policy.name!r} has no rule {rule!r} (its rules: "
                    f"{_listed(sorted(known))})",
                )
        try:
            reset_calls(self.plan, rules, context, None)
        except ConfigError as exc:
            raise invalid("context" if rules is None else "rules", str(exc)) from None

    def cost(self, cost: int, *, upper: bool) -> None:
        """A cost the policy's rules could ever grant (``upper``: for a hit; a refund's and
        a peek's need not)."""
        try:
            self.plan.check_cost(cost, upper=upper)
        except ConfigError as exc:
            raise invalid("cost", str(exc)) from None

    def lookup(self, context: Mapping[str, Any]) -> None:
        """The context of a lookup of limits: partition values."""
        self.names(context, "context", limits=True)
        try:
            limits_calls(self.plan, context, None)
        except ConfigError as exc:
            raise invalid("context", str(exc)) from None

    def limit(
        self, rule: str, context: Mapping[str, Any], *, setting: bool, rate: Any, ttl: Any
    ) -> None:
        """A limit cleared, or set (``setting``): its context is exactly the rule's
        partition; then a rate the rule can take; then a ttl in bounds. Each is refused
        under its own name."""
        self.names(context, "context", limits=True)
        stages = [("context", None, None, True)]
        if setting:
            stages += [("rate", rate, None, False), ("ttl", rate, ttl, False)]
        for name, with_rate, with_ttl, clear in stages:
            try:
                limit_call(self.plan, rule, with_rate, with_ttl, context, None, clear=clear)
            except ConfigError as exc:
                raise invalid(name, str(exc)) from None
