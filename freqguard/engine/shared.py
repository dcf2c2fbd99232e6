"""A policy's limits shared out among a fallback's workers (``Fallback(backend,
workers=N)``): each rule's limit, burst and caps divided, so that N workers falling back at
once admit no more together than the store would."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from freqguard.errors import ConfigError
from freqguard.policy import Policy, derived
from freqguard.rates import Rate, parse_rate
from freqguard.rules import Rule

__all__ = ["shared_out"]


def shared_out(policy: Policy, workers: int) -> Policy:
    """``policy`` with each rule's limit and burst divided by ``workers`` (rounded down, at
    least 1); rule ids kept, so that decisions name the same rules."""
    if workers == 1:
        return policy
    rules = []
    for rule in policy.rules:
        if rule.quiet is not None:  # the quiet hours are the same for every worker
            rules.append(rule)
            continue
        burst = None if rule.burst is None else max(rule.burst // workers, 1)
        try:
            rate = Rate(max(rule.rate.limit // workers, 1), rule.rate.window)
            rate_for = None if rule.rate_for is None else _shared_tier(rule.rate_for, workers)
            rules.append(
                Rule(
                    rate,
                    rule.by,
                    rule.strategy,
                    name=rule.id,
                    burst=burst,
                    shadow=rule.shadow,
                    rate_for=rate_for,
                    reads=rule.reads,
                    calendar=rule.calendar,
                    tz=rule.tz,
                    tz_from=rule.tz_from,
                    only=rule.only,
                    caps=_shared_caps(rule, burst if burst is not None else rate.limit),
                )
            )
        except ConfigError as exc:
            raise ConfigError(
                f"on_error=Fallback(..., workers={workers}) shares rule {rule.id!r} of policy "
                f"{policy.name!r} out as {max(rule.rate.limit // workers, 1)} per "
                f"{rule.rate.window} (burst {burst}), which is refused: {exc}"
            ) from None
    return derived(policy.name, rules, policy.priorities)


def _shared_caps(rule: Rule, capacity: int) -> dict[str, int] | None:
    """A rule's caps in the same proportion of its shared-out capacity (none where that is
    too small to leave a priority less than the whole)."""
    if not rule.caps or capacity < 2:
        return None
    return {p: min(max(cap * capacity // rule.capacity, 1), capacity - 1) for p, cap in rule.caps}


def _shared_tier(
    rate_for: Callable[[Mapping[str, str]], Rate | str | None], workers: int
) -> Callable[[Mapping[str, str]], Rate | None]:
    """A tier's rate shared out among ``workers``, as the rule's own is."""

    def shared(texts: Mapping[str, str]) -> Rate | None:
        got = rate_for(texts)
        if got is None:
            return None
        rate = parse_rate(got) if isinstance(got, str) else got
        if not isinstance(rate, Rate):
            return rate  # the tier's own check names the mistake
        return Rate(max(rate.limit // workers, 1), rate.window)

    return shared
