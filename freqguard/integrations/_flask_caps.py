"""What ``fg.capped`` and ``fg.exempt`` set on Flask views and blueprints, and the route
they make for an endpoint.

A view's cap wraps the view (:class:`Capping`), so that it still holds when the view runs
outside its own route; a blueprint's cap and an exemption are attributes of the blueprint or
view, read when the extension builds an endpoint's route (:func:`route_of`): the default
limits or the caps of the blueprints around it, and its view's own cap, each a key function
and its rules (``KeyedRules``) of one policy. The extension (:mod:`.flask`) checks the
arguments, keeps each app's state and decides the hits.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, overload

from flask import Blueprint, Flask, Response, g, request

from freqguard.decision import Decision
from freqguard.decorators.naming import implicit_name
from freqguard.errors import BackendUnavailable, ConfigError, shown
from freqguard.guard import Guard
from freqguard.integrations._decide import KeyedRules, Route
from freqguard.integrations._flask_application import check_served, static_files
from freqguard.integrations._flask_habits import CapHabits, check_started
from freqguard.integrations._flask_named import NamedBudgets
from freqguard.integrations._http import KeyFunc
from freqguard.integrations._rule_items import check_cost
from freqguard.rates import Rate
from freqguard.rules import Rule, fit_name

__all__ = [
    "BlueprintCap",
    "Capping",
    "Deduct",
    "FlaskViewCap",
    "Made",
    "check_not_both",
    "check_view",
    "deducted",
    "give_back",
    "route_of",
    "run_over",
    "view_cap",
]

#: ``deduct_when``: whether an admitted request's response counts (else its hit is refunded)
Deduct = Callable[[Response], bool]
P = ParamSpec("P")
R = TypeVar("R")


class FlaskViewCap:
    """What ``@fg.capped`` asked for one view."""

    __slots__ = ("alone", "cost", "decide", "deduct", "key", "methods", "name", "rates")

    def __init__(
        self,
        rates: tuple[Rate | Rule, ...],
        key: KeyFunc,
        cost: int | None,
        name: str | None,
        alone: str,
        methods: frozenset[str] | None = None,
        deduct: Deduct | None = None,
    ) -> None:
        self.rates, self.key, self.cost, self.name = rates, key, cost, name
        self.alone = alone  # its policy when the view runs outside its own route
        self.methods = methods  # None: every method; else its own budget, in the view
        self.deduct = deduct  # None: every admitted request counts; else those it accepts
        # its hit, unless decided already (set once its wrapper is made)
        self.decide: Callable[[], None] = lambda: None

    @property
    def in_view(self) -> bool:
        """Decided when the view runs, on a budget of its own (``name``, ``methods``,
        ``deduct_when``), not with its route's limits."""
        return self.name is not None or self.methods is not None or self.deduct is not None


@dataclass(frozen=True, slots=True)
class BlueprintCap:
    """What ``fg.capped(...)`` asked: for one blueprint's views, or (its first three) a view's."""

    rates: tuple[Rate | Rule, ...]
    key: KeyFunc
    cost: int | None  # None: the view's, else 1
    shared: bool = False  # one budget for all its views, not one per route
    defaults: bool = False  # the limits around it still apply, not replaced by it


class Capping(CapHabits):
    """What :meth:`~freqguard.integrations.flask.FreqGuard.capped` returns: applied to a view
    it caps the view, applied to a Blueprint every view of it.

    Args:
        hit: the extension's hit on a route, for a view run outside its own route, or a
            named cap (its own budget, decided when the view runs).
        asked: what ``capped`` was asked.
        name: the view's budget, if given.
        named: the extension's named budgets so far, to refuse one name given two sets of
            rates or two keys.
        apps: the apps the extension has set up, to refuse a blueprint capped once one
            of them has served requests.
    """

    __slots__ = ("_apps", "_asked", "_deduct", "_hit", "_made", "_methods", "_name", "_named")

    def __init__(
        self,
        hit: Callable[[Route, Deduct | None], None],
        asked: BlueprintCap,
        name: str | None,
        named: NamedBudgets,
        methods: frozenset[str] | None = None,
        deduct: Deduct | None = None,
        made: list[Made] | None = None,
        apps: Collection[Flask] = (),
    ) -> None:
        self._hit, self._asked, self._name, self._named = hit, asked, name, named
        self._methods, self._deduct, self._made, self._apps = methods, deduct, made, apps

    @overload
    def __call__(self, target: Blueprint, /) -> Blueprint: ...

    @overload
    def __call__(self, target: Callable[P, R], /) -> Callable[P, R]: ...

    def __call__(self, target: Any, /) -> Any:
        if isinstance(target, Blueprint):
            return self._blueprint(target)
        check_view("capped", target)
        return self._view(target)

    def _blueprint(self, blueprint: Blueprint) -> Blueprint:
        if self._methods is not None or self._deduct is not None:
            raise ConfigError(
                f"methods= and deduct_when= apply to one view, not to blueprint {blueprint.name!r}"
            )
        if self._name is not None:
            raise ConfigError(
                f"name={self._name!r} names one view's policy: blueprint {blueprint.name!r} "
                "has one per route (flask.<endpoint>), or with shared=True one budget "
                "(flask-blueprint.<registered name>)"
            )
        if getattr(blueprint, "_freqguard_cap", None) is not None:
            raise ConfigError(
                f"blueprint {blueprint.name!r} is capped already: give all its rates in one "
                'call, fg.capped("100/hour; 1000/day")(blueprint)'
            )
        check_not_both(blueprint, self._asked, getattr(blueprint, "_freqguard_exempt", False))
        check_started(blueprint, self._apps, "capped")
        blueprint._freqguard_cap = self._asked  # type: ignore[attr-defined]
        return blueprint

    def _view(self, view: Callable[P, R]) -> Callable[P, R]:
        asked = self._asked
        if asked.shared or asked.defaults:
            raise ConfigError(
                f"shared= and defaults= apply to a Blueprint, not to view {shown(view)}: a view's "
                "cap always adds to the limits around it, on its route's own policy"
            )
        alone_name = implicit_name(view, prefix="flask.view")
        if self._name is not None:  # a budget of its own, shared by every cap naming it
            self._named.claim(self._name, view, asked.rates, asked.key)
        cap = FlaskViewCap(
            asked.rates, asked.key, asked.cost, self._name, alone_name, self._methods, self._deduct
        )
        alone = Route(
            self._name or cap.alone,
            (KeyedRules(cap.key, cap.rates),),
            1 if asked.cost is None else asked.cost,
        )
        hit, methods, deduct = self._hit, self._methods, self._deduct

        def decide() -> None:
            if g.get("freqguard_cap") is not cap and (methods is None or request.method in methods):
                hit(alone, deduct)  # not decided before this request's view: decide now

        cap.decide = decide
        wrapper = _wrapped(view, decide)
        wrapper._freqguard_cap = cap  # type: ignore[attr-defined]
        if self._made is not None:  # a view capped over its route is found by it (view_cap)
            self._made.append((view, wrapper, cap))
        return wrapper


def _wrapped(view: Callable[P, R], decide: Callable[[], None]) -> Callable[P, R]:
    """``view``, ``decide`` called before it runs: a coroutine function for a coroutine
    function (an ``async def`` view, which Flask awaits only when its wrapper is one too)."""
    if inspect.iscoroutinefunction(view):

        @functools.wraps(view)
        async def awaited(*args: P.args, **kwargs: P.kwargs) -> Any:
            decide()
            return await view(*args, **kwargs)

        return awaited  # type: ignore[return-value]

    @functools.wraps(view)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        decide()
        return view(*args, **kwargs)

    return wrapper


#: A view capped by the extension: the function, the cap's wrapper and the cap.
Made = tuple[Callable[..., Any], Callable[..., Any], FlaskViewCap]


def view_cap(app: Flask, endpoint: str, made: list[Made]) -> FlaskViewCap | None:
    """The cap of the view Flask runs at ``endpoint``: its own (a capped wrapper), or one
    made over its route's decorator (``@fg.capped`` above ``@app.route``: Flask runs the
    function under it, the wrapper nowhere), decided with the route as well.

    Raises:
        ConfigError: a cap over the route of a view capped under it as well: the view Flask
            runs is the wrapper of the cap under it, which only knows its own.
    """
    view = app.view_functions.get(endpoint)
    cap: FlaskViewCap | None = getattr(view, "_freqguard_cap", None)
    for function, wrapper, over in made:
        if function is view and wrapper not in app.view_functions.values():
            if cap is not None:  # the view Flask runs is a wrapper of a cap of its own
                raise ConfigError(
                    f"view {endpoint!r} is capped over @app.route and under it: over it, "
                    "Flask runs the function under it, whose cap is the only one decided; "
                    "put @fg.capped under @app.route (both caps there hold)"
                )
            return over
    return cap


def run_over(app: Flask, endpoint: str, cap: FlaskViewCap | None) -> None:
    """Have a cap of its own budget (``name=``, ``methods=``, ``deduct_when=``) made over
    ``@app.route`` decided as the view runs, as one under it is: the view function Flask
    runs at ``endpoint`` wrapped in it, once (Flask never runs the cap's own wrapper; one
    decided before the view counted the requests Flask answers itself, a preflight's
    OPTIONS, and those a ``before_request`` answers)."""
    if cap is None or not cap.in_view:
        return
    view = app.view_functions.get(endpoint)
    if view is not None and getattr(view, "_freqguard_cap", None) is not cap:
        wrapper: Any = _wrapped(view, cap.decide)
        wrapper._freqguard_cap = cap
        app.view_functions[endpoint] = wrapper


def check_view(method: str, target: object) -> None:
    """Refuse what is neither a view function nor a Blueprint: it would be a silent no-op."""
    if isinstance(target, Flask):
        hint = "; the app's own limits are FREQGUARD_DEFAULT_LIMITS and FREQGUARD_ENABLED"
    elif isinstance(target, type):
        hint = "; for a class-based view list it in the class's decorators"
    elif not callable(target):
        hint = ""
    else:
        return
    got = f"the class {shown(target.__qualname__)}" if isinstance(target, type) else shown(target)
    raise ConfigError(f"fg.{method} takes a view function or a Blueprint, got {got}{hint}")


def check_not_both(blueprint: Blueprint, cap: BlueprintCap | None, exempt: bool) -> None:
    """Refuse a blueprint both exempt and capped with ``defaults=True``."""
    if exempt and cap is not None and cap.defaults:
        raise ConfigError(
            f"blueprint {blueprint.name!r} is exempt and capped with defaults=True: the "
            "limits around it cannot be both kept and dropped; choose one"
        )


def route_of(
    app: Flask, endpoint: str, key: KeyFunc, defaults: tuple[Rate | Rule, ...], made: list[Made]
) -> Route | None:
    """The endpoint's route: the default limits or its blueprints' caps, and its view's
    cap, decided together (None: nothing caps it).

    Args:
        key: the extension's key function, which keys the default limits.
        defaults: the rates and Rules of ``FREQGUARD_DEFAULT_LIMITS``.

    Raises:
        ConfigError: a shared blueprint cap and a cap only this route has, or a cost (the
            view's, else its blueprint's) that the narrowest of its rules cannot hold.
    """
    view = app.view_functions.get(endpoint)
    if static_files(app, endpoint):
        return None  # an app's or a blueprint's static files, as Flask-Limiter leaves them
    cap = view_cap(app, endpoint, made)
    if cap is not None and cap.methods is not None:  # else never counted, silently
        check_served(app, endpoint, cap.methods, lambda at: view_cap(app, at, made) is cap)
    exempt = getattr(view, "_freqguard_exempt", False)
    around, with_defaults = ([], False) if exempt else _around(app, endpoint)
    keyed = [KeyedRules(key, defaults, "default")] if with_defaults and defaults else []
    keyed += [KeyedRules(bp.key, bp.rates, _label(name)) for name, bp in reversed(around)]
    if cap is not None and not cap.in_view:  # else its own budget, decided in the view
        keyed.append(KeyedRules(cap.key, cap.rates))
    if not keyed:
        return None
    # one hit, one cost: the view's, else the nearest blueprint's that names one
    found = (None if cap is None or cap.in_view else cap, *(bp for _, bp in around))
    costs = [c.cost for c in found if c is not None and c.cost is not None]
    items = [item for rules in keyed for item in rules.items]  # the default limits too
    check_cost(costs[0] if costs else 1, items, f"route {endpoint!r}: ")
    name = fit_name(f"flask.{endpoint}")
    shared = [blueprint for blueprint, bp in around if bp.shared]
    if shared:
        name = _shared_name(endpoint, shared[0], cap is not None, around[0][0])
    return Route(name, tuple(keyed), costs[0] if costs else 1)


def _around(app: Flask, endpoint: str) -> tuple[list[tuple[str, BlueprintCap]], bool]:
    """The caps of the blueprints around an endpoint, innermost first, each with the name
    it is registered under (``parent.child``), and whether the default limits still apply.

    A blueprint's cap replaces the limits around it, unless made with ``defaults=True``; an
    exempt blueprint ends the walk.
    """
    found: list[tuple[str, BlueprintCap]] = []
    name = endpoint.rpartition(".")[0]  # as Flask's request.blueprints, innermost first
    while name:
        blueprint = app.blueprints.get(name)
        cap: BlueprintCap | None = getattr(blueprint, "_freqguard_cap", None)
        if cap is not None:
            found.append((name, cap))
        if getattr(blueprint, "_freqguard_exempt", False) or (cap and not cap.defaults):
            return found, False
        name = name.rpartition(".")[0]
    return found, True


def _label(blueprint: str) -> str:
    """The prefix of a blueprint cap's rule names, ``bp.<registered name>``: a digest of
    the name when that would not fit in a rule name beside the rule's id."""
    label = f"bp.{blueprint}"
    if len(label) > 20 or fit_name(label) != label:
        label = "bp." + hashlib.blake2b(blueprint.encode(), digest_size=6).hexdigest()
    return label


def _shared_name(endpoint: str, blueprint: str, own_cap: bool, nearest: str) -> str:
    """The policy of a blueprint's shared budget, which every route under it hits.

    Raises:
        ConfigError: the route has a cap the blueprint's other routes do not (its view's,
            or a nested blueprint's made with ``defaults=True``): one hit on the shared
            policy cannot take it.
    """
    if own_cap or nearest != blueprint:
        its = "its view's @fg.capped" if own_cap else f"the cap of blueprint {nearest!r}"
        raise ConfigError(
            f"route {endpoint!r}: blueprint {blueprint!r} is capped with shared=True, one "
            f"budget for all its routes, and {its} holds for this route only: one hit cannot "
            "take both; exempt the view (@fg.exempt), or leave shared=True out"
        )
    return fit_name(f"flask-blueprint.{blueprint}")


def deducted(guard: Guard, decision: Decision, deduct: Deduct, response: Response) -> Response:
    """The response of a request its cap's ``deduct_when`` decides: its hit refunded unless
    ``deduct`` accepts the response; a lease's decision when its lease goes back (a
    streamed body's once the server closes it: the request is in flight until then). A
    refunded hit's headers tell the budget the refund leaves, as Flask-Limiter's do."""
    if not deduct(response):
        if any(decision is held for held in g.get("freqguard_leases", ())):
            g.setdefault("freqguard_uncounted", []).append(decision)
        else:
            left = guard.refund(decision)
            decisions: list[Decision] = g.get("freqguard_decisions", [])
            decisions[:] = [left if made is decision else made for made in decisions]
    return response


def give_back(guard: Guard, earlier: list[Decision]) -> None:
    """A later cap refused the request (a named cap, decided in its view): what the earlier
    hits took goes back, so that a refused request is counted by none; a lease's decision
    whole, its rate units too (the teardown's release then leaves it be; it had skipped
    them, and the refused request's units stayed counted). Best effort: a store that fails
    now keeps it, and so does a refund a deploy since refuses (a lease still goes back at
    the teardown, by the plan it was taken under)."""
    for decision in earlier:
        receipt = decision.receipt
        if decision.allowed and receipt is not None and not receipt.spent:
            with contextlib.suppress(BackendUnavailable, ConfigError):
                guard.refund(decision)
