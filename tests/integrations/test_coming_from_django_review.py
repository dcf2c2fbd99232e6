"""A DRF and django-ratelimit user's review of docs/coming-from/drf.md,
docs/coming-from/django-ratelimit.md and docs/django.md: each test is an idiom they carry
over, or a sentence of the pages, where freqguard answered otherwise than the page (or the
peer) said, and no page said why. Each failed on the code it was written against; where
freqguard differs on purpose, the test holds the page saying so and the way it names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
pytest.importorskip("django_ratelimit", reason="django-ratelimit is not installed")
from tests.integrations import django_site
from tests.integrations.django_rig import site_guard

django_site.setup()
import types  # noqa: E402

import django_ratelimit.core  # noqa: E402
from django.core import checks  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import Client, RequestFactory, override_settings  # noqa: E402
from django.urls import include, path  # noqa: E402
from django_ratelimit.core import is_ratelimited  # noqa: E402
from django_ratelimit.decorators import ratelimit  # noqa: E402
from rest_framework import throttling, viewsets  # noqa: E402
from rest_framework.authentication import BaseAuthentication  # noqa: E402
from rest_framework.decorators import api_view, throttle_classes  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.routers import SimpleRouter  # noqa: E402
from rest_framework.test import APIRequestFactory  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard import Guard, ManualClock  # noqa: E402
from freqguard.integrations import django as fg_django  # noqa: E402
from freqguard.integrations.django import capped, client_ip, exempt, user_or_ip  # noqa: E402
from freqguard.integrations.drf import FreqGuardThrottle, FreqGuardUserThrottle  # noqa: E402
from tests.integrations.django_users import HeaderUser  # noqa: E402

SITE = django_site.SETTINGS
DJANGO_PAGE = Path(__file__).resolve().parents[2] / "docs" / "django.md"
RATELIMIT_PAGE = (
    Path(__file__).resolve().parents[2] / "docs" / "coming-from" / "django-ratelimit.md"
)
REST = SITE["REST_FRAMEWORK"]


@pytest.fixture
def guard(clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Guard]:
    """The site's guard on the test's clock; django-ratelimit's and DRF's on it too."""
    monkeypatch.setattr(django_ratelimit.core, "time", types.SimpleNamespace(time=clock.now))
    cache.clear()
    yield from site_guard(clock)


# --- the views the tests route to -----------------------------------------------------


class OnePerMinute(FreqGuardThrottle):
    rate = "1/minute"


class FivePerMinute(FreqGuardThrottle):
    rate = "5/minute"


class OrdersView(APIView):
    throttle_classes = (OnePerMinute,)

    def get(self, request: Request) -> Response:
        return Response("orders")


@exempt  # django.md: "@exempt the view (or the APIView class) to leave it to its throttles"
class ItemsViewSet(viewsets.ViewSet):
    throttle_classes = (FivePerMinute,)

    def list(self, request: Request) -> Response:
        return Response([])


@api_view(["GET"])  # DRF's order: @api_view first, its other decorators below it
@throttle_classes([FivePerMinute])
@exempt
def report(request: Request) -> Response:
    return Response("report")


@capped("2/m", key=client_ip())
def login(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@capped("2/m", key=client_ip(), name="one-login")
def named_login(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit(key="ip", rate="2/m")  # type: ignore[untyped-decorator]
def their_login(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


class TokenAuthentication(BaseAuthentication):
    """DRF authentication from an ``X-Token`` header (as TokenAuthentication, JWT): the
    user is DRF's ``request.user``; Django's ``request.user`` stays anonymous."""

    def authenticate(self, request: Any) -> tuple[HeaderUser, None] | None:
        token = request._request.headers.get("x-token")
        return (HeaderUser(token), None) if token else None


class Profile(APIView):
    authentication_classes = (TokenAuthentication,)
    throttle_classes = ()

    def get(self, request: Request) -> Response:
        return Response({"user": request.user.pk if request.user else None})


router = SimpleRouter()
router.register("items", ItemsViewSet, basename="items")


class Urls:
    urlpatterns: ClassVar[list[Any]] = [
        path("orders", OrdersView.as_view(), name="orders"),
        path("report", report, name="report"),
        path("login", login, name="login"),
        path("api/login", login, name="api-login"),
        path("named-login", named_login, name="named-login"),
        path("api/named-login", named_login, name="api-named-login"),
        path("their-login", their_login, name="their-login"),
        path("api/their-login", their_login, name="api-their-login"),
        path("profile", Profile.as_view(), name="profile"),
        path("", include(router.urls)),
    ]


def _site(**more: Any) -> Any:
    return override_settings(ROOT_URLCONF=Urls, MIDDLEWARE=SITE["MIDDLEWARE"], **more)


def _api(throttles: list[Any]) -> Any:
    """An APIView answering GET, throttled by ``throttles``."""

    def get(self: APIView, request: Request) -> Response:
        return Response("ok")

    made: type[APIView] = type("View", (APIView,), {"throttle_classes": throttles, "get": get})
    return made.as_view()


def _codes(*paths: str, **headers: str) -> list[int]:
    client = Client(headers=headers)
    return [client.get(p).status_code for p in paths]


# --- the tests ------------------------------------------------------------------------


def test_a_drf_throttles_refusal_is_not_counted_by_the_default_limits(
    guard: Guard, clock: ManualClock
) -> None:
    """docs/django.md, "Which requests count" (line 120): "A refused request (429) counts
    nothing: not against the default limits, nor a cap." A DRF view with a throttle of 1/minute,
    and ``FREQGUARD_DEFAULT_LIMITS = "3/hour"``: the throttle refuses the second and third
    requests (429), yet the middleware's hit for them is kept (a ``@capped`` refusal's is
    given back; a DRF throttle's is not). A minute later the throttle would admit the
    client, but the default limits, spent by the two refusals, refuse it for an hour.
    Expected: the refused requests count nothing, so the fourth is admitted."""
    with _site(FREQGUARD_DEFAULT_LIMITS="3/hour"):
        assert _codes("/orders", "/orders", "/orders") == [200, 429, 429]
        clock.advance(61)
        assert _codes("/orders") == [200]


def test_exempt_on_a_viewset_leaves_it_to_its_throttles(guard: Guard) -> None:
    """docs/django.md line 347: "``@exempt`` the view (or the ``APIView`` class) to leave it
    to its throttles." On a ViewSet (``@exempt class ItemsViewSet(viewsets.ViewSet)``,
    registered on a router), the default limits still hold: its throttle admits 5 a
    minute, the default limits of 2 refuse the third. A router's view carries its class as
    ``.cls``, not ``.view_class``, and the middleware looks only at the latter: the mark is
    ignored without a word. Expected: four requests admitted, as on an exempt APIView."""
    with _site(FREQGUARD_DEFAULT_LIMITS="2/minute"):
        assert _codes(*["/items/"] * 4) == [200, 200, 200, 200]


def test_exempt_under_api_view_leaves_it_to_its_throttles(guard: Guard) -> None:
    """DRF's decorators go below ``@api_view`` (``@throttle_classes``, ``@permission_classes``:
    DRF's docs require it), so a DRF user puts ``@exempt`` there too. It marks the function
    DRF wraps, which the middleware never sees: the default limits of 2 a minute still
    refuse the third request, silently (no error, no ``manage.py check`` message).
    Expected: exempt (four admitted at its throttle's 5 a minute), or refused naming the
    order to write."""
    with _site(FREQGUARD_DEFAULT_LIMITS="2/minute"):
        said = [(m.id, m.msg) for m in checks.run_checks() if "report" in m.msg]
        assert _codes(*["/report"] * 4) == [200, 200, 200, 200], said


def test_one_capped_view_under_two_urls_is_one_budget(guard: Guard) -> None:
    """django-ratelimit.md line 28: ``@ratelimit(key="ip", rate="5/m")`` is
    ``@capped("5/m", key=client_ip())``, "the same answers to a burst". A login view
    routed twice (``login/`` and ``api/login/``, two route names): django-ratelimit's group
    is the view's dotted name, one budget, so alternating the URLs gives nothing more.
    freqguard's middleware names the policy after each route, so alternating doubles the
    attempts (4 of a 2/m cap admitted); without the middleware the same view has one
    budget (2 admitted). A budget per route is the middleware's design (each route's
    policy); the page now says so, and that ``name=`` makes one budget (shown)."""
    paths = ["/their-login", "/api/their-login", "/their-login", "/api/their-login"]
    theirs = []
    with _site():
        for p in paths:
            try:
                theirs.append(Client().get(p).status_code)
            except Exception:  # Ratelimited, when the test client raises it
                theirs.append(403)
        assert theirs == [200, 200, 403, 403]
        assert _codes("/login", "/api/login", "/login", "/api/login") == [200, 200, 200, 200]
        assert _codes("/named-login", "/api/named-login", "/named-login") == [200, 200, 429]
    assert "`name=` makes one" in RATELIMIT_PAGE.read_text()


def _anonymous(request: HttpRequest) -> HttpRequest:
    request.user = type("Anonymous", (), {"is_authenticated": False})()
    return request


@capped("2/m", name="otp-login")
def otp_login(request: HttpRequest) -> HttpResponse:
    return HttpResponse("signed in")


def test_peek_before_the_capped_view_has_served_a_request(guard: Guard) -> None:
    """django-ratelimit.md line 39: ``is_ratelimited(request, group="x", key="ip",
    rate="5/m")`` is ``guard().peek("x", client=...).allowed``. django-ratelimit's call
    answers in a fresh process (a login form's GET asking whether to show a captcha
    before any POST was made): False. freqguard registers a cap's policy at its view's
    first request, so until then ``peek("otp-login", ...)`` raises
    ``ConfigError: unknown policy 'otp-login'`` (a 500 in that GET view). Now
    ``peek(request, name)`` answers for the caps of that name, registered as it asks."""
    request = _anonymous(RequestFactory().get("/"))
    assert not is_ratelimited(request, group="otp-login", key="ip", rate="2/m")
    assert fg_django.peek(request, "otp-login").allowed  # the page's way now


@capped("1/m", key=client_ip(), name="v6-login")
def v6_login(request: HttpRequest) -> HttpResponse:
    return HttpResponse("signed in")


def test_peek_for_an_ipv6_client_answers_as_the_cap_does(guard: Guard) -> None:
    """django-ratelimit.md line 39: ``is_ratelimited(...)`` is
    ``guard().peek("x", client=...)``; the page leaves ``client=`` to the reader, who gives
    the address, ``request.META["REMOTE_ADDR"]``. ``client_ip()`` keys an IPv6 client by
    its /64, so the peek reads another key: after the cap has refused the client, peek
    still says it would be admitted. django-ratelimit's ``is_ratelimited`` keys the same
    request as its decorator does. Expected: the peek as the page writes it agrees with
    the cap (or the page names a way to peek a request as its cap keys it)."""
    address = "2001:db8::7"
    with override_settings(MIDDLEWARE=[]):
        made = [
            v6_login(_anonymous(RequestFactory().get("/", REMOTE_ADDR=address))).status_code
            for _ in range(2)
        ]
    assert made == [200, 429]
    request = _anonymous(RequestFactory().get("/", REMOTE_ADDR=address))
    assert fg_django.guard().peek("v6-login", client=request.META["REMOTE_ADDR"]).allowed
    assert not fg_django.peek(request, "v6-login").allowed  # keyed as the cap keys it


class PortedByIdent(FreqGuardThrottle):
    """A DRF ``get_cache_key`` ported as DRF's docs write one, on a class that says which
    proxies to believe."""

    rate = "1/minute"
    trusted_proxies = ("10.0.0.0/8",)

    def get_cache_key(self, request: Any, view: Any) -> str:
        ident = self.get_ident(request)
        return str(self.cache_format % {"scope": "login", "ident": ident})


def test_a_ported_get_cache_key_reads_the_address_as_trusted_proxies_say(guard: Guard) -> None:
    """drf.md line 29 and django.md lines 334-338: freqguard keys by the peer, and believes
    ``X-Forwarded-For`` only as ``NUM_PROXIES`` or the throttle's ``trusted_proxies`` say;
    line 32: a ``get_cache_key`` ported is "the same". DRF's custom-throttle idiom builds
    the key from ``self.get_ident(request)``, which on freqguard's throttle is DRF's own:
    it reads the whole ``X-Forwarded-For`` and ignores ``trusted_proxies``. A client not
    behind the trusted proxies (peer 203.0.113.9) writes a new header each time and gets a
    new budget each time. Expected: ``self.get_ident`` finds the address as the class's
    ``trusted_proxies`` say (the peer here): one budget, [200, 429, 429, 429]."""
    view = _api([PortedByIdent])
    factory = APIRequestFactory()
    codes = [
        view(
            factory.get("/", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}", REMOTE_ADDR="203.0.113.9")
        ).status_code
        for n in range(4)
    ]
    assert codes == [200, 429, 429, 429]


class Remaining(FreqGuardUserThrottle):
    """DRF's idiom for a remaining-requests header: read ``num_requests`` and ``history``
    after ``super().allow_request``."""

    rate = "2/minute"

    def allow_request(self, request: Any, view: Any) -> bool:
        allowed = super().allow_request(request, view)
        request._request.remaining = self.num_requests - len(self.history)
        return allowed


def test_drfs_counting_attributes_read_name_freqguards_way(guard: Guard) -> None:
    """drf.md line 35: what only DRF's counting reads (``timer``, ``cache``,
    ``throttle_success``...) is refused naming freqguard's way (``self.decision``). Its
    counting's attributes, read by a subclass after ``super().allow_request`` (the usual
    way to send an ``X-RateLimit-Remaining``: ``self.num_requests - len(self.history)``;
    ``self.duration``, ``self.now``), are a bare ``AttributeError: 'Remaining' object has
    no attribute 'num_requests'`` (a 500), naming nothing. Expected: an error that names
    freqguard's way (``self.decision``: ``remaining``, ``capacity``, ``retry_after``)."""
    view = _api([Remaining])
    with pytest.raises(AttributeError, match=r"self\.decision"):
        view(APIRequestFactory().get("/"))


def test_user_or_ip_under_the_middleware_keys_a_drf_authenticated_user(
    guard: Guard, clock: ManualClock
) -> None:
    """django.md lines 251-252: ``FREQGUARD_KEY = user_or_ip(...)``, "as DRF keys: the
    user's id when authenticated, else the client's address". A DRF API authenticates in
    DRF (TokenAuthentication, JWT), so Django's ``request.user``, which the middleware's
    key reads, is anonymous for every API client: two users behind one address share one
    budget of the default limits, the second refused. DRF's ``UserRateThrottle`` keys them
    apart (shown). No page said that ``user_or_ip`` does not see DRF's authentication: it
    cannot (the middleware runs first); the page now says so and names freqguard's user
    throttle, which keys them apart (shown)."""
    theirs = type(
        "Theirs", (throttling.UserRateThrottle,), {"rate": "1/min", "timer": lambda _: clock.now()}
    )
    view = Profile.as_view(throttle_classes=[theirs])
    factory = APIRequestFactory()
    assert [view(factory.get("/", HTTP_X_TOKEN=t)).status_code for t in ("ann", "bob")] == [
        200,
        200,
    ]
    with _site(FREQGUARD_DEFAULT_LIMITS="1/minute", FREQGUARD_KEY=user_or_ip()):
        codes = [Client(headers={"x-token": t}).get("/profile").status_code for t in ("ann", "bob")]
    assert codes == [200, 429]  # the middleware decides before DRF authenticates
    ours = type("Ours", (FreqGuardUserThrottle,), {"rate": "1/min"})
    view = Profile.as_view(throttle_classes=[ours])
    assert [view(factory.get("/", HTTP_X_TOKEN=t)).status_code for t in ("ann", "bob")] == [
        200,
        200,
    ]
    assert "key such an API by its DRF throttles" in DJANGO_PAGE.read_text()


def _freqguard_messages(**settings: Any) -> list[str]:
    with override_settings(**settings):
        return [
            f"{m.id}: {m.msg}"
            for m in checks.run_checks()
            if m.id is not None and m.id.startswith("freqguard.")
        ]


AUTH = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]


def test_default_limits_without_the_middleware_are_a_check_message() -> None:
    """django.md line 179: "the default limits need the middleware"; lines 45-46 make an
    unknown ``FREQGUARD_*`` setting an error because it "would otherwise leave every view
    uncapped without a word". ``FREQGUARD_DEFAULT_LIMITS`` set with
    ``FreqGuardMiddleware`` missing from ``MIDDLEWARE`` (a django-ratelimit user had no
    middleware to add) leaves every view uncapped without a word: ``manage.py check``
    says nothing. Expected: a check message naming the middleware to add."""
    said = _freqguard_messages(MIDDLEWARE=AUTH, FREQGUARD_DEFAULT_LIMITS="100/minute")
    assert any("FreqGuardMiddleware" in m for m in said), said


def test_the_middleware_before_authentication_with_a_user_key_is_a_check_message() -> None:
    """django.md lines 26 and 235-237: place the middleware "after
    ``AuthenticationMiddleware`` when a key reads the user". Placed before it with
    ``FREQGUARD_KEY = user_or_ip()``, ``request.user`` is not set yet when the key reads
    it: every signed-in user is keyed by address (users behind one NAT share a budget:
    with the test site's user middleware placed after freqguard's, users ann and bob from
    one address at a default of 1/minute get 200, 429), silently; ``manage.py check``
    says nothing. Expected: a check message naming the order."""
    middleware = [AUTH[0], "freqguard.integrations.django.FreqGuardMiddleware", AUTH[1]]
    said = _freqguard_messages(
        MIDDLEWARE=middleware, FREQGUARD_KEY=user_or_ip(), FREQGUARD_DEFAULT_LIMITS="100/minute"
    )
    assert any("AuthenticationMiddleware" in m for m in said), said
