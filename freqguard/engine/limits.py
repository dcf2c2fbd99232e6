"""Per-key limits, I/O-free: the script calls that set, clear and read them, and what their
replies say (``Guard.set_limit``, ``clear_limit``, ``limits_for``; see
:mod:`freqguard.script.limits` for where they are stored and how they decide).

A limit belongs to one rule and one value of the partition of the rule's part (the
recipient, the tenant): every key of that rule under that value is decided at its rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta

from freqguard.bounds import MAX_SPAN_US
from freqguard.engine.plan import PolicyPlan, limit_rate
from freqguard.engine.tiers import rule_params
from freqguard.errors import ConfigError, shown
from freqguard.options import TierRates
from freqguard.policy import derived
from freqguard.rates import Rate, parse_rate, written
from freqguard.rules import Rule, concurrent_rate
from freqguard.script.calls import Part, Reply, ScriptCall
from freqguard.script.contract import LIMIT
from freqguard.script.keys import value_text
from freqguard.script.limits import KeyLimit, change_text
from freqguard.strategy import Strategy

__all__ = ["limit_call", "limit_written", "limits_calls", "limits_of"]

_US = 1_000_000


def limit_written(rule: Rule, rate: Rate) -> str:
    """``rate`` (``limits_for``'s, of ``rule``) as ``set_limit`` takes it for that rule:
    ``N concurrent`` for a concurrency rule (its lease apart), else :func:`written`. What
    ``freqguard limit show`` and the service print can be set back as it is."""
    if rule.strategy is Strategy.CONCURRENCY:
        return f"{rate.limit} concurrent"
    return written(rate)


def limit_call(
    plan: PolicyPlan,
    rule: object,
    rate: object,
    ttl: object,
    ctx: Mapping[str, object],
    now: int | None,
    *,
    clear: bool = False,
) -> ScriptCall:
    """The call that sets (or with ``clear`` clears) one rule's limit for one partition
    value.

    Raises:
        ConfigError: an unknown rule, a context that is not exactly the rule's partition,
            a bad rate (or one the rule's strategy or the policy's bounds cannot hold), a
            bad ttl.
    """
    index = _rule_index(plan, rule)
    number, part = next((n, p) for n, p in enumerate(plan.parts) if index in p.rule_index)
    texts = _partition_texts(plan, part, ctx, exact=plan.policy.rules[index].id)
    part = plan.parts_for(texts, now, bare=True)[number]
    tag, keep = plan.tags[index], plan.tags
    if clear:
        return ScriptCall(part, texts, now, 0, LIMIT, change=change_text(None, tag, keep=keep))
    limit = _limit(plan, index, rate)._replace(tag=tag)
    change = change_text(limit, tag, _ttl_us(ttl), keep, _keying(part, index))
    return ScriptCall(part, texts, now, 1, LIMIT, change=change)


def limits_calls(plan: PolicyPlan, ctx: Mapping[str, object], now: int | None) -> list[ScriptCall]:
    """The calls that read the limits of every part for a context (its partition values;
    the rest of a hit's context, the policy's other dimensions and the values its rules
    read, may be given too, and is not read).

    Raises:
        ConfigError: a partition value missing, or a name the policy neither keys nor reads.
    """
    unknown = sorted(str(name)[:64] for name in set(ctx) - {*plan.dimensions, *plan.reads})
    if unknown:
        partitions = sorted({p for p in map(_partition, plan.parts) if p is not None})
        raise ConfigError(
            f"policy {plan.name!r}: {', '.join(unknown)} is no dimension of it; a per-key "
            f"limit is kept per value of its partition ({', '.join(partitions) or 'none'})",
            argument=f"context.{unknown[0]}",
        )
    ctx = {name: value for name, value in ctx.items() if name in plan.dimensions}
    calls = []
    parts = [part for part in plan.parts if _partition(part) in (None, *ctx)]
    for number, part in enumerate(plan.parts):
        if parts and part not in parts:  # its partition not given: not read (a global
            continue  # rule's limit is read without a recipient's), unless none is
        texts = _partition_texts(plan, part, ctx)
        calls.append(
            ScriptCall(
                plan.parts_for(texts, now, bare=True)[number], texts, now, 0, LIMIT, change=""
            )
        )
    return calls


def limits_of(
    plan: PolicyPlan, replies: list[Reply], ctx: Mapping[str, object] | None = None
) -> dict[str, Rate | None]:
    """Every rule's rate by its id, of the parts the replies of :func:`limits_calls` read
    (all, unless a partition was not given), as it applies now: a live limit's rate, None
    for an exempt rule, else the rule's own, or its tier's where the tier reads a value of
    the rule's own dimensions ``ctx`` gives (a rate for one key, as Envoy writes it); not
    the quiet hours', which have no rate to change."""
    rules = plan.policy.rules
    texts = {name: value_text(plan.name, name, value) for name, value in (ctx or {}).items()}
    read = {index for reply in replies for index in reply.part.rule_index}
    out: dict[str, Rate | None] = {
        rule.id: _own_rate(rule, texts)
        for index, rule in enumerate(rules)
        if rule.quiet is None and index in read
    }
    for reply in replies:
        applied = reply.part.limits  # those the rules' strategies read (script.limits.apply)
        if not applied:
            continue
        for index, limit in zip(reply.part.rule_index, applied, strict=True):
            if limit is not None:
                out[rules[index].id] = None if limit.exempt else limit_rate(limit, rules[index])
    return out


def _own_rate(rule: Rule, texts: Mapping[str, str]) -> Rate:
    """``rule``'s rate for a key: its tier's when its tier reads one of its own dimensions
    (the key's value then picks it, for every hit of that key), else its own."""
    tiers = rule.rate_for
    if isinstance(tiers, TierRates) and tiers.read in rule.by:
        return tiers(texts) or rule.rate
    return rule.rate


def _rule_index(plan: PolicyPlan, rule: object) -> int:
    rules = plan.policy.rules
    names = ", ".join(repr(r.id) for r in rules)
    if not isinstance(rule, (str, Rule)):  # before comparing it: its == may be anything
        raise ConfigError(
            f"rule must be a rule's name or the Rule, got {shown(rule)} "
            f"(policy {plan.name!r} has: {names})",
            argument="rule",
        )
    for index, known in enumerate(rules):
        if rule is known or (isinstance(rule, str) and str.__eq__(rule, known.id)):
            return index
    raise ConfigError(
        f"policy {plan.name!r} has no rule {shown(rule)} (its rules: {names})", argument="rule"
    )


def _keying(part: Part, index: int) -> int:
    """The keying of the policy's rule ``index`` (a rule of ``part``)."""
    params = [rule for spec in part.specs for rule in spec.rules]
    return params[part.rule_index.index(index)].keying


def _partition(part: Part) -> str | None:
    return part.layouts[0].partition


def _partition_texts(
    plan: PolicyPlan, part: Part, ctx: Mapping[str, object], exact: str | None = None
) -> dict[str, str]:
    """The texts of a LIMIT call: the part's partition value, and "" for the dimensions
    its fields also name (their states are read, never written, by such a call)."""
    partition = part.layouts[0].partition
    wanted = () if partition is None else (partition,)
    unknown = sorted(set(ctx) - set(plan.dimensions))
    extra = sorted(set(ctx) - set(wanted)) if exact is not None else unknown
    if unknown or extra or not set(wanted) <= set(ctx):
        shown = ", ".join(wanted) or "none (a global rule)"
        what = f"rule {exact!r} of policy {plan.name!r}" if exact else f"policy {plan.name!r}"
        alone = " alone" if exact is not None else ""
        give = f"give {wanted[0]}=...{alone}" if wanted else "give no context"
        raise ConfigError(
            f"{what}: a per-key limit is kept per value of its partition ({shown}), which "
            f"applies to every key of the rule under it; got "
            f"{', '.join(sorted(ctx)) or 'none'}: {give}",
            argument="context",
        )
    texts = dict.fromkeys(plan.dimensions, "")
    if partition is not None:
        texts[partition] = value_text(plan.name, partition, ctx[partition])
    return texts


def _limit(plan: PolicyPlan, index: int, rate: object) -> KeyLimit:
    """The limit a rate makes of the rule at ``index``, checked as the rule would be (its
    strategy's bounds, the policy's), the burst of a bucket kept if the rule set one."""
    policy, rule = plan.policy, plan.policy.rules[index]
    where = f"rule {rule.id!r} of policy {plan.name!r}"
    if rule.quiet is not None:
        raise ConfigError(
            f"{where}: the quiet hours have no rate a limit could change", argument="rate"
        )
    leases = rule.strategy is Strategy.CONCURRENCY
    if rate is None:
        params = rule_params(rule)
        window = 0 if leases else params.window  # see below
        return KeyLimit(0, 0, True, rule.limit, window, params.capacity, params.interval)
    if isinstance(rate, str):
        try:
            rate = concurrent_rate(rule, rate) or parse_rate(rate)
        except ConfigError as exc:
            raise ConfigError(str(exc), argument="rate") from None
    if not isinstance(rate, Rate):
        raise ConfigError(
            f"{where}: a per-key limit is a rate string, a Rate or None (exempt), "
            f"got {shown(rate)}",
            argument="rate",
        )
    if rule.calendar and rate.window != rule.rate.window:
        raise ConfigError(
            f"{where}: a calendar rule's limit counts over the rule's own period, per "
            f"{rule.period}: give a rate per {rule.period} ('{rate.limit}/{rule.period}'), "
            f"got {rate}",
            argument="rate",
        )
    try:
        made = Rule(
            rate,
            rule.by,
            rule.strategy,
            name=rule.id,
            burst=rule.burst,
            calendar=rule.calendar,
            tz=rule.tz,
            tz_from=rule.tz_from,
        )
        rules = list(policy.rules)
        rules[index] = made
        derived(policy.name, rules, policy.priorities)  # its bounds, at this rate
    except ConfigError as exc:
        raise ConfigError(
            f"{where}: the limit {rate} cannot apply: {exc}", argument="rate"
        ) from None
    params = rule_params(made)
    # a count of leases is stored without a window (0): it is read with the rule's own lease
    # (a deploy may change it), and no rate strategy reads it, nor does the concurrency
    # strategy read a rate's count (script/strategies/concurrency.py limited)
    window = 0 if leases else params.window
    return KeyLimit(0, 0, False, rate.limit, window, params.capacity, params.interval)


def _ttl_us(ttl: object) -> int:
    if ttl is None:
        return 0
    if isinstance(ttl, timedelta):
        ttl = ttl.total_seconds()
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < math.inf:
        raise ConfigError(
            f"ttl must be None (for ever) or finite seconds > 0, got {shown(ttl)}",
            argument="ttl",
        )
    # compared in seconds first: a finite ttl past 1.8e302 s is infinite in µs
    if ttl > MAX_SPAN_US / _US or (us := max(1, round(ttl * _US))) > MAX_SPAN_US:
        raise ConfigError(
            f"ttl must be at most {MAX_SPAN_US // _US} seconds, got {shown(ttl)}", argument="ttl"
        )
    return us
