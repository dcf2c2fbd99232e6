"""A configuration file's rule table as a :class:`~freqguard.Rule`, and a Rule as a table
(a configuration written back), in the file's words: ``tiers``, not ``rate_for``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from freqguard.errors import ConfigError
from freqguard.rates import several_rates
from freqguard.rules import Rule, TierRates

__all__ = ["rule_document", "rule_of"]


def rule_of(table: Mapping[str, Any]) -> Rule:
    """A rule table as a Rule (its ``tiers`` a :class:`~freqguard.TierRates`).

    Raises:
        ConfigError: several rates in one, ``tiers`` without a ``name``, or what the Rule
            refuses.
    """
    rate = table.get("rate")
    if isinstance(rate, str) and several_rates(rate):
        raise ConfigError(
            f"a rule takes one rate, got {rate!r}: write one rule table per rate "
            '(rules = [{ rate = "10/minute" }, { rate = "100/day" }])'
        )
    options = dict(table)
    tiers = options.pop("tiers", None)
    if tiers is not None:
        if options.get("name") is None:  # Rule's own words are Python's (rate_for, Rule(...))
            raise ConfigError(
                f"a rule with tiers needs a name (its keys must not change with its rate): "
                f"give the rule of rate {rate!r} a name (its key: name)"
            )
        options["rate_for"] = TierRates(tiers["from"], tiers["rates"])
    return Rule(**options)


def rule_document(rule: Rule) -> dict[str, Any]:
    """A Rule as a rule table says it (what ``Config.document`` writes)."""
    entry: dict[str, Any] = {"rate": str(rule.rate), "by": list(rule.by)}
    if rule.lease is not None:  # "N concurrent", its window the lease
        entry["rate"], entry["lease"] = f"{rule.rate.limit} concurrent", rule.lease
    else:
        entry["strategy"] = rule.strategy.value
    if rule.name is not None:
        entry["name"] = rule.name
    if rule.burst is not None:
        entry["burst"] = rule.burst
    entry["shadow"] = rule.shadow
    if rule.only is not None:
        entry["only"] = list(rule.only)
    if rule.caps:
        entry["caps"] = dict(rule.caps)
    if rule.calendar:
        entry["calendar"] = True
        entry["tz" if rule.tz is not None else "tz_from"] = rule.tz or rule.tz_from
    if isinstance(rule.rate_for, TierRates):
        rates = {value: str(rate) for value, rate in rule.rate_for.rates.items()}
        entry["tiers"] = {"from": rule.rate_for.read, "rates": rates}
    return entry
