"""Flask: ``FreqGuard(app)`` or ``fg.init_app(app)``, per-view ``@fg.capped(...)``,
per-blueprint ``fg.capped(...)(blueprint)``.

Configuration (``app.config``):

* ``FREQGUARD_BACKEND``: a backend URL (default ``"memory://"``), unless a guard is given.
* ``FREQGUARD_CONFIG``: a configuration file's path (or a :class:`~freqguard.config.Config`)
  to make the guard from, its policies registered; not with a guard or a backend URL.
* ``FREQGUARD_DEFAULT_LIMITS``: rates (a string, or a list of strings and Rules) applied
  to every view not exempt but static files, each route counted on its own (default none).
* ``FREQGUARD_HEADERS``: the header profile (default ``"ietf"``).
* ``FREQGUARD_ENABLED``: ``False`` switches every cap of the app off (default ``True``).

Any other ``FREQGUARD_*`` key fails ``init_app`` naming the one it resembles; Flask-Limiter's
``RATELIMIT_*`` keys are warned of naming freqguard's, but ``RATELIMIT_DEFAULT`` (or
``_APPLICATION``) fails the first request of an app with no freqguard limit by then.

A route's default limits and its view's own cap are one policy, decided in one atomic hit
before the view runs: a request denied by either consumes from neither. The policy is named
``flask.<endpoint>``; the default rules are named ``default.<rule id>``. A hit has one cost,
so a view's ``cost`` is charged to the default limits too. A cap given ``name=`` is a budget
of its own, shared by every view naming it (Flask-Limiter's ``shared_limit``), decided when
the view runs; a refusal gives back what the route's hit took.

``fg.capped(...)(blueprint)`` caps every view of a blueprint (and of the blueprints nested in
it), each route counted on its own, or with ``shared=True`` all of them on one budget. As in
Flask-Limiter, a blueprint's cap replaces the limits around it (the default limits, an
enclosing blueprint's cap) unless made with ``defaults=True``; it is decided in the same hit
as the view's own cap, its rules named ``bp.<blueprint>.<rule id>``. ``fg.exempt(blueprint)``
exempts every view of it from the default limits and the caps of the blueprints around it.

State lives in ``app.extensions["freqguard"]``, so one ``FreqGuard`` serves several apps.
Denials answer 429 with an RFC 9457 problem body, unless the app has its own handler for
``CapExceeded`` (Flask-Limiter's ``on_breach``); the rate-limit headers are added to either.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar, cast, overload

from freqguard.errors import extra_missing

try:  # the extra named (an ImportError saying how to install it)
    from flask import Blueprint, Flask, Response, after_this_request, current_app, g, request
except ModuleNotFoundError as missing:
    raise extra_missing(missing, "flask", __name__) from missing

from freqguard.backends.urls import backend_from_url
from freqguard.decision import Decision
from freqguard.errors import CapExceeded, ConfigError, shown
from freqguard.guard import Guard, not_a_guard
from freqguard.headers import check_profile
from freqguard.integrations._decide import Decider, Route
from freqguard.integrations._flask_application import SETTING, application_route, counted
from freqguard.integrations._flask_caps import (
    BlueprintCap,
    Capping,
    Deduct,
    FlaskViewCap,
    Made,
    check_not_both,
    check_view,
    deducted,
    give_back,
    route_of,
    run_over,
    view_cap,
)
from freqguard.integrations._flask_errors import (
    add_headers,
    decided,
    register_handlers,
    warn_unseen,
)
from freqguard.integrations._flask_habits import (
    check_limited,
    check_once,
    check_settings,
    check_started,
    default_limits,
    refuse_attribute,
    refuse_exempt,
    refuse_theirs,
    remote_address,
    the_app,
)
from freqguard.integrations._flask_named import NamedBudgets
from freqguard.integrations._held import HeldBody, leasing, release_each
from freqguard.integrations._http import BadRequest, KeyFunc, SkipRequest, client_ip, header
from freqguard.integrations._methods import view_methods
from freqguard.integrations._request import check_key
from freqguard.integrations._rule_items import check_cost, rule_items
from freqguard.integrations._settings import backend_url, configured
from freqguard.integrations.wsgi import request_info
from freqguard.rates import Rate
from freqguard.rules import Rule, check_name

__all__ = ["BadRequest", "FreqGuard", "SkipRequest", "client_ip", "header", "remote_address"]


P = ParamSpec("P")
R = TypeVar("R")


_UNSEEN: Any = object()  # an endpoint whose cap is not found yet


@dataclass
class _State:
    guard: Guard
    decider: Decider  # registers each route's policy once on this app's guard
    defaults: tuple[Rate | Rule, ...]
    application: Route | None  # FREQGUARD_APPLICATION_LIMITS', one budget for the app
    enabled: bool = True
    routes: dict[str, Route | None] = field(default_factory=dict)  # by endpoint, built once
    caps: dict[str, FlaskViewCap | None] = field(default_factory=dict)  # the views', alike
    owner: object = None  # the FreqGuard that set the app up (its hooks hit this state)
    unseen: bool = False  # RATELIMIT_DEFAULT, no freqguard limit at init_app: check again


class FreqGuard:
    """The Flask extension.

    Args:
        app: the app (first, or as ``app=``), or None to call :meth:`init_app` later.
        guard: a Guard to use (default: one on ``FREQGUARD_BACKEND``).
        key: the default key function (default: :func:`remote_address`).

    Attributes:
        enabled: False switches off every cap of the apps it serves (``limiter.enabled``).

    Raises:
        ConfigError: an app that is not a Flask app (a key function first, as in
            Flask-Limiter's ``Limiter(get_remote_address, app=app)``), or one of
            ``Limiter``'s arguments (``default_limits=``), naming freqguard's way; what
            :meth:`init_app` raises. ``fg.limit`` and ``fg.shared_limit`` (Flask-Limiter's)
            are an ``AttributeError`` naming :meth:`capped`.
    """

    def __init__(
        self,
        app: Flask | None = None,
        /,
        *,
        guard: Guard | None = None,
        key: KeyFunc | None = None,
        **theirs: Flask,  # app=, or Limiter's arguments: refused naming ours (and by mypy)
    ) -> None:
        app = the_app(app, theirs)
        if guard is not None and not isinstance(guard, Guard):  # an AsyncGuard: never awaited
            raise not_a_guard(guard, "FreqGuard", "a Guard (Flask's requests are not awaited)")
        self._guard = guard
        self._key: KeyFunc = remote_address if key is None else check_key(key, "FreqGuard")
        self._named = NamedBudgets()  # each name= budget's views, rates and keys
        self._made: list[Made] = []  # the views capped, to find one capped over its route
        self._apps: weakref.WeakSet[Flask] = weakref.WeakSet()  # set up, for check_started
        self.enabled = True  # False: every app's caps off (as FREQGUARD_ENABLED = False)
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Set up ``app``.

        Raises:
            ConfigError: for an app set up already (its requests would be hit twice), a bad
                ``FREQGUARD_DEFAULT_LIMITS``, header profile, backend or configuration file,
                ``FREQGUARD_CONFIG`` with ``FREQGUARD_BACKEND`` or a guard, or a route whose
                caps cannot be decided together (see :meth:`capped`; checked again at the
                first request, with ``RATELIMIT_DEFAULT`` beside no freqguard limit by then).
        """
        check_once(app, self)
        enabled = check_settings(app.config)
        guard = self._guard
        if guard is None:
            config, url = configured(app.config), app.config.get("FREQGUARD_BACKEND", "memory://")
            guard = Guard(backend_from_url(backend_url(url))) if config is None else config.guard()
        for made_by in ("FREQGUARD_CONFIG", "FREQGUARD_BACKEND"):
            if self._guard is not None and made_by in app.config:
                raise ConfigError(f"{made_by} makes the guard: pass guard= or it, not both")
        profile = check_profile(app.config.get("FREQGUARD_HEADERS", "ietf"), "FREQGUARD_HEADERS")
        defaults = default_limits(app.config.get("FREQGUARD_DEFAULT_LIMITS"), self._key)
        whole = application_route(app.config.get(SETTING), self._key)
        unseen = check_limited(app, guard, self._made)  # else at the first request
        decider = Decider(guard, (), profile, self._named.registrar(guard))
        state = _State(guard, decider, defaults, whole, enabled, owner=self, unseen=unseen)
        self._routes(state, app)  # checked now, built at the first request
        app.extensions["freqguard"] = state
        self._apps.add(app)
        app.before_request(self._before)
        app.after_request(self._after)
        app.teardown_request(self._give_back)
        register_handlers(app)  # unless the app has its own, registered before or after

    if not TYPE_CHECKING:  # mypy refuses them itself

        def __getattr__(self, name: str) -> NoReturn:  # Flask-Limiter's limit(), say
            refuse_attribute(self, name)

    @staticmethod
    def _state() -> _State:
        state: _State = current_app.extensions["freqguard"]
        return state

    def _routes(self, state: _State, app: Flask) -> dict[str, Route | None]:
        """Every endpoint's route, by endpoint."""
        return {endpoint: self._route(state, app, endpoint) for endpoint in app.view_functions}

    def _route(self, state: _State, app: Flask, endpoint: str) -> Route | None:
        """The endpoint's route, its default limits keyed by the extension's key."""
        return route_of(app, endpoint, self._key, state.defaults, self._made)

    def _hit(self, route: Route, deduct: Deduct | None = None) -> None:
        """Decide ``route`` for this request (a denial raises CapExceeded, answered 429);
        with ``deduct``, its hit is refunded once the response is made, unless ``deduct``
        accepts the response."""
        state = self._state()
        if not (state.enabled and self.enabled):  # FREQGUARD_ENABLED = False, fg.enabled
            return
        info = request_info(request.environ, request.view_args or {})
        try:
            ctx = state.decider.prepare(route, info)  # a BadRequest goes to its handler
        except SkipRequest:  # header(..., missing="skip"): this request goes uncapped
            return
        held: list[Decision] = g.setdefault("freqguard_leases", [])  # given back at teardown
        decision = decided(leasing(state.guard, held), route, ctx)
        decisions: list[Decision] = g.setdefault("freqguard_decisions", [])
        if not decision.allowed:
            give_back(state.guard, decisions)
            decisions.append(decision)
            raise CapExceeded(decision)
        decisions.append(decision)
        if deduct is not None:
            after_this_request(functools.partial(deducted, state.guard, decision, deduct))

    def _before(self) -> None:
        endpoint = request.endpoint
        if endpoint is None:
            return
        state = self._state()
        if not state.routes:  # the first request: setup is over, every route is known now
            if state.unseen:  # RATELIMIT_DEFAULT: a freqguard limit by now, or refused
                state.unseen = check_limited(current_app, state.guard, self._made, True)
            state.routes = self._routes(state, current_app)
            warn_unseen(current_app)  # and every error handler
        if endpoint not in state.routes:
            state.routes[endpoint] = self._route(state, current_app, endpoint)
        route = state.routes[endpoint]
        cap = state.caps.get(endpoint, _UNSEEN)
        if cap is _UNSEEN:  # the view's cap, found once; one over the route wrapped around
            cap = view_cap(current_app, endpoint, self._made)  # the view before it is noted
            run_over(current_app, endpoint, cap)  # (a request meanwhile finds it again)
            state.caps[endpoint] = cap
        if route is not None:
            if cap is not None and not cap.in_view:
                g.freqguard_cap = cap  # decided here, with the route's limits
            self._hit(route)
        if state.application is not None and counted(current_app, endpoint):
            self._hit(state.application)  # the app's budget: a refusal gives the route's back

    def _after(self, response: Response) -> Response:
        decisions: list[Decision] = g.get("freqguard_decisions", [])
        if decisions:  # every rule the request met, nearest exhaustion first (or the view's own)
            add_headers(response, decisions, self._state().decider.profile)
        held: list[Decision] = g.get("freqguard_leases", [])
        if held and response.is_streamed:
            # a streamed body is sent after the request's teardown: in flight until the
            # server closes the response (deduct_when's uncounted are refunded then)
            guard, given = self._state().guard, g.pop("freqguard_leases")
            uncounted = g.get("freqguard_uncounted", [])
            g.freqguard_streamed = given  # the teardown's, should the response be dropped
            # given back when the server closes the body or the response, whichever first,
            # once (werkzeug skips call_on_close when the body's close raises, send_file's
            # body passes by close, a later hook may resend it or wrap it: Flask-Compress)
            body = cast("Iterable[bytes]", response.response)
            response.response = HeldBody(body, lambda: release_each(guard, given, uncounted))
            response.call_on_close(lambda: release_each(guard, given, uncounted))
        return response

    def _give_back(self, error: BaseException | None) -> None:
        """The leases the request took (a policy with a concurrency rule), given back once
        it has been answered, however (a streamed answer's when its body is closed; with
        ``error``, a later ``after_request`` failed, Flask drops it unclosed: now)."""
        guard, uncounted = self._state().guard, g.get("freqguard_uncounted", ())
        release_each(guard, g.pop("freqguard_leases", []), uncounted)
        if error is not None:
            release_each(guard, g.pop("freqguard_streamed", []), uncounted)

    def capped(
        self,
        rule: str | Rule | Sequence[str | Rule],
        *,
        key: KeyFunc | None = None,
        cost: int | None = None,
        name: str | None = None,
        shared: bool = False,
        defaults: bool = False,
        methods: Iterable[str] | None = None,
        deduct_when: Deduct | None = None,
        **theirs: NoReturn,  # Flask-Limiter's: refused naming ours (and by mypy)
    ) -> Capping:
        """Cap one view, ``@fg.capped("5/minute")`` directly under ``@app.route(...)``, or
        every view of a blueprint, ``fg.capped("100/hour")(blueprint)``.

        A view's cap is decided with the route's default limits (or its blueprints' caps),
        in one hit, before the view runs. Called outside its own route (from another view),
        the view is capped on its own.

        A blueprint's cap holds for every view of it, those added later and those of the
        blueprints nested in it (``parent.child.view``), wherever it is registered (each
        registration, ``name="v2"``, its own routes). It replaces the limits around it: the
        default limits, or the cap of a blueprint it is nested in (unless ``defaults=True``).
        A view's own cap and ``@fg.exempt`` still hold.

        Args:
            rule: rates (``"5/minute; 100/day"``), keyed by the key's dimensions, or Rules
                (keyed by their own ``by``; one with ``rate_for`` decides a tier per
                request, from the values the key function gives), or a list of them.
            key: the key function (default: the extension's).
            cost: what one request costs, charged to every cap of its hit (default: the
                blueprint's for a view without one, else 1); a view's beats its blueprint's.
            name: a budget of its own, shared by every view given that name (one set of
                rates), decided when the view runs, apart from the route's default limits
                (whose hit is given back if it refuses). Not for a blueprint: ``shared``.
            shared: a blueprint's views share one budget (policy
                ``flask-blueprint.<registered name>``) instead of one per route.
            defaults: a blueprint's cap adds to the limits around it instead of replacing
                them (Flask-Limiter's ``override_defaults=False``).
            methods: a view's cap counts only requests of these methods (GET brings
                HEAD; none its route serves is a ConfigError), on a budget of its own
                decided when the view runs, as ``name``'s (Flask-Limiter's ``methods=``).
            deduct_when: a view's cap counts only the requests whose response it accepts
                (``lambda response: response.status_code == 401``: failed logins): the
                others' hits are refunded, exactly, once the response is made; on a budget
                of its own decided when the view runs, as ``name``'s (Flask-Limiter's).

        Raises:
            ConfigError: at decoration, for a rate that does not parse, a bad name, one name
                given two sets of rates, a bad cost or flag, ``shared`` or ``defaults`` on a
                view, ``name`` on a blueprint, a blueprint capped twice or once its app has
                served, or neither a view nor a Blueprint; at ``init_app`` or the first
                request, a shared cap over a route capped itself or ``methods`` it never serves.
        """
        refuse_theirs(theirs)
        rates = rule_items(rule, "fg.capped", policy=False)
        if name is not None:
            check_name("policy name", name)
        if cost is not None:
            check_cost(cost, rates)
        for flag, value in (("shared", shared), ("defaults", defaults)):
            if not isinstance(value, bool):
                raise ConfigError(f"{flag} must be True or False, got {shown(value)}")
        if shared and defaults:
            raise ConfigError(
                "shared=True with defaults=True: one hit on the blueprint's shared budget "
                "cannot also take each route's own default limits; choose one"
            )
        if key is not None:
            check_key(key, "capped")
        asked = BlueprintCap(rates, key or self._key, cost, shared, defaults)
        if deduct_when is not None and not callable(deduct_when):
            raise ConfigError(
                f"deduct_when must be a callable of the response, got {shown(deduct_when)}"
            )
        methods_, apps = view_methods(methods), self._apps
        return Capping(self._hit, asked, name, self._named, methods_, deduct_when, self._made, apps)

    @overload
    def exempt(self, target: Blueprint) -> Blueprint: ...

    @overload
    def exempt(self, target: Callable[P, R]) -> Callable[P, R]: ...

    def exempt(self, target: Any = None, **theirs: Any) -> Any:
        """Exempt a view, or every view of a Blueprint (and of those nested in it), from
        ``FREQGUARD_DEFAULT_LIMITS`` and the caps of the blueprints around it; its own
        ``capped`` still holds, and a nested blueprint's own cap.

        Raises:
            ConfigError: for something neither a view nor a Blueprint, a blueprint capped
                with ``defaults=True`` or on an app that has served, ``flags=``, ``exempt()``.
        """
        refuse_exempt(target, theirs)
        if isinstance(target, Blueprint):
            check_not_both(target, getattr(target, "_freqguard_cap", None), exempt=True)
            check_started(target, self._apps, "exempt")
        else:
            check_view("exempt", target)
        target._freqguard_exempt = True
        return target

    @staticmethod
    def guard_of(app: Flask) -> Guard:
        """The Guard an app uses."""
        state: _State = app.extensions["freqguard"]
        return state.guard
