"""The rules an integration's cap is given (``Limit``, Flask's ``fg.capped``, Django's
``capped``): rate strings and Rules, parsed once; anything else refused naming what the
caller takes and, for a peer's habit (a Policy in the wrong place, a callable rate), the fix."""

from __future__ import annotations

from freqguard.errors import ConfigError
from freqguard.policy import Policy
from freqguard.rates import Rate, parse_rates, peer_rate
from freqguard.rules import Rule

__all__ = ["rule_items"]

#: where a peer's callable rate is translated (Flask-Limiter's, slowapi's)
_LIMITER_PAGE = "docs/coming-from/flask-limiter.md"


def rule_items(
    rule: object, where: str = "Limit", policy: bool = True, page: str = _LIMITER_PAGE
) -> tuple[Rate | Rule, ...]:
    """Rates (keyed later by the key's dimensions) and Rules (keyed by their own ``by``).

    Args:
        where: what was given ``rule`` (``Limit``, ``fg.capped``), for the errors.
        policy: ``where`` takes a Policy too, on its own (the caller takes it first).
        page: the "Coming from" page whose row shows a callable rate's translation.

    Raises:
        ConfigError: an item neither a rate string nor a Rule (a callable: a rate per
            request, which a tier is here), or no rule at all.
    """
    items = rule if isinstance(rule, (list, tuple)) else [rule]
    parsed: list[Rate | Rule] = []
    for item in items:
        if isinstance(item, Rule):
            parsed.append(item)
        elif isinstance(item, str):
            parsed.extend(parse_rates(item))
        else:
            raise ConfigError(_not_a_rule(item, where, policy, page))
    if not parsed:
        raise ConfigError(f"{where} needs at least one rule, got {rule!r}")
    return tuple(parsed)


def _not_a_rule(item: object, where: str, policy: bool, page: str) -> str:
    takes = "a rate string ('5/minute'), a Rule or a list of them"
    if policy:
        takes += ", or a Policy on its own"
    found = f"{where} takes {takes}, got {item!r}{peer_rate(item)}"
    if isinstance(item, Policy):
        fix = (
            "a Policy goes on its own, not in a list"
            if policy
            else f"give its rules, {where}(policy.rules) (the store failing is answered by "
            "the guard's on_error)"
        )
        return f"{found}: {fix}"
    if callable(item):
        bare = ""
        if where != "Limit" and not getattr(item, "__name__", "").startswith("<"):  # a def
            bare = f"a bare @{where} (no rate, no parentheses) is given the function it caps: "
            bare += f"write @{where}('5/minute'); or, "
        return (
            f"{found}: {bare}a rate decided per request is a tier here, its rates declared: "
            'Rule("1/minute", by="user", rate_for=TierRates("plan", {"pro": "3/minute"})), '
            f"the key function giving plan (docs/limits.md, 'Tiers decided in code'; {page})"
        )
    return found
