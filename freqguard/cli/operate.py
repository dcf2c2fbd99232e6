"""The commands that read or change one context's state in the store: ``inspect``,
``reset`` and ``limit show|set|clear``. Each checks its words first (the policy, the
context's names, a shared store), so a refused command sends nothing."""

from __future__ import annotations

import argparse
from typing import Any

from freqguard.cli.output import EXIT_OK, out
from freqguard.cli.words import context, policy_named, shared_store
from freqguard.engine.limits import limit_written
from freqguard.engine.resets import NAME_THE_RULES
from freqguard.errors import ConfigError

__all__ = ["inspect", "limit_clear", "limit_set", "limit_show", "reset"]


def _open(args: argparse.Namespace) -> tuple[Any, str, dict[str, str]]:
    """The configuration's guard, the policy's name and the context, all checked."""
    from freqguard.config import load

    config = load(args.config)
    what = " ".join(w for w in ("freqguard", args.command, getattr(args, "action", None)) if w)
    shared_store(config.backend, what)
    policy = policy_named(config, args.policy)
    found = context(args.context, policy)
    return config.guard(), policy.name, found


#: What a dimension the context leaves out is read as (its rules are not shown): any
#: value would do, as a peek writes nothing.
_UNSET = "freqguard-inspect-unset"


def inspect(args: argparse.Namespace) -> int:
    guard, policy, found = _open(args)
    try:
        dimensions = guard.policies[policy].dimensions
        needs = [d for d in dimensions if d not in found]
        rules_needing = {
            rule.id: [d for d in rule.by if d in needs] for rule in guard.policies[policy].rules
        }
        if needs and all(rules_needing.values()):  # none to show: the guard names them
            needs = []
        decision = guard.peek(policy, **found, **dict.fromkeys(needs, _UNSET))
        # the per-key limits of the context's partition values (None: exempt, decided as
        # a shadow rule); not of the values the rules read (a plan, a priority)
        rates = guard.limits_for(policy, **{d: v for d, v in found.items() if d in dimensions})
    finally:
        guard.close()
    rules = []
    for state in decision.rules:
        missing = rules_needing[state.rule.id] if needs else []
        blank = missing or state.rule.quiet is not None  # quiet hours: no rate, no numbers
        rule = state.rule.id
        rules.append(
            {
                "rule": rule,
                "capacity": None if blank else state.capacity,
                "remaining": None if blank else state.remaining,
                "used": None if blank else state.capacity - state.remaining,
                "reset_after": None if missing else state.reset_after,
                "retry_after": None if missing else state.retry_after,
                "shadow": state.rule.shadow and rates.get(rule, 0) is not None,
                # a rule whose partition value is missing has no per-key limit read:
                # exempt or not is not known (review: it said false)
                "exempt": None if missing and rule not in rates else rates.get(rule, 0) is None,
                "needs": missing,
            }
        )
    allowed = None if needs else decision.allowed  # the rules not shown decide too
    data = {"policy": policy, "allowed": allowed, "needs": needs, "rules": rules}

    def table() -> list[list[str]]:
        head = [["rule", "used", "remaining", "of", "frees in", "next hit"]]
        return head + [[_name(r), *_numbers(r)] for r in rules]

    out(args, data, table)
    return EXIT_OK


def _name(row: dict[str, Any]) -> str:
    if row["needs"]:
        return f"{row['rule']} (needs {', '.join(row['needs'])})"
    return str(row["rule"]) + (
        " (exempt)" if row["exempt"] else " (shadow)" if row["shadow"] else ""
    )


def _numbers(row: dict[str, Any]) -> list[str]:
    if row["needs"]:
        return ["-"] * 5
    blank = row["capacity"] is None
    return [
        *("-" if blank else str(row[k]) for k in ("used", "remaining", "capacity")),
        _seconds(row["reset_after"]),
        "allowed" if not row["retry_after"] else f"in {_seconds(row['retry_after'])}",
    ]


def reset(args: argparse.Namespace) -> int:
    guard, policy, found = _open(args)
    try:
        done = guard.reset(policy, rules=args.rule or None, **found)
    except ConfigError as error:  # the rules are named with --rule here
        flag = "name the rules to reset (--rule RULE, again for more)"
        raise ConfigError(str(error).replace(NAME_THE_RULES, flag)) from None
    finally:
        guard.close()
    data = {"policy": policy, "reset": True, "rules": list(done)}
    out(args, data, lambda: [["rule reset"], *[[rule] for rule in done]])
    return EXIT_OK


def limit_show(args: argparse.Namespace) -> int:
    guard, policy, found = _open(args)
    try:
        limits = guard.limits_for(policy, **found)
    finally:
        guard.close()
    rules = {rule.id: rule for rule in guard.policies[policy].rules}
    data = {
        r: None if rate is None else limit_written(rules[r], rate) for r, rate in limits.items()
    }

    def table() -> list[list[str]]:
        return [["rule", "rate"]] + [[rule, rate or "exempt"] for rule, rate in data.items()]

    out(args, {"policy": policy, "limits": data}, table)
    return EXIT_OK


def limit_set(args: argparse.Namespace) -> int:
    rate = None if args.rate.lower() in ("none", "exempt") else args.rate  # as show prints it
    guard, policy, found = _open(args)
    try:
        guard.set_limit(policy, args.rule, rate, ttl=args.ttl, **found)
    finally:
        guard.close()
    done = {"policy": policy, "rule": args.rule, "rate": rate, "ttl": args.ttl}
    out(args, done, lambda: [["rule", "rate"], [args.rule, rate or "exempt"]])
    return EXIT_OK


def limit_clear(args: argparse.Namespace) -> int:
    guard, policy, found = _open(args)
    try:
        guard.clear_limit(policy, args.rule, **found)
    finally:
        guard.close()
    done = {"policy": policy, "rule": args.rule, "cleared": True}
    out(args, done, lambda: [["rule", "cleared"], [args.rule, "yes"]])
    return EXIT_OK


def _seconds(value: float) -> str:
    if value == 0:
        return "-"
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 60:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s" if value >= 1 else f"{value:.3g} s"  # 58.0 beside 58.3, not 58
