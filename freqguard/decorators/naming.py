"""What a cap names: the rules or the registered policy its ``rule`` gives (checked at
decoration), and the policy name a decorated function (or a Flask view) gets when none is
given."""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Sequence

import limits

from freqguard.decorators.defaults import default_guard
from freqguard.errors import ConfigError, shown
from freqguard.guard import AsyncGuard, Guard, not_a_guard
from freqguard.rates import item_rate, parse_rates, peer_rate, written
from freqguard.rules import NAME_PATTERN, Rule, fit_name

__all__ = ["implicit_name", "numbered", "parse_target", "unknown_policy"]

_taken: set[str] = set()  # implicit policy names handed out in this process
_taken_lock = threading.Lock()


def implicit_name(func: Callable[..., object], prefix: str = "capped") -> str:
    """A policy name of its own for ``func``: ``<prefix>.<module>.<qualname>``.

    Numbered (``.2``, ``.3``, ...) in decoration order when another function of this
    process has the name already (functions made by a factory share a qualname), so no two
    functions ever share a cap by accident. A module-level function keeps the plain name in
    every process; give factory-made ones ``name=`` when processes must share their caps.
    """
    return numbered(
        f"{prefix}.{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', '?')}"
    )


def numbered(raw: str) -> str:
    """``raw`` as a policy name of its own (:func:`implicit_name`'s numbering)."""
    with _taken_lock:
        name, number = fit_name(raw), 1
        while name in _taken:
            number += 1
            name = fit_name(f"{raw}.{number}")
        _taken.add(name)
    return name


def parse_target(
    rule: object, guard: Guard | AsyncGuard | None
) -> tuple[tuple[Rule | str, ...], str | None]:
    """What a cap's ``rule`` names: rules (or rate strings) to make a policy of, or the name
    of a registered policy.

    Checked at decoration: a rate that does not parse, or a name the guard (or the current
    default guard) does not know, is a ConfigError here, not at the first call; so is a
    ``guard`` that is none.
    """
    if guard is not None and not isinstance(guard, (Guard, AsyncGuard)):
        raise not_a_guard(guard, "@capped")
    if isinstance(rule, limits.RateLimitItem):  # limits' item, as Rule takes it
        rule = written(item_rate(rule))
    if isinstance(rule, Rule):
        return (rule,), None
    if isinstance(rule, str):
        try:
            parse_rates(rule)
        except ConfigError:
            if not NAME_PATTERN.fullmatch(rule):
                raise  # not a possible policy name either: the rate error says why
            target = guard if guard is not None else default_guard()
            if rule not in target.policies:
                raise unknown_policy(rule, target, guard is None) from None
            return (), rule
        return (rule,), None
    items = tuple(rule) if isinstance(rule, Sequence) else ()
    items = tuple(
        written(item_rate(r)) if isinstance(r, limits.RateLimitItem) else r for r in items
    )
    if not items or not all(isinstance(r, str | Rule) for r in items):
        raise ConfigError(
            "rule must be a rate string, a Rule, a list of them or a policy name, got "
            f"{shown(rule)}{peer_rate(rule)}"
        )
    for item in items:
        if isinstance(item, str):
            parse_rates(item)
    return items, None


def unknown_policy(name: str, guard: Guard | AsyncGuard, default: bool) -> ConfigError:
    """The error for a policy name the guard (the default one, ``default``) does not know:
    the name meant, if one is close, else how to register it."""
    known = ", ".join(sorted(guard.policies)) or "none"
    close = difflib.get_close_matches(name[:64], list(guard.policies), n=1)  # bounded: any name
    if close:
        fix = f"did you mean {close[0]!r}? "
    elif default:
        fix = (
            "register it first: configure(policies=[Policy(...)]) for the "
            "default guard, or give guard= a guard it is registered on; "
        )
    else:
        fix = "register it on the guard first: guard.add_policy(Policy(...)); "
    return ConfigError(
        f"{name!r} is neither a rate nor a registered policy ({fix}registered: {known})"
    )
