"""Resets, I/O-free: which states a reset of a context touches, and the script calls that
forget them (``Guard.reset``).

A state belongs to the context of exactly the dimensions it is keyed by: the recipient's
minute and day to the recipient, the recipient+content logs to that pair, a global rule's
state to no one in particular. So a reset of a context forgets the states keyed by exactly
the dimensions it names, and nothing shared with other contexts: resetting one (user, ip)
does not free the ip for all its users, and resetting one recipient leaves a global rule's
count alone. A reset that names its rules (``rules=``) forgets those rules' states for the
values given, which must be exactly each rule's dimensions (a shared state is then reset on
purpose, by name).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from freqguard.engine.plan import PolicyPlan
from freqguard.errors import ConfigError, shown
from freqguard.rules import Rule
from freqguard.script.calls import Part, ScriptCall
from freqguard.script.contract import RESET
from freqguard.script.keys import value_text

__all__ = ["NAME_THE_RULES", "reset_calls"]

#: What a reset that finds no rule keyed by its dimensions says to do (the command line
#: says it with its own flag).
NAME_THE_RULES = "name the rules to reset (rules=[...])"


def reset_calls(
    plan: PolicyPlan, rules: Iterable[str | Rule] | None, ctx: Mapping[str, object], now: int | None
) -> tuple[list[ScriptCall], tuple[str, ...], dict[str, str]]:
    """The calls that reset the states of ``rules`` (default: those keyed by exactly the
    dimensions ``ctx`` names) for the values ``ctx`` gives; the ids of the rules reset;
    the context as text.

    Raises:
        ConfigError: a name that is no dimension (or value the policy reads), a bad value,
            no rule keyed by exactly the dimensions given, a rule named that is not the
            policy's, keeps no state (quiet hours), is keyed by other dimensions than those
            given, or shares its state with a rule not named.
    """
    policy = plan.policy
    texts = _texts(plan, ctx)
    given = frozenset(texts) & frozenset(plan.dimensions)
    chosen = _chosen(plan, rules, given)
    calls: list[ScriptCall] = []
    for part in plan.parts_for(texts, now, bare=True):
        picked = _states(plan, part, chosen)
        if picked:
            calls.append(ScriptCall(_narrowed(part, picked), texts, now, 0, RESET))
    ids = tuple(policy.rules[i].id for i in sorted(chosen))
    return calls, ids, {d: texts[d] for d in given}


def _texts(plan: PolicyPlan, ctx: Mapping[str, object]) -> dict[str, str]:
    """The context as text: any of the policy's dimensions, and the values it reads (a
    calendar rule's zone), which select no state."""
    accepts = (*plan.dimensions, *plan.reads)
    unknown = sorted(name for name in ctx if name not in accepts)
    if unknown:
        raise ConfigError(
            f"policy {plan.name!r}: a reset takes the values of its dimensions "
            f"({', '.join(plan.dimensions) or 'none'}), got unknown {', '.join(unknown)}",
            argument=f"context.{unknown[0]}",
        )
    return {name: value_text(plan.name, name, value) for name, value in ctx.items()}


def _chosen(
    plan: PolicyPlan, rules: Iterable[str | Rule] | None, given: frozenset[str]
) -> frozenset[int]:
    """The indices of the rules a reset forgets."""
    policy = plan.policy
    if rules is None:
        found = frozenset(
            i for i, rule in enumerate(policy.rules) if rule.quiet is None and set(rule.by) == given
        )
        if not found:
            keyed = sorted({"(" + ", ".join(r.by) + ")" for r in policy.rules if r.quiet is None})
            raise ConfigError(
                f"policy {plan.name!r}: no rule is keyed by exactly "
                f"({', '.join(sorted(given))}), and a reset forgets only the states of the "
                f"dimensions it is given; its rules are keyed by {', '.join(keyed)}: give "
                f"those values, or {NAME_THE_RULES}",
                argument="context",
            )
        return found
    if isinstance(rules, (str, Rule)):
        rules = [rules]
    elif not isinstance(rules, Iterable):
        raise ConfigError(
            f"rules takes a list of rules (their names or Rules), got {shown(rules)}",
            argument="rules",
        )
    ids = {rule.id: i for i, rule in enumerate(policy.rules)}
    found_named: set[int] = set()
    for at, named in enumerate(rules):
        name = named.id if isinstance(named, Rule) else named
        index = ids.get(name) if isinstance(name, str) else None
        if index is not None and isinstance(named, Rule) and named != policy.rules[index]:
            index = None  # another rule of the same id: not the policy's
        if index is None:
            known = ", ".join(repr(r.id) for r in policy.rules)
            raise ConfigError(
                f"policy {plan.name!r} has no rule {shown(named)} (its rules: {known})",
                argument=f"rules[{at}]",
            )
        rule = policy.rules[index]
        if rule.quiet is not None:
            raise ConfigError(
                f"policy {plan.name!r}: quiet hours keep no state to reset", argument="rules"
            )
        if set(rule.by) != given:
            raise ConfigError(
                f"rule {rule.id!r} of policy {plan.name!r} is keyed by "
                f"({', '.join(rule.by)}): a reset of it takes exactly those values, "
                f"got ({', '.join(sorted(given))})",
                argument="rules",
            )
        found_named.add(index)
    if not found_named:
        raise ConfigError(
            f"policy {plan.name!r}: rules=[] names no rule to reset", argument="rules"
        )
    return frozenset(found_named)


def _states(plan: PolicyPlan, part: Part, chosen: frozenset[int]) -> list[int]:
    """The positions of ``part``'s states whose rules are all chosen.

    Raises:
        ConfigError: a state some of whose rules are chosen and others not (a sliding log
            several rules share).
    """
    picked, at = [], 0
    for position, spec in enumerate(part.specs):
        members = part.rule_index[at : at + len(spec.rules)]
        at += len(spec.rules)
        inside = [i in chosen for i in members]
        if all(inside):
            picked.append(position)
        elif any(inside):
            rules = plan.policy.rules
            names = ", ".join(repr(rules[i].id) for i in members)
            raise ConfigError(
                f"policy {plan.name!r}: rules {names} count in one sliding log: a reset "
                "forgets it for all of them; name them all",
                argument="rules",
            )
    return picked


def _narrowed(part: Part, picked: Sequence[int]) -> Part:
    """``part`` with only the states at ``picked``."""
    spans, at = [], 0
    for spec in part.specs:
        spans.append((at, at + len(spec.rules)))
        at += len(spec.rules)
    rule_index = [i for p in picked for i in part.rule_index[spans[p][0] : spans[p][1]]]
    labels = [x for p in picked for x in part.labels[spans[p][0] : spans[p][1]]]
    return Part.build(
        [part.specs[p] for p in picked], [part.layouts[p] for p in picked], rule_index, labels
    )
