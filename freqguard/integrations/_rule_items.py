"""The rules an integration's cap is given (``Limit``, Flask's ``fg.capped``, Django's
``capped``): rate strings and Rules, parsed once; anything else refused naming what the
caller takes and, for a peer's habit (a Policy in the wrong place, a callable rate), the fix.
And the cost of one request, checked against them as the cap is made (:func:`check_cost`)."""

from __future__ import annotations

from collections.abc import Iterable

import limits

from freqguard.errors import ConfigError, shown
from freqguard.policy import Policy
from freqguard.rates import Rate, parse_rates, peer_rate
from freqguard.rules import Rule

__all__ = ["check_cost", "rule_items"]

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
        ConfigError: an item neither a rate string (or limits' item) nor a Rule (a
            callable: a rate per request, which a tier is here), a rate a sliding log cannot
            hold (past 10,000: a Rule of another strategy), or no rule at all.
    """
    items = rule if isinstance(rule, (list, tuple)) else [rule]
    parsed: list[Rate | Rule] = []
    for item in items:
        if isinstance(item, Rule):
            parsed.append(item)
        elif isinstance(item, (str, limits.RateLimitItem)):
            for rate in parse_rates(item):
                Rule(rate)  # a rate is a sliding-log rule: its bounds, told here
                parsed.append(rate)
        else:
            raise ConfigError(_not_a_rule(item, where, policy, page))
    if not parsed:
        raise ConfigError(f"{where} needs at least one rule, got {shown(rule)}")
    return tuple(parsed)


def _not_a_rule(item: object, where: str, policy: bool, page: str) -> str:
    takes = "a rate string ('5/minute'), a Rule or a list of them"
    if policy:
        takes += ", or a Policy on its own"
    found = f"{where} takes {takes}, got {shown(item)}{peer_rate(item)}"
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


def check_cost(cost: object, items: Iterable[Rate | Rule] = (), where: str = "") -> int:
    """A request's ``cost``: an integer >= 0 that the narrowest enforcing rule of ``items``
    binding every request at its own rate can hold (a cost above it could never be
    admitted; one past a tier's, a priority's cap or a per-key limit is a 429 when met).

    Raises:
        ConfigError: any other cost, named (``where``: what was given it), a callable as a
            peer's cost per request (slowapi's, Flask-Limiter's), which is not taken.
    """
    if callable(cost):
        raise ConfigError(
            f"{where}cost must be an integer >= 0, got the function "
            f"{getattr(cost, '__qualname__', repr(cost))}: a cost per request (slowapi's, "
            "Flask-Limiter's) is not taken; a route of another cost is a cap of its own"
        )
    if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
        raise ConfigError(f"{where}cost must be an integer >= 0, got {shown(cost)}")
    held = [  # the rules that bind every request at their own rate (not a tier's: it may
        item.capacity if isinstance(item, Rule) else item.limit  # be raised; not one for
        for item in items  # some priorities only)
        if not isinstance(item, Rule) or not (item.shadow or item.rate_for or item.only)
    ]
    if held and cost > min(held):
        raise ConfigError(
            f"{where}cost {shown(cost)} exceeds the capacity {min(held)} of its narrowest rule: "
            "no request of that cost could ever be admitted"
        )
    return cost
