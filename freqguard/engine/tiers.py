"""Tiers decided in code: rules whose rate is a function of the hit's context
(``Rule(..., rate_for=...)``), each distinct rate compiled once into a variant of the
policy's parts, whose specs carry that rate. No I/O.

A variant keeps the parts' keys (a rule with ``rate_for`` has a name, so its keys do not
depend on its rate): a caller whose plan changes keeps its counts. Its parts say which rules
they changed (``Part.limits``), so decisions report each rule at the rate it was decided
at, and per-key limits stored for a partition value still apply on top.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from freqguard.errors import ConfigError, shown
from freqguard.options import TierRates
from freqguard.policy import Policy, derived
from freqguard.rates import Rate, parse_rate
from freqguard.rules import Rule
from freqguard.script.calls import Part, spec_text
from freqguard.script.limits import KeyLimit, apply
from freqguard.script.strategies.base import RuleParams

__all__ = ["MAX_VARIANTS", "Tiers", "rule_params", "tables_keep"]

#: The most variants of one policy kept at once (a function that returns a new rate for
#: every caller makes as many; past this, the oldest are compiled again when next met).
MAX_VARIANTS = 1024


def rule_params(rule: Rule, tag: int = 0, keying: int = 0) -> RuleParams:
    """The integers the twins read of a rule."""
    window = rule.rate.window_us
    interval = -(-window // rule.limit) if rule.strategy.uses_burst else 0
    return RuleParams(rule.capacity, window, interval, rule.shadow, tag, 0, rule.burst or 0, keying)


def tables_keep(rules: Sequence[Rule], window: int, cap: int) -> tuple[int, int]:
    """The window and count a state of ``rules`` keeps, at least ``window`` and ``cap``: a
    ``TierRates`` table's rates are known before any hit, so a state that keeps what its
    own rules need (a log, a rolling window) keeps what each tier's needs too, and one hit
    at the rule's own rate never makes a tier of a longer window forget its older hits.
    A ``rate_for`` function's rates are not known: a state remembers those its hits meet
    (``StateSpec.base_window``, design note 118)."""
    for rule in rules:
        if isinstance(rule.rate_for, TierRates):
            for rate in rule.rate_for.rates.values():
                window, cap = max(window, rate.window_us), max(cap, rate.limit)
    return window, cap


class Tiers:
    """The variants of a policy's parts, one per distinct tuple of rates its ``rate_for``
    rules return, made when first met."""

    __slots__ = ("_made", "_parts", "_policy", "_rates", "_remembers", "_rules", "_tags")

    def __init__(self, policy: Policy, parts: tuple[Part, ...], tags: Sequence[int]) -> None:
        self._policy, self._parts, self._tags = policy, parts, tuple(tags)
        self._rules = tuple((i, r) for i, r in enumerate(policy.rules) if r.rate_for is not None)
        # a state remembers a longer window or a larger count a tier kept (design note 118),
        # but under rates that trim their history as they change (DRF's per-request rates)
        self._remembers = not all(getattr(r.rate_for, "TRIMS", False) for _, r in self._rules)
        self._made: dict[tuple[Rate | None, ...], tuple[Part, ...]] = {}
        self._rates: dict[str, Rate] = {}  # rate strings parsed once

    def parts(self, texts: Mapping[str, str]) -> tuple[Part, ...]:
        """The parts a hit of ``texts`` is decided with.

        Raises:
            ConfigError: a ``rate_for`` that returned what is not a rate, or a rate its rule
                (its strategy's bounds, the policy's) cannot take.
        """
        key = tuple([self._rate(rule, texts) for _, rule in self._rules])
        made = self._made.get(key)
        if made is None:
            made = self._make(key)
        return made

    def _rate(self, rule: Rule, texts: Mapping[str, str]) -> Rate | None:
        got = rule.rate_for(texts)  # type: ignore[misc]
        if got is None or got == rule.rate:
            return None
        if isinstance(got, str):
            rate = self._rates.get(got)
            if rate is None:
                if len(self._rates) >= MAX_VARIANTS:
                    self._rates.clear()
                rate = self._rates[got] = parse_rate(got)
            return None if rate == rule.rate else rate
        if isinstance(got, Rate):
            return got
        raise ConfigError(
            f"rule {rule.id!r} of policy {self._policy.name!r}: rate_for must return a rate "
            f"string, a Rate or None (the rule's own), got {shown(got)}",
            argument="context",
        )

    def _make(self, key: tuple[Rate | None, ...]) -> tuple[Part, ...]:
        rules = list(self._policy.rules)
        limits = []
        for (index, rule), rate in zip(self._rules, key, strict=True):
            if rate is None:
                continue
            try:
                rules[index] = Rule(rate, rule.by, rule.strategy, name=rule.id, burst=rule.burst)
                policy = self._policy
                derived(policy.name, rules, policy.priorities)  # at this rate
            except ConfigError as exc:
                raise ConfigError(
                    f"rule {rule.id!r} of policy {self._policy.name!r}: rate_for returned "
                    f"{rate}, which it cannot take: {exc}",
                    argument="context",
                ) from None
            params = rule_params(rules[index])
            window, capacity, interval = params.window, params.capacity, params.interval
            limits.append(
                KeyLimit(self._tags[index], 0, False, rate.limit, window, capacity, interval)
            )
        made = tuple(_variant(part, limits, self._remembers) for part in self._parts)
        if len(self._made) >= MAX_VARIANTS:
            self._made.clear()
        self._made[key] = made
        return made


def _variant(part: Part, limits: Sequence[KeyLimit], remembers: bool = True) -> Part:
    """``part`` with these rates in its specs, which the script reads. A state keeps what
    the base rates need too (a log's window and count, a rolling window's carry), as under
    a per-key limit: a caller back on the rule's own rate finds its older hits (design
    notes 87 and 103). Its specs say the base rates' window and count (``base_window``):
    a log or a rolling window remembers what a tier kept past them, and keeps it at the
    rule's own rate too (design note 118); not ``remembers``: the tier's are its base."""
    made = apply(part, limits, 0)
    if made is part:
        return part
    specs = []
    for own, spec in zip(part.specs, made.specs, strict=True):
        if getattr(spec.twin, "KEEPS_OWN", False):  # its base: the rule's own, not the tier's
            base = (own.window, own.cap) if remembers else (spec.window, spec.cap)
            keep_window = spec.window if spec.window > base[0] else 0  # what it remembers
            keep_cap = spec.cap if spec.cap > base[1] else 0
            spec = spec._replace(
                base_window=base[0], base_cap=base[1], keep_window=keep_window, keep_cap=keep_cap
            )
        specs.append(spec)
    made = made._replace(specs=tuple(specs))
    return made._replace(spec_text=spec_text(made.specs))
