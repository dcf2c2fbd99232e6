"""What the service answers, declared once as msgspec structs: each answer is encoded from
one, and the OpenAPI document's component schemas are theirs (a docstring is its schema's
description); and the answers made from a decision, a policy (:func:`policy_info`: a rate
written as a person writes it, which parses back to the same rate, so what the page shows
can be typed back as a per-key limit) and the metrics. Import the module, not the names:
``Decision`` and ``Problem`` are also :class:`freqguard.Decision` and
:class:`~freqguard.service.problems.Problem`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import msgspec

from freqguard.decision import Decision as Decided
from freqguard.engine.limits import limit_written
from freqguard.options import QuietHours
from freqguard.policy import Policy
from freqguard.rates import written
from freqguard.rules import Rule, Strategy
from freqguard.script.keys import policy_layout

encode = msgspec.json.Encoder().encode
_US = 1_000_000.0  # µs in a second: a raw state's times


class RuleState(msgspec.Struct, frozen=True):
    """One rule's part in a decision: ``shadow`` when it never blocks, a shadow rule's or
    one that binds others but not this context (``exempt``: a per-key limit of none, or a
    priority it does not count; a shadow rule binds none, so is never exempt)."""

    rule: str
    allowed: bool
    remaining: int
    limit: int
    reset_after: float
    retry_after: float
    shadow: bool
    exempt: bool


class Decision(msgspec.Struct, frozen=True):
    """A decision: allowed or not, and each rule's state; times in seconds."""

    allowed: bool
    retry_after: float
    remaining: int
    limit: int
    reset_after: float
    denied_by: list[str]
    rules: list[RuleState]
    source: str


class Decisions(msgspec.Struct, frozen=True):
    """A batch's decisions, in the order of its contexts."""

    decisions: list[Decision]


class Limits(msgspec.Struct, frozen=True):
    """Each rule's rate for one partition value, as written (``100/day``, ``2 per 59
    seconds``, ``5 concurrent``; set back as it is, it sets that rate), or null: exempt."""

    limits: dict[str, str | None]


class ResetDone(msgspec.Struct, frozen=True):
    """A reset: the rules whose counts were forgotten."""

    reset: bool
    rules: list[str]


class Health(msgspec.Struct, frozen=True):
    """The service is up: the policies it serves."""

    status: str
    policies: list[str]


class Ready(msgspec.Struct, frozen=True):
    """The service can decide: its store answered."""

    status: str
    store: str


class RuleInfo(msgspec.Struct, frozen=True):
    """A rule as the operator's page lists it: ``rate`` as the limits calls say it
    (``2/minute``; a weekly calendar rule ``3 per 7 days``), ``written`` as a person
    writes the rule (``2/minute``, ``3/week``, ``10 concurrent``);
    a concurrency rule's ``lease`` (seconds), a bucket's ``burst``, a calendar rule's
    ``zone`` (an IANA name, or ``from <value>``), the priorities it counts (``only``, null:
    all) and its caps per priority; ``partition``: the dimension whose value its per-key
    limits are kept by (null: a global rule's, kept by none)."""

    rule: str
    by: list[str]
    partition: str | None
    rate: str
    strategy: str
    written: str
    lease: float | None
    burst: int | None
    zone: str | None
    only: list[str] | None
    caps: dict[str, int]
    shadow: bool


class QuietInfo(msgspec.Struct, frozen=True):
    """A policy's quiet hours: local ``HH:MM`` start and end, the zone (an IANA name, or
    ``from <value>``) and the priorities that pass through them."""

    start: str
    end: str
    zone: str
    exempt: list[str]


class PolicyInfo(msgspec.Struct, frozen=True):
    """A policy as the operator's page lists it: its rules, the context a lookup asks for,
    and the partition values its per-key limits are kept by."""

    policy: str
    context: list[str]
    partition: list[str]
    rules: list[RuleInfo]
    priorities: list[str]
    quiet: QuietInfo | None


class PolicyList(msgspec.Struct, frozen=True):
    """The policies the service serves."""

    policies: list[PolicyInfo]


class StatRow(msgspec.Struct, frozen=True):
    """Decisions of a policy (``rule`` null), or denials of one of its rules."""

    policy: str
    rule: str | None
    allowed: int | None
    denied: int


class Stats(msgspec.Struct, frozen=True):
    """Decisions and denials since this worker started (from its metrics)."""

    rows: list[StatRow]


class Series(msgspec.Struct, frozen=True):
    """A policy's decisions (``rule`` null) or one rule's part in them: how many were
    allowed and denied in each minute of :class:`History`'s ``minutes``."""

    policy: str
    rule: str | None
    allowed: list[int]
    denied: list[int]


class History(msgspec.Struct, frozen=True):
    """Decisions per minute over the last hour, of every worker and host of the store:
    ``minutes`` the start of each (seconds since the epoch, oldest first, the current
    minute last), and a series per policy and rule."""

    minutes: list[int]
    series: list[Series]


class TopKey(msgspec.Struct, frozen=True):
    """A key (the digest of a context's dimensions; without a token, a digest of that keyed
    by the service's tokens) and its denials."""

    policy: str
    key: str
    denied: int


class TopKeys(msgspec.Struct, frozen=True):
    """The keys denied most over the last ``minutes``, most first, of every worker: each
    the digest of a context (``POST /v1/policies/{policy}/denials`` gives a context's), or,
    when the call carried no valid token (``digested``), a digest of that which no context
    matches without a token."""

    minutes: int
    digested: bool
    keys: list[TopKey]


class Denials(msgspec.Struct, frozen=True):
    """One context's denials over the last ``minutes``, and its ``key`` (its digest), as
    the keys denied most list it."""

    key: str
    denied: int
    minutes: int


class Problem(msgspec.Struct, frozen=True, omit_defaults=True):
    """An answer other than 200 (RFC 9457 problem+json); ``field``, with a 422, names the
    request's field at fault: ``cost``, ``context.recipient``, ``contexts[3].user``,
    ``body``..."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    field: str | None = None


def decision(decided: Decided, shadows: frozenset[str] = frozenset()) -> Decision:
    """A decision as the service answers it (each rule's state read off ``raw`` at once:
    no :class:`freqguard.RuleState` made on the way); ``shadows``: the ids of the policy's
    shadow rules (any other decided as shadow is exempt: by a per-key limit, or a
    priority it does not count)."""
    return Decision(
        allowed=decided.allowed,
        retry_after=decided.retry_after,
        remaining=decided.remaining,
        limit=decided.capacity,
        reset_after=decided.reset_after,
        denied_by=[rule.id for rule in decided.denied_by],
        rules=[  # not the quiet hours' pseudo-rule: no rate (denying, it is in denied_by)
            RuleState(
                rule.id,
                wait == 0,
                remaining,
                rule.capacity,
                reset / _US,
                wait / _US,
                rule.shadow,
                rule.shadow and rule.id not in shadows,
            )
            for rule, remaining, reset, wait in decided.raw
            if rule.quiet is None
        ],
        source=decided.source,
    )


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


def _rule_info(rule: Rule, partition: str | None) -> RuleInfo:
    return RuleInfo(
        rule=rule.id,
        by=list(rule.by),
        partition=partition,
        # as the limits calls say it (5 concurrent for leases): the page compares the two
        rate=limit_written(rule, rule.rate) if rule.quiet is None else "quiet hours",
        strategy="calendar" if rule.calendar else rule.strategy.value,
        written=_written_rule(rule),
        lease=rule.lease,
        burst=rule.burst,
        zone=None if not rule.calendar else rule.tz or f"from {rule.tz_from}",
        only=None if rule.only is None else list(rule.only),
        caps=dict(rule.caps),
        shadow=rule.shadow,
    )


def _quiet_info(quiet: QuietHours) -> QuietInfo:
    return QuietInfo(
        start=quiet.text(quiet.start),
        end=quiet.text(quiet.end),
        zone=quiet.tz if quiet.tz is not None else f"from {quiet.tz_from}",
        exempt=list(quiet.exempt),
    )


def policy_info(policy: Policy) -> PolicyInfo:
    """A policy as the page lists it: its rules, the context a lookup asks for, the
    partition values its per-key limits are kept by (each part's, in the policy's order),
    its priorities and quiet hours."""
    keyed = {
        i: part[0].key.partition
        for part in policy_layout(policy, "fg")
        for s in part
        for i in s.rules
    }
    partitions = {keyed.get(index) for index in range(len(policy.rules))}
    quiet = policy.quiet
    return PolicyInfo(
        policy=policy.name,
        context=[*policy.dimensions, *policy.reads],
        partition=[d for d in policy.dimensions if d in partitions],
        rules=[_rule_info(rule, keyed.get(i)) for i, rule in enumerate(policy.rules)],
        priorities=list(policy.priorities),
        quiet=None if quiet is None else _quiet_info(quiet),
    )


def stat_rows(registry: Any) -> list[StatRow]:
    """Per policy: allowed and denied decisions; per rule: its denials (from the metrics)."""
    if registry is None:
        return []
    totals: dict[str, dict[str, float]] = defaultdict(lambda: {"allowed": 0.0, "denied": 0.0})
    rules: dict[tuple[str, str], float] = {}
    for family in registry.collect():
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "freqguard_decisions_total":
                outcome = "allowed" if labels.get("outcome") == "allowed" else "denied"
                totals[labels["policy"]][outcome] += sample.value
            elif sample.name == "freqguard_denials_total":
                rules[labels["policy"], labels["rule"]] = sample.value
    rows: list[StatRow] = []
    for name, entry in sorted(totals.items()):
        rows.append(StatRow(name, None, int(entry["allowed"]), int(entry["denied"])))
        rows += [
            StatRow(name, rule, None, int(count))
            for (policy, rule), count in sorted(rules.items())
            if policy == name
        ]
    return rows
