"""The policies as ``GET /v1/policies`` lists them for the operator's page, and the
decisions since the worker started (``GET /v1/stats``). A rate is written as a person
writes it and parses back to the same rate (a calendar rule's ``/week`` too: 7 days), so
what the page shows can be typed back as a per-key limit."""

from __future__ import annotations

from typing import Any

import freqguard.service.schema as schema
from freqguard.options import QuietHours
from freqguard.policy import Policy
from freqguard.rates import written
from freqguard.rules import Rule, Strategy

__all__ = ["policy_info", "stat_rows"]


def _written_rule(rule: Rule) -> str:
    """A rule's rate as written: ``10 concurrent`` (its lease apart), ``50/month`` for a
    calendar rule (its period, from midnight of its zone), else :func:`written`."""
    if rule.quiet is not None:
        return "quiet hours"
    if rule.strategy is Strategy.CONCURRENCY:
        return f"{rule.rate.limit} concurrent"
    if rule.period is not None:
        return f"{rule.rate.limit}/{rule.period}"
    return written(rule.rate)


def _rule_info(rule: Rule) -> schema.RuleInfo:
    zone = None
    if rule.calendar:
        zone = rule.tz if rule.tz is not None else f"from {rule.tz_from}"
    return schema.RuleInfo(
        rule=rule.id,
        by=list(rule.by),
        rate=written(rule.rate) if rule.quiet is None else "quiet hours",
        strategy="calendar" if rule.calendar else rule.strategy.value,
        written=_written_rule(rule),
        lease=rule.lease,
        burst=rule.burst,
        zone=zone,
        only=None if rule.only is None else list(rule.only),
        caps=dict(rule.caps),
        shadow=rule.shadow,
    )


def _quiet_info(quiet: QuietHours) -> schema.QuietInfo:
    return schema.QuietInfo(
        start=quiet.text(quiet.start),
        end=quiet.text(quiet.end),
        zone=quiet.tz if quiet.tz is not None else f"from {quiet.tz_from}",
        exempt=list(quiet.exempt),
    )


def policy_info(policy: Policy) -> schema.PolicyInfo:
    """A policy as the page lists it: its rules, the context a lookup asks for, the
    partition values its per-key limits are kept by, its priorities and quiet hours."""
    parts = {r.by[0] for r in policy.rules if r.by and all(r.by[0] in x.by for x in policy.rules)}
    quiet = policy.quiet
    return schema.PolicyInfo(
        policy=policy.name,
        context=[*policy.dimensions, *policy.reads],
        partition=sorted(parts) or list(policy.dimensions[:1]),
        rules=[_rule_info(rule) for rule in policy.rules],
        priorities=list(policy.priorities),
        quiet=None if quiet is None else _quiet_info(quiet),
    )


def stat_rows(registry: Any) -> list[schema.StatRow]:
    """Per policy: allowed and denied decisions; per rule: its denials (from the metrics)."""
    if registry is None:
        return []
    totals: dict[str, dict[str, float]] = {}
    rules: dict[tuple[str, str], float] = {}
    for family in registry.collect():
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "freqguard_decisions_total":
                entry = totals.setdefault(labels["policy"], {"allowed": 0.0, "denied": 0.0})
                outcome = "allowed" if labels.get("outcome") == "allowed" else "denied"
                entry[outcome] += sample.value
            elif sample.name == "freqguard_denials_total":
                rules[labels["policy"], labels["rule"]] = sample.value
    rows: list[schema.StatRow] = []
    for name, entry in sorted(totals.items()):
        rows.append(schema.StatRow(name, None, int(entry["allowed"]), int(entry["denied"])))
        rows += [
            schema.StatRow(name, rule, None, int(count))
            for (policy, rule), count in sorted(rules.items())
            if policy == name
        ]
    return rows
