"""Priorities (``Policy(..., priorities=("transactional", "marketing"))``): the variant of a
policy's parts a hit of one priority is decided with. No I/O.

Every hit counts toward every rule it falls under, whatever its priority. Two things change
with the priority, in the rules' numbers only, never in what a state holds:

* a rule's ``caps`` (``{"marketing": 40}`` on a rule of 50): a capped priority must leave
  ``50 - 40`` of the capacity unused, its *reserve*, which the twins add to the hit's need
  when they check that rule (``RuleParams.reserve``): marketing is admitted while fewer
  than 40 are counted, transactional up to 50. The same holds for every strategy (a bucket
  keeps 10 tokens back from marketing);
* a rule's ``only`` (``("marketing",)``): for another priority the rule does not apply: it
  is made a shadow rule whose check never admits (``reserve = SKIP``), so it neither denies
  the hit nor counts it (a rule with ``only`` keeps its own state: see script.keys).

A variant is made once per priority and set of parts, and kept.
"""

from __future__ import annotations

from collections.abc import Mapping

from freqguard.errors import ContextError
from freqguard.options import PRIORITY
from freqguard.policy import Policy
from freqguard.rules import Rule
from freqguard.script.calls import Part, spec_text
from freqguard.script.strategies.base import SKIP, StateSpec

__all__ = ["Priorities"]


class Priorities:
    """The variants of a policy's parts, one per priority, made when first met."""

    __slots__ = ("_made", "_policy", "_reserves")

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        # per priority, per rule (policy order): its reserve (0: as it is)
        self._reserves: dict[str, tuple[int, ...]] = {
            priority: tuple(_reserve(rule, priority) for rule in policy.rules)
            for priority in policy.priorities
        }
        self._made: dict[tuple[int, str], tuple[tuple[Part, ...], tuple[Part, ...]]] = {}

    def priority(self, texts: Mapping[str, str]) -> str:
        """The hit's priority.

        Raises:
            ConfigError: none given, or one the policy does not have.
        """
        priority = texts.get(PRIORITY)
        if priority in self._reserves:
            return priority
        listed = ", ".join(self._policy.priorities)
        got = "none" if priority is None else repr(priority)
        raise ContextError(
            f"policy {self._policy.name!r} decides by priority: give priority=... (one of "
            f"{listed}), got {got}",
            argument=f"context.{PRIORITY}",
        )

    def parts(self, parts: tuple[Part, ...], texts: Mapping[str, str]) -> tuple[Part, ...]:
        """``parts`` as a hit of the priority ``texts`` names is decided with."""
        priority = self.priority(texts)
        key = (id(parts), priority)
        entry = self._made.get(key)
        if entry is not None and entry[0] is parts:
            return entry[1]
        reserves = self._reserves[priority]
        made = tuple(_variant(part, reserves) for part in parts)
        if len(self._made) >= 1024:
            self._made.clear()
        self._made[key] = (parts, made)
        return made


def _reserve(rule: Rule, priority: str) -> int:
    """What a hit of ``priority`` must leave unused of ``rule`` (SKIP: it does not apply)."""
    if rule.only is not None and priority not in rule.only:
        return SKIP
    cap = dict(rule.caps).get(priority)
    return 0 if cap is None else rule.capacity - cap


def _variant(part: Part, reserves: tuple[int, ...]) -> Part:
    """``part`` with its rules' reserves for one priority; ``part`` itself when none has."""
    ours = [reserves[index] for index in part.rule_index]
    if not any(ours):
        return part
    specs: list[StateSpec] = []
    at = 0
    for spec in part.specs:
        rules = tuple(
            rule._replace(reserve=reserve, shadow=rule.shadow or reserve == SKIP)
            for rule, reserve in zip(spec.rules, ours[at : at + len(spec.rules)], strict=True)
        )
        at += len(spec.rules)
        shadow = spec.shadow or (len(rules) == 1 and rules[0].shadow)
        specs.append(spec._replace(rules=rules, shadow=shadow))
    return part._replace(specs=tuple(specs), spec_text=spec_text(specs))
