"""Django REST framework: throttle classes on the Django integration's guard
(``FREQGUARD_BACKEND``), as DRF's own are written::

    class BurstThrottle(FreqGuardThrottle):
        rate = "10/minute; 1000/day"  # decided in one hit: give one throttle every rate

    class OrderView(APIView):
        throttle_classes = [BurstThrottle]

Usable in ``throttle_classes`` and in ``REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"]``. The
rate is the class's ``rate``, else ``DEFAULT_THROTTLE_RATES[scope]``, else
``FREQGUARD_DEFAULT_LIMITS``, read at every request (a setting or a ``rate`` changed takes
effect), counted on a sliding log or on the class's ``strategy`` (``"rolling-window"`` past
the log's 10,000); a scope whose rate is None throttles nothing, as in DRF. A rate set per
request (DRF's plan recipe: ``self.rate`` in ``allow_request``, or ``get_rate()``) decides
that request at exactly that rate, whatever other plans decide at once, on the scope's one
budget (:mod:`~freqguard.integrations._drf_routes`). Keys as DRF's:
the user's id when authenticated, else the client's address (behind ``trusted_proxies``). A
throttle with a ``scope`` is one budget for every view using it (policy ``drf.<scope>``);
without one each view has its own (``drf.<throttle class>.<view class>``), but for a class
with its own ``get_cache_key``, whose string is the budget on every view, as in DRF.
:class:`FreqGuardScopedThrottle`, :class:`FreqGuardAnonThrottle` and
:class:`FreqGuardUserThrottle` are DRF's ``ScopedRateThrottle``, ``AnonRateThrottle`` and
``UserRateThrottle``. A subclass's own ``get_cache_key(request, view)``, ``get_ident(request)``,
``get_rate()`` and ``THROTTLE_RATES`` are read as DRF reads them; what only DRF's own counting
reads (``timer``, ``cache``, ``parse_rate``, ``throttle_success``, ``throttle_failure``) is
refused as the class is made; ``cache_format`` is DRF's, for a ``get_cache_key`` ported.
``wait()`` is the decision's exact ``retry_after``; with the freqguard middleware installed
the response carries the rate-limit headers too.
``manage.py check`` reports a rate a throttle would read and cannot (``freqguard.E003``), and
a view whose throttle reads a scope with no rate (``freqguard.E004``), or whose
``throttle_classes`` names a throttle by a dotted path (``freqguard.E005``: DRF imports
paths only in ``DEFAULT_THROTTLE_CLASSES``), or whose throttle has neither a rate nor a
scope with no ``FREQGUARD_DEFAULT_LIMITS`` (``freqguard.E006``), before a request fails;
it names the views whose throttles ``get_throttles()`` chooses, which it cannot see
(``freqguard.I001``).
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any, ClassVar, cast

from rest_framework.exceptions import APIException, ParseError
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from freqguard.decision import Decision
from freqguard.errors import ConfigError
from freqguard.integrations._client_ip import hop_key
from freqguard.integrations._decide import Route
from freqguard.integrations._django_requests import give_back, notes_of, request_info
from freqguard.integrations._django_state import State, current
from freqguard.integrations._drf_rates import READ, drf_rates, given, parsed
from freqguard.integrations._drf_routes import route_of
from freqguard.integrations._drf_throttles import NOT_KEPT, NOT_READ, not_kept
from freqguard.integrations._request import KEY_MAKERS, KeyFunc, RequestInfo, SkipRequest, declared
from freqguard.integrations._rule_items import check_cost
from freqguard.integrations.django import client_ip, user_or
from freqguard.rates import Rate, parse_rates

__all__ = [
    "FreqGuardAnonThrottle",
    "FreqGuardScopedThrottle",
    "FreqGuardThrottle",
    "FreqGuardUserThrottle",
    "Unavailable",
    "drf_client",
    "drf_rates",
]


class Unavailable(APIException):
    """The store could not decide and the policy's ``on_error`` is ``"raise"``: 503."""

    status_code = 503
    default_detail = "The rate limiter's store is unavailable."
    default_code = "unavailable"


class FreqGuardThrottle(BaseThrottle):
    """A DRF throttle deciding on freqguard's guard.

    Attributes:
        rate: the rates (``"100/hour"``, several with ``;``, decided in one hit).
        scope: a budget shared by the views using it; its rate may come from
            ``DEFAULT_THROTTLE_RATES``.
        trusted_proxies: the proxies whose ``X-Forwarded-For`` is believed.
        cost: what one request costs.
        strategy: how its rates count (None: the sliding log, exact, up to 10,000 a
            rate; ``"rolling-window"`` past it).
    """

    rate: str | None = None
    scope: str | None = None
    strategy: str | None = None
    trusted_proxies: Sequence[str] = ()
    cost: int = 1
    THROTTLE_RATES: ClassVar[dict[str, str | None] | None] = None
    cache_format = "throttle_%(scope)s_%(ident)s"  # DRF's, for a get_cache_key ported

    def __init__(self) -> None:
        self.decision: Decision | None = None
        self._unfit = False  # the denial of a cost past the request's capacity

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse what only DRF's own counting reads (a ``timer``, a ``cache``...), naming
        freqguard's way: never a hook that quietly does nothing; and both key functions,
        freqguard's ``key()`` and DRF's ``get_cache_key()`` (which keys is not clear).

        Raises:
            ConfigError: a class that defines one, or both key functions.
        """
        super().__init_subclass__(**kwargs)
        own = cls.__mro__[: cls.__mro__.index(FreqGuardThrottle)]  # a mixin's too
        for name, instead in NOT_READ.items():
            if any(name in vars(klass) for klass in own):
                raise ConfigError(
                    f"{cls.__qualname__}.{name} is DRF's SimpleRateThrottle's, which "
                    f"freqguard's throttles do not read: {instead}"
                )
        if not hasattr(inspect.getattr_static(cls, "cost"), "__get__"):  # not a property
            rate = inspect.getattr_static(cls, "rate", None)  # its own rate, when it parses
            try:  # (one that does not is E003's)
                given = parse_rates(rate) if isinstance(rate, str) else ()
            except ConfigError:
                given = ()
            check_cost(cls.cost, given, f"{cls.__qualname__}.")  # read at each request: now
        if getattr(cls, "get_cache_key", None) is not None and cls.key.__module__ != __name__:
            raise ConfigError(
                f"{cls.__qualname__} defines both key() and get_cache_key(): keep one (key() "
                "is freqguard's key function, get_cache_key(request, view) DRF's)"
            )

    def key(self) -> KeyFunc:
        """The key function: :func:`~freqguard.integrations.django.user_or_ip`, the
        address found as DRF finds it (:func:`drf_client`), or by the class's own
        ``get_ident(request)``. A class's own ``get_cache_key(request, view)`` keys the
        request instead, as in DRF (None: not throttled)."""
        return user_or(self._address())

    def _address(self) -> KeyFunc:
        """The address of an anonymous request (dimension ``client``): the class's own
        ``get_ident``, else :func:`drf_client`'s."""
        if type(self).get_ident is not FreqGuardThrottle.get_ident:
            return declared(_own_ident, "client")
        return drf_client(self.trusted_proxies)

    def get_ident(self, request: Any) -> str:
        """The client's address as this throttle keys it (behind ``trusted_proxies``, or
        ``NUM_PROXIES``: :func:`drf_client`), for a ported ``get_cache_key``: DRF's own
        reads the whole ``X-Forwarded-For``, which any client writes."""
        found = drf_client(self.trusted_proxies)(
            request_info(getattr(request, "_request", request))
        )
        return str(found["client"])  # type: ignore[index]

    # DRF's counting's, read, set or called by habit in allow_request: named with our way
    num_requests, duration, history, now = map(not_kept, NOT_KEPT)
    timer, cache, parse_rate, throttle_success, throttle_failure = map(not_kept, NOT_READ)

    def rates(self) -> tuple[Rate, ...]:
        """The rates this throttle decides now (none: its scope's rate is None, and it
        throttles nothing).

        Raises:
            ConfigError: no rate given anywhere, or one that does not parse (naming where).
        """
        return self._given()[0]

    def _given(self) -> tuple[tuple[Rate, ...], str]:
        """The rates, and where they are given (named when two give one scope two)."""
        if self.rate is None and getattr(type(self), "get_rate", None) is not None:  # as DRF
            rate = self.get_rate()  # type: ignore[attr-defined]
            return (() if rate is None else parsed(rate, f"{_name(self)}.get_rate()")), (
                f"{_name(self)}.get_rate()"
            )
        table = self.THROTTLE_RATES  # the class's own, else the settings' (read each time)
        found = given(self.rate, self.scope, api_settings.DEFAULT_THROTTLE_RATES)
        if table is not None and self.rate is None and self.scope is not None:
            found = given(None, self.scope, table)
            where = f"{_name(self)}.THROTTLE_RATES[{self.scope!r}]"
            if found is None:
                raise ConfigError(f"{where} is not set: the class's table names no such scope")
            return ((), where) if found.text is None else (parsed(found.text, where), where)
        if found is not None and found.scope is None:  # the throttle's own
            return parsed(found.text, f"{type(self).__qualname__}.rate"), f"{_name(self)}.rate"
        if found is not None:
            where = f"DEFAULT_THROTTLE_RATES[{found.scope!r}]"
            if found.text is None:  # DRF: no throttling
                return (), where
            return parsed(found.text, where), where
        state = current()
        if state.settings.defaults:
            return state.settings.defaults, "FREQGUARD_DEFAULT_LIMITS"
        where = f"DEFAULT_THROTTLE_RATES[{self.scope!r}], " if self.scope else ""
        raise ConfigError(
            f"{type(self).__name__} has no rate: set its rate, {where}or FREQGUARD_DEFAULT_LIMITS"
        )

    def _route(self, state: State, view: Any) -> tuple[Route, str | None] | None:
        """The route of this throttle's rates now, and, for a rate per request, the text of
        its rates the hit carries (None: no rates)."""
        rates, where = self._given()
        return route_of(state, self, view, rates, where, self._keyed) if rates else None

    def _keyed(self) -> KeyFunc:
        """The route's key function: the class's own ``get_cache_key``, else :meth:`key`.

        Raises:
            ConfigError: a ``cache_format`` without a ``get_cache_key`` to read it. (A class
                defining both ``key()`` and ``get_cache_key()`` is refused as it is made.)
        """
        if getattr(type(self), "get_cache_key", None) is None:
            if type(self).cache_format != FreqGuardThrottle.cache_format:
                raise ConfigError(
                    f"{_name(self)}.cache_format is read by a get_cache_key(request, view) "
                    "of the class's own only, and it has none: define one, or drop it"
                )
            return self.key()
        return declared(_cache_key, "ident")

    def allow_request(self, request: Request, view: Any) -> bool:
        """Decide the request: True when admitted (or not throttled: a scope whose rate is
        None).

        Raises:
            ParseError: the key function refuses the request (400).
            Unavailable: the store failed and the policy's ``on_error`` is ``"raise"``.
            ConfigError: no rate, a rate that does not parse, or two throttles giving one
                scope two rates.
        """
        state = current()
        if not state.settings.enabled:
            return True
        found = self._route(state, view)
        if found is None:
            return True
        route, text = found
        hit = state.guard().hit  # a rate per request: carried in the hit, which its rules read
        hit = hit if text is None else functools.partial(hit, **cast(Any, {READ: text}))
        deciding = _DECIDING.set((self, view))  # for a key of the class's own methods
        try:
            answer = state.decider().decide(hit, route, request_info(request))
        finally:
            _DECIDING.reset(deciding)
        if answer.status == 400:
            raise ParseError(_detail(answer.body))
        if answer.status == 503:
            raise Unavailable()
        self.decision, self._unfit = answer.decision, answer.unfit
        if self.decision is None:  # a key function skipped the request
            return True
        notes = notes_of(request)
        notes.note(answer)
        if not self.decision.allowed:  # a refused request counts nothing (the middleware's
            give_back(notes)  # hit of the default limits, given back)
        return self.decision.allowed

    def wait(self) -> float | None:
        """Seconds until the request would be admitted: the decision's ``retry_after``
        (None for a cost past the request's capacity: no retry would be)."""
        if self.decision is None or self.decision.allowed or self._unfit:
            return None
        return self.decision.retry_after


class FreqGuardScopedThrottle(FreqGuardThrottle):
    """DRF's ``ScopedRateThrottle``: one throttle class for every view, each view's budget
    named by its ``throttle_scope`` (policy ``drf.<scope>``, shared by the views naming
    it), at ``DEFAULT_THROTTLE_RATES[scope]``. A view without a ``throttle_scope`` is not
    throttled.

    Attributes:
        scope_attr: the view's attribute that names the scope.
    """

    scope_attr: str = "throttle_scope"

    def allow_request(self, request: Request, view: Any) -> bool:
        """Decide the request on its view's scope (True, not throttled, without one)."""
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        return super().allow_request(request, view)


class FreqGuardAnonThrottle(FreqGuardThrottle):
    """DRF's ``AnonRateThrottle``: anonymous requests by the client's address, at
    ``DEFAULT_THROTTLE_RATES["anon"]``; an authenticated user's are not throttled."""

    scope = "anon"

    def key(self) -> KeyFunc:
        """The client's address (behind ``trusted_proxies``); an authenticated request is
        skipped."""
        address = self._address()

        def anonymous(request: RequestInfo) -> dict[str, object]:
            user = getattr(request.raw, "user", None)
            if user is not None and user.is_authenticated:
                raise SkipRequest("authenticated")
            return {"ident": f"ip:{address(request)['client']}"}  # type: ignore[index]

        return anonymous


class FreqGuardUserThrottle(FreqGuardThrottle):
    """DRF's ``UserRateThrottle``: each user by their id (anonymous requests by address),
    at ``DEFAULT_THROTTLE_RATES["user"]``."""

    scope = "user"


def drf_client(trusted_proxies: Sequence[str] = ()) -> KeyFunc:
    """The client's address of an anonymous request (dimension ``client``), found as DRF's
    throttles find it where that is safe: behind ``trusted_proxies`` when given
    (:func:`~freqguard.integrations.django.client_ip`); else, when DRF's ``NUM_PROXIES``
    is set (read at each request, as DRF reads it), the address that many hops from the
    right of ``X-Forwarded-For`` (the peer for 0, without the header, or where that hop is
    not an address), keyed as ``client_ip`` keys one (an IPv6 client by its /64); else the
    peer.
    Without ``NUM_PROXIES`` DRF reads the whole header, which any client writes as it
    likes: freqguard does not."""
    if trusted_proxies:
        return client_ip(trusted_proxies)
    peer = client_ip()

    def key(request: RequestInfo) -> object:
        proxies = api_settings.NUM_PROXIES
        forwarded = request.headers.get("x-forwarded-for")
        if isinstance(proxies, int) and proxies > 0 and forwarded:
            hops = forwarded.split(",")
            found = hop_key(hops[-min(proxies, len(hops))])
            if found is not None:  # keyed as client_ip keys one (an IPv6 client's /64)
                return {"client": found}
        return peer(request)  # no address there: never a key of a client's own text

    return declared(key, "client")


KEY_MAKERS.append(drf_client)


#: The throttle deciding in this thread or task, and its view: what a key of the class's
#: own ``get_cache_key`` or ``get_ident`` calls them with.
_DECIDING: ContextVar[tuple[FreqGuardThrottle, Any]] = ContextVar("freqguard_drf_deciding")


def _cache_key(request: RequestInfo) -> dict[str, object]:
    throttle, view = _DECIDING.get()
    found = throttle.get_cache_key(request.raw, view)  # type: ignore[attr-defined]
    if found is None:  # DRF: not throttled
        raise SkipRequest("get_cache_key() answered None")
    return {"ident": str(found)}


def _own_ident(request: RequestInfo) -> dict[str, object]:
    throttle, _ = _DECIDING.get()
    return {"client": str(throttle.get_ident(request.raw))}


def _name(throttle: object) -> str:
    return f"{type(throttle).__module__}.{type(throttle).__qualname__}"


def _detail(body: bytes) -> str:
    detail: str = json.loads(body)["detail"]
    return detail
