"""Flask's named budgets (``fg.capped(..., name="s2")``, Flask-Limiter's ``shared_limit``):
one policy that every view naming it hits, so one set of rates and one key for them all.

Checked as each view is capped: the rates, and the keys when both say their dimensions
(``client_ip()``, ``header(...)``, the default key). A key that says none (a lambda) is
known at its view's first request, when the policy it makes is registered: a policy of
that name keyed otherwise is refused there, naming the views (not ``add_policy``'s
``replace=True``, a hint for no Flask user).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flask import request

from freqguard.errors import ConfigError
from freqguard.guard import Guard
from freqguard.integrations._decide import Route
from freqguard.integrations._http import KeyFunc
from freqguard.integrations._request import dimensions_of
from freqguard.policy import Policy
from freqguard.rates import Rate, written
from freqguard.rules import Rule

__all__ = ["NamedBudgets"]

_FIX = (
    "views sharing a name must have the same rates and key: give them one key=, or each a "
    "name of its own"
)


class NamedBudgets:
    """The ``name=`` budgets of one extension: each name's views, rates and keys."""

    __slots__ = ("_given",)

    def __init__(self) -> None:
        # name -> the views naming it, in order: (view's name, its rates, its key)
        self._given: dict[str, list[tuple[str, tuple[Rate | Rule, ...], KeyFunc]]] = {}

    def claim(
        self, name: str, view: Callable[..., Any], rates: tuple[Rate | Rule, ...], key: KeyFunc
    ) -> None:
        """Note that ``view`` is capped on budget ``name`` with ``rates``, keyed by ``key``.

        Raises:
            ConfigError: another view gave the name other rates, or a key that says other
                dimensions than ``key`` does; both views named.
        """
        mine = getattr(view, "__name__", repr(view))
        given = self._given.setdefault(name, [])
        if given:
            first, their_rates, their_key = given[0]
            if their_rates != rates:
                raise ConfigError(
                    f"name={name!r} is one budget: view {mine!r} gives it {_rates(rates)}, "
                    f"view {first!r} {_rates(their_rates)}; {_FIX}"
                )
            ours, theirs = dimensions_of(key), dimensions_of(their_key)
            if key is not their_key and None not in (ours, theirs) and ours != theirs:
                raise ConfigError(
                    f"name={name!r} is one budget: view {mine!r} keys it by "
                    f"{_shown(ours)}, view {first!r} by {_shown(theirs)}; {_FIX}"
                )
        given.append((mine, rates, key))

    def registrar(self, guard: Guard) -> Callable[[Route, Policy], None]:
        """What registers a route's policy on ``guard`` (a :class:`Decider`'s ``register``):
        a named budget's policy registered already with other rules is refused naming the
        views of the name."""

        def register(route: Route, policy: Policy) -> None:
            before = guard.policies.get(policy.name)
            views = [view for view, _, _ in self._given.get(route.name, ())]
            if before is None or before == policy or not views:
                guard.add_policy(policy)
                return
            raise ConfigError(
                f"name={route.name!r} is one budget, of views {', '.join(map(repr, views))}: "
                f"endpoint {request.endpoint!r} keys it by {_shown(_by(policy.rules))}, another by "
                f"{_shown(_by(before.rules))} (or the guard has a policy of that name from "
                f"elsewhere: FREQGUARD_CONFIG's); {_FIX}"
            )

        return register


def _rates(rates: tuple[Rate | Rule, ...]) -> str:
    return "; ".join(written(rate) if isinstance(rate, Rate) else repr(rate) for rate in rates)


def _by(rules: Sequence[Rule]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(d for rule in rules for d in rule.by))


def _shown(dimensions: tuple[str, ...] | None) -> str:
    return ", ".join(dimensions or ()) or "nothing"
