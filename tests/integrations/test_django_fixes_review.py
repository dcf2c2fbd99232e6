"""An adversarial review of the commit "A DRF and django-ratelimit user's first hour": a DRF
throttle's refusal giving back the middleware's hit, ``@exempt`` on a ViewSet and under
``@api_view``, ``peek``/``hit(request, name)``, ``get_ident`` behind proxies, and the
checks ``freqguard.W006``/``W007``. Each test fails on that commit for the reason its
docstring gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site
from tests.integrations.django_rig import site_guard

django_site.setup()

from django.core import checks  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import Client, RequestFactory, override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from django.utils.decorators import method_decorator  # noqa: E402
from rest_framework.decorators import api_view, throttle_classes  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard import Guard, ManualClock, MemoryBackend, Rule  # noqa: E402
from freqguard.integrations import django as fg_django  # noqa: E402
from freqguard.integrations.django import capped, client_ip, exempt  # noqa: E402
from freqguard.integrations.drf import FreqGuardThrottle  # noqa: E402

SITE = django_site.SETTINGS


@pytest.fixture
def guard(clock: ManualClock) -> Iterator[Guard]:
    """The site's guard, on the test's clock."""
    yield from site_guard(clock)


# --- the views the tests route to -----------------------------------------------------


class OnePerMinute(FreqGuardThrottle):
    rate = "1/minute"


class ManyPerMinute(FreqGuardThrottle):
    rate = "100/minute"


@capped("2/hour", name="review-named-orders")
class NamedOrders(APIView):
    """A named cap (decided when the view runs, not by the middleware) and a throttle."""

    throttle_classes = (OnePerMinute,)

    def get(self, request: Request) -> Response:
        return Response("orders")


class Writable(APIView):
    """A base view: its POST is not exempt."""

    throttle_classes = ()

    def post(self, request: Request) -> Response:
        return Response("posted")


class ReadExempt(Writable):
    """Its own GET exempt (``method_decorator(exempt)``), its POST inherited, not exempt."""

    @method_decorator(exempt)
    def get(self, request: Request) -> Response:
        return Response("read")


def _status_endpoint(exempted: bool) -> Any:
    """One of two ``@api_view`` functions a module builds alike (a factory): same module,
    same name; only the public one is ``@exempt``."""

    def status(request: Request) -> Response:
        return Response("status")

    marked = exempt(status) if exempted else status
    return api_view(["GET"])(throttle_classes([ManyPerMinute])(marked))


public_status = _status_endpoint(exempted=True)
private_status = _status_endpoint(exempted=False)


@capped("1/minute", key=client_ip(), name="review-otp")
def otp(request: HttpRequest) -> HttpResponse:
    return HttpResponse("otp")


class Urls:
    urlpatterns: ClassVar[list[Any]] = [
        path("named-orders", NamedOrders.as_view(), name="named-orders"),
        path("read-exempt", ReadExempt.as_view(), name="read-exempt"),
        path("public-status", public_status, name="public-status"),
        path("private-status", private_status, name="private-status"),
        path("otp", otp, name="otp"),
        path("otp-free", lambda request: HttpResponse("free"), name="otp-free"),
    ]


def _site(**more: Any) -> Any:
    return override_settings(ROOT_URLCONF=Urls, MIDDLEWARE=SITE["MIDDLEWARE"], **more)


def _codes(*paths: str, method: str = "get") -> list[int]:
    client = Client()
    return [getattr(client, method)(p).status_code for p in paths]


# --- a throttle's refusal gives back what the request took -----------------------------


def test_a_throttles_refusal_gives_back_a_named_caps_hit(guard: Guard, clock: ManualClock) -> None:
    """docs/django.md "Which requests count": "A refused request (429) counts nothing: not
    against the default limits, nor a cap"; the commit gives back, on a DRF throttle's
    refusal, what the middleware's hit took (``notes.taken``). A ``@capped("2/hour",
    name=...)`` APIView (a named cap is decided by the view's wrapper, not the middleware)
    with a throttle of 1/minute: the second request is admitted by the cap, then refused
    by the throttle (429), and the cap's hit is kept: the wrapper never notes what it took
    (only the middleware calls ``taken``). A minute later the throttle would admit the
    client, but the cap, spent by the refused request, refuses it for the hour.
    Expected: the refused request counts nothing, so the third request is admitted."""
    with _site():
        assert _codes("/named-orders", "/named-orders") == [200, 429]
        clock.advance(61)
        assert _codes("/named-orders") == [200]


# --- @exempt -------------------------------------------------------------------------


def test_an_exempt_handler_does_not_exempt_an_inherited_one(guard: Guard) -> None:
    """The commit exempts a class-based view when "every handler its class defines" is
    marked (``_django_state._exempt`` reads ``vars(owner)``). ``ReadExempt`` defines only
    its GET, ``@method_decorator(exempt)``, and inherits an unmarked POST from its base:
    the POST, never exempted, escapes ``FREQGUARD_DEFAULT_LIMITS = "2/minute"`` too (four
    POSTs admitted). Expected: a handler the view serves but its class does not define
    (inherited) counts as one not marked: the third POST is refused."""
    with _site(FREQGUARD_DEFAULT_LIMITS="2/minute"):
        assert _codes(*["/read-exempt"] * 3, method="post") == [200, 200, 429]


def test_exempt_under_api_view_marks_only_the_function_it_decorated(guard: Guard) -> None:
    """``@exempt`` under ``@api_view`` is found by the wrapped class's module and name
    (``_django_state.EXEMPT``). Two ``@api_view`` functions a module builds alike (a
    factory: one module, one ``__name__``, ``status``), only the public one ``@exempt``:
    the private one is exempt too, its default limits (2 a minute) gone: three requests
    admitted, at its throttle's 100 a minute. DRF's class holds the function it wraps (its handler's
    closure), which the mark is on. Expected: the unmarked view keeps its default limits
    (the third refused), while the marked one is exempt (four admitted)."""
    with _site(FREQGUARD_DEFAULT_LIMITS="2/minute"):
        assert _codes(*["/public-status"] * 4) == [200, 200, 200, 200]
        assert _codes(*["/private-status"] * 3) == [200, 200, 429]


# --- peek and hit --------------------------------------------------------------------


def test_hit_counts_nothing_when_freqguard_is_switched_off(guard: Guard) -> None:
    """django.md: ``FREQGUARD_ENABLED = False`` "switches every cap off" (django-ratelimit's
    ``RATELIMIT_ENABLE = False``, under which ``is_ratelimited`` answers False and counts
    nothing). ``hit(request, "review-otp")``, the page's ``is_ratelimited(...,
    increment=True)``, still counts and refuses: the second call's decision is a denial,
    so a login view that turns a client away on ``not hit(...).allowed`` does so with
    freqguard switched off. Expected: admitted every time while switched off."""
    request = RequestFactory().get("/")
    with override_settings(FREQGUARD_ENABLED=False):
        found = [fg_django.hit(request, "review-otp").allowed for _ in range(3)]
    assert found == [True, True, True]


def test_peek_agrees_with_the_cap_when_freqguard_is_switched_off(guard: Guard) -> None:
    """With ``FREQGUARD_ENABLED = False`` the cap named ``review-otp`` admits every request
    (its view answers 200 each time), but ``peek(request, "review-otp")`` answers from the
    store: after one counted hit (made while on) the peek says the next is refused, though
    the view admits it. django-ratelimit's ``is_ratelimited`` answers False when switched
    off. Expected: the peek says admitted, as the cap does."""
    request = RequestFactory().get("/")
    assert fg_django.hit(request, "review-otp").allowed
    with override_settings(FREQGUARD_ENABLED=False), _site():
        assert _codes("/otp", "/otp") == [200, 200]
        assert fg_django.peek(request, "review-otp").allowed


# --- the checks ----------------------------------------------------------------------


def _messages(**settings: Any) -> list[str]:
    with override_settings(**settings):
        return [
            f"{m.id}: {m.msg}"
            for m in checks.run_checks()
            if m.id is not None and m.id.startswith("freqguard.")
        ]


def test_w006_is_not_said_when_drf_throttles_read_the_default_limits() -> None:
    """drf.py: a throttle's rate is its ``rate``, else ``DEFAULT_THROTTLE_RATES[scope]``,
    "else ``FREQGUARD_DEFAULT_LIMITS``". A DRF-only site whose throttles take their rate
    from ``FREQGUARD_DEFAULT_LIMITS`` (``DEFAULT_THROTTLE_CLASSES`` a freqguard throttle
    with no rate), without the middleware, is told by ``freqguard.W006`` that "the default
    limits cap no view without it (add it ...)": false (every throttled view is capped at
    them), and adding the middleware would count each request twice on them. Expected: no
    W006 while freqguard's throttles read the default limits."""
    rest = {
        **SITE["REST_FRAMEWORK"],
        "DEFAULT_THROTTLE_CLASSES": ["freqguard.integrations.drf.FreqGuardThrottle"],
    }
    said = _messages(
        MIDDLEWARE=["tests.integrations.django_users.HeaderUserMiddleware"],
        FREQGUARD_DEFAULT_LIMITS="100/minute",
        REST_FRAMEWORK=rest,
    )
    assert not [m for m in said if m.startswith("freqguard.W006")], said


class OnePerMinuteToo(FreqGuardThrottle):
    rate = "1/minute"


@capped(Rule("5 concurrent", by="client", lease=60))
class LeasedOrders(APIView):
    """A cap with a concurrency rule (merged with the default limits: one policy, taken
    as a lease by the middleware) and a throttle."""

    throttle_classes = (OnePerMinuteToo,)

    def get(self, request: Request) -> Response:
        return Response("orders")


Urls.urlpatterns.append(path("leased-orders", LeasedOrders.as_view(), name="leased-orders"))


def test_a_throttles_refusal_gives_back_the_default_limits_taken_with_a_lease(
    guard: Guard, clock: ManualClock
) -> None:
    """The commit's case (a throttle's refusal gives back the default limits' hit), on a
    view whose own ``@capped`` has a concurrency rule: the middleware decides the default
    limits and the cap in one policy, taken as a lease (``held``, which ``taken`` leaves
    out), so the throttle's refusal gives nothing back; the lease's release after the
    answer frees the slot, not the default limits' count. Default limits of 3 an hour,
    a throttle of 1 a minute: two refused requests spend the default limits, and a minute
    later, the throttle admitting, the default limits refuse for the hour. Expected: as
    without the concurrency rule (the commit's own test), the fourth request admitted."""
    with _site(FREQGUARD_DEFAULT_LIMITS="3/hour"):
        assert _codes("/leased-orders", "/leased-orders", "/leased-orders") == [200, 429, 429]
        clock.advance(61)
        assert _codes("/leased-orders") == [200]


class SiteGuardMiddleware(fg_django.FreqGuardMiddleware):
    """A site's own middleware made from freqguard's (a subclass: Django loads it by its
    dotted path, ``tests.integrations.test_review_django_fixes.SiteGuardMiddleware``)."""


#: freqguard's middleware under a site module's name (``from freqguard.integrations.django
#: import FreqGuardMiddleware`` in ``mysite/middleware.py``)
FreqGuardMiddleware = fg_django.FreqGuardMiddleware
_HERE = __name__
_AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"


def test_w006_is_not_said_for_a_subclass_of_the_middleware() -> None:
    """``freqguard.W006`` looks for the exact text
    ``"freqguard.integrations.django.FreqGuardMiddleware"`` in ``MIDDLEWARE``. A site whose
    ``MIDDLEWARE`` names a subclass of it (``SiteGuardMiddleware``), which applies the
    default limits (shown: the third request refused), is told they "cap no view without
    it (add it ...)": adding it would count every request twice. The project's own
    ``freqguard.E008`` check tells the middleware by its MRO (``_django_budgets._ours``: a
    subclass, or the class under another module's name). Expected: no W006."""
    middleware = [f"{_HERE}.SiteGuardMiddleware"]
    with override_settings(
        FREQGUARD_BACKEND=Guard(MemoryBackend(ManualClock(0))),
        ROOT_URLCONF=Urls,
        MIDDLEWARE=middleware,
        FREQGUARD_DEFAULT_LIMITS="2/minute",
    ):
        assert _codes("/otp-free", "/otp-free", "/otp-free") == [200, 200, 429]
    fg_django.close()
    said = _messages(MIDDLEWARE=middleware, FREQGUARD_DEFAULT_LIMITS="2/minute")
    assert not [m for m in said if m.startswith("freqguard.W006")], said


def test_w007_is_said_for_the_middleware_under_another_modules_name() -> None:
    """``freqguard.W007`` (the middleware before ``AuthenticationMiddleware`` while
    ``FREQGUARD_KEY`` reads the user) compares the exact text of freqguard's path. The
    same class imported into a site module and named there in ``MIDDLEWARE`` (as
    ``_django_budgets._ours`` allows, "the class under another module's name"), placed
    before ``AuthenticationMiddleware`` with ``FREQGUARD_KEY = user_or_ip()``: every user
    keyed as anonymous, and no W007. Expected: W007, as for freqguard's own path."""
    middleware = [
        "django.contrib.sessions.middleware.SessionMiddleware",
        f"{_HERE}.FreqGuardMiddleware",
        _AUTH,
    ]
    said = _messages(
        MIDDLEWARE=middleware,
        FREQGUARD_KEY=fg_django.user_or_ip(),
        FREQGUARD_DEFAULT_LIMITS="100/minute",
    )
    assert [m for m in said if m.startswith("freqguard.W007")], said


class PlanRate(FreqGuardThrottle):
    """A rate read from the view's plan, as a property (a rate is read at each request);
    it reads an attribute the class forgot to set."""

    @property
    def rate(self) -> str:  # type: ignore[override]
        return str(self.plan_rate)  # type: ignore[attr-defined]


def test_an_attribute_error_inside_a_throttles_property_names_what_is_missing(
    guard: Guard,
) -> None:
    """The commit's ``__getattr__`` on freqguard's throttles turns every failed attribute
    lookup into ``not_kept``'s error. Python calls ``__getattr__`` also when a property
    raises ``AttributeError``: a ``rate`` property (a rate is read at every request, a
    property allowed) reading ``self.plan_rate``, which is not set, now fails with
    "'PlanRate' object has no attribute 'rate'" (the class plainly has one), the missing
    ``plan_rate`` no longer named; before the commit the error named ``plan_rate``.
    Expected: the error names ``plan_rate``."""
    made: type[APIView] = type(
        "View",
        (APIView,),
        {"throttle_classes": [PlanRate], "get": lambda self, request: Response("ok")},
    )
    view = made.as_view()
    with pytest.raises(AttributeError, match="plan_rate"):
        view(RequestFactory().get("/"))


class TwoPerHour(FreqGuardThrottle):
    rate = "2/hour"


class ThrottledThenCapped(APIView):
    """A throttle (decided in DRF's ``initial``), then a method's cap (decided when the
    handler runs, after it)."""

    throttle_classes = (TwoPerHour,)

    @method_decorator(capped("1/minute"))
    def get(self, request: Request) -> Response:
        return Response("ok")


Urls.urlpatterns.append(
    path("throttled-then-capped", ThrottledThenCapped.as_view(), name="throttled-then-capped")
)


def test_a_caps_refusal_keeps_the_throttles_hit_as_drf_does(
    guard: Guard, clock: ManualClock
) -> None:
    """A refused request counts nothing (django.md, "Which requests count"); ``give_back``
    gives back "what earlier hits took". A DRF throttle of 2 an hour admits a request, then
    the handler's own cap (``@method_decorator(capped("1/minute"))``) refuses it (429): the
    throttle's hit is kept. Kept on purpose, as DRF's throttles do (each counts what it
    admits: the "two throttles" row of drf.md): the page did not say so, and now does."""
    with _site():
        assert _codes("/throttled-then-capped", "/throttled-then-capped") == [200, 429]
        clock.advance(61)
        assert _codes("/throttled-then-capped") == [429]  # the throttle's: 2 an hour
    page = (Path(__file__).resolve().parents[2] / "docs" / "django.md").read_text()
    assert "A DRF throttle counts each request it admits" in page


@capped("1/minute", key=fg_django.user_or_ip())
def by_user(request: HttpRequest) -> HttpResponse:
    return HttpResponse("user")


Urls.urlpatterns.append(path("by-user", by_user, name="by-user"))


def test_w007_is_said_for_a_caps_key_that_reads_the_user(guard: Guard) -> None:
    """docs/django.md: place the middleware "after ``AuthenticationMiddleware`` when a key
    reads the user". The middleware decides a view's ``@capped`` (unnamed, blocking, every
    method) itself, keyed by the cap's key: a ``@capped("1/minute", key=user_or_ip())``
    view with the middleware before the user is known keys every user by address (shown
    with the site's user middleware placed after freqguard's: users ann and bob from one
    address, 200 then 429). ``freqguard.W007`` reads only ``FREQGUARD_KEY``, so says
    nothing here. Expected: W007 for a cap the middleware decides whose key reads the
    user."""
    users = "tests.integrations.django_users.HeaderUserMiddleware"
    middleware = ["freqguard.integrations.django.FreqGuardMiddleware", users]
    with override_settings(ROOT_URLCONF=Urls, MIDDLEWARE=middleware):
        codes = [Client(headers={"x-user": u}).get("/by-user").status_code for u in ("ann", "bob")]
    assert codes == [200, 429]
    middleware = [
        "django.contrib.sessions.middleware.SessionMiddleware",
        "freqguard.integrations.django.FreqGuardMiddleware",
        _AUTH,
    ]
    said = _messages(ROOT_URLCONF=Urls, MIDDLEWARE=middleware)
    assert [m for m in said if m.startswith("freqguard.W007")], said
