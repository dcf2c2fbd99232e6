"""Flask's named budgets (``fg.capped(..., name="s2")``, Flask-Limiter's ``shared_limit``):
one policy that every view naming it hits, so one set of rates and one key for them all.

Checked as each view is capped: the rates, and the keys: by their dimensions when both say
them (``client_ip()``, ``header(...)``, the default key); else they must be one key
function (one object, or equal, or made from the same source: an app factory run again),
or the second view is refused there, naming both views and the fix (two lambdas were told
apart only at the second view's first request, a 500 to its client). A policy of that
name registered otherwise (``FREQGUARD_CONFIG``'s, or a factory's lambda whose closure
keys it otherwise) is still refused at the request that registers it, naming the views
(not ``add_policy``'s ``replace=True``, a hint for no Flask user).
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
            if None not in (ours, theirs):
                if ours != theirs:
                    raise ConfigError(
                        f"name={name!r} is one budget: view {mine!r} keys it by "
                        f"{_shown(ours)}, view {first!r} by {_shown(theirs)}; {_FIX}"
                    )
            elif not _one_key(key, their_key):
                raise ConfigError(
                    f"name={name!r} is one budget: view {mine!r} is keyed by "
                    f"{_function(key)}, view {first!r} by {_function(their_key)}, two key "
                    "functions whose dimensions are known only at a request; views sharing a "
                    "name must have the same rates and key: define the key function once and "
                    "pass the same key function object to each view, or give each a name of "
                    "its own"
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


def _one_key(key: KeyFunc, other: KeyFunc) -> bool:
    """Whether ``key`` and ``other`` are one key function: the same object, equal (a bound
    method of one object, taken twice), or functions of the same code (a lambda made again
    as an app factory runs again; its closure is the request's to check)."""
    if key is other:
        return True
    try:
        if bool(key == other):
            return True
    except Exception:  # an __eq__ that refuses: not known to be one
        return False
    code = getattr(key, "__code__", None)
    return code is not None and code is getattr(other, "__code__", None)


def _function(key: KeyFunc) -> str:
    """``key`` as its author finds it: its name, and where a function is written."""
    named = getattr(key, "__qualname__", None) or type(key).__qualname__
    code = getattr(key, "__code__", None)
    if code is None:
        return repr(named)
    return f"{named!r} ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})"


def _rates(rates: tuple[Rate | Rule, ...]) -> str:
    return "; ".join(written(rate) if isinstance(rate, Rate) else repr(rate) for rate in rates)


def _by(rules: Sequence[Rule]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(d for rule in rules for d in rule.by))


def _shown(dimensions: tuple[str, ...] | None) -> str:
    return ", ".join(dimensions or ()) or "nothing"
