"""The Django site the Django and DRF tests drive: settings configured once per process,
when this module is imported (DRF's modules read them when imported), no database; users
come from an ``X-User`` header (a middleware and a DRF authentication class), so a test can
be anyone without a session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import django
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.test import AsyncClient, Client
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View

from freqguard import Rule
from freqguard.integrations.django import capped, exempt, header, user_or_ip

SETTINGS: dict[str, Any] = {
    "DEBUG": False,
    "SECRET_KEY": "tests-only",
    "ROOT_URLCONF": "tests.integrations.django_site",
    "ALLOWED_HOSTS": ["*"],
    "INSTALLED_APPS": ["rest_framework", "freqguard.integrations.django.FreqGuardConfig"],
    "MIDDLEWARE": [
        "tests.integrations.django_users.HeaderUserMiddleware",
        "freqguard.integrations.django.FreqGuardMiddleware",
    ],
    "DATABASES": {},
    "USE_TZ": True,
    "REST_FRAMEWORK": {
        "UNAUTHENTICATED_USER": None,
        "DEFAULT_AUTHENTICATION_CLASSES": ["tests.integrations.django_users.HeaderAuthentication"],
        "DEFAULT_THROTTLE_RATES": {"orders": "2/min"},
    },
}


_FAILURES: dict[str, type[Exception]] = {
    "500": RuntimeError,
    "404": Http404,
    "403": PermissionDenied,
}


class FailsOnStreamed:
    """An outer middleware that fails once a streamed answer has passed freqguard's, when
    the request says ``X-Fail``: Django answers it (500, or 404 and 403 for the two it
    answers itself) and drops that response unclosed."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        response = self.get_response(request)
        failure = _FAILURES.get(request.headers.get("X-Fail", ""))
        if failure is not None and getattr(response, "streaming", False):
            raise failure("an outer middleware that fails")
        return response


def setup() -> None:
    """Configure Django for this process, once."""
    if not settings.configured:
        settings.configure(**SETTINGS)
        django.setup()


setup()

from tests.integrations import drf_views  # noqa: E402 -- DRF reads the settings on import


def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("plain")


@capped("2/minute")
def sync_capped(request: HttpRequest) -> HttpResponse:
    return HttpResponse("sync")


@capped("2/minute")
async def async_capped(request: HttpRequest) -> HttpResponse:
    return HttpResponse("async")


@capped("1/minute", key=header("x-api-key"))
def by_api_key(request: HttpRequest) -> HttpResponse:
    return HttpResponse("key")


@capped("2/minute", key=user_or_ip())
def by_user(request: HttpRequest) -> HttpResponse:
    return HttpResponse("user")


@exempt
def exempted(request: HttpRequest) -> HttpResponse:
    return HttpResponse("exempt")


@capped("2/minute")
class ClassCapped(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("class")


@capped("2/minute")
class AsyncClassCapped(View):
    async def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("async class")


class MethodCapped(View):
    @method_decorator(capped("1/minute"))
    def post(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("posted")

    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("got")


@capped(Rule("1 concurrent", by="client", lease=60))
def leased(request: HttpRequest) -> HttpResponse:
    """One request at a time: a request made while this one runs is refused (its status
    is the answer)."""
    if request.GET.get("inner"):
        return HttpResponse("inner")
    inner = Client().get("/leased", {"inner": "1"})
    return HttpResponse(str(inner.status_code))


@capped(Rule("1 concurrent", by="client", lease=60))
async def aleased(request: HttpRequest) -> HttpResponse:
    if request.GET.get("inner"):
        return HttpResponse("inner")
    inner = await AsyncClient().get("/aleased", {"inner": "1"})
    return HttpResponse(str(inner.status_code))


@capped(Rule("1 concurrent", by="client", lease=60))
def streamed(request: HttpRequest) -> StreamingHttpResponse:
    """A streamed answer: in flight until its last chunk is sent or it is closed."""
    return StreamingHttpResponse(iter([b"a", b"b"]))


@capped(Rule("1 concurrent", by="client", lease=60))
async def astreamed(request: HttpRequest) -> StreamingHttpResponse:
    async def chunks() -> AsyncIterator[bytes]:
        for chunk in (b"a", b"b"):
            yield chunk

    return StreamingHttpResponse(chunks())


@capped(Rule("1 concurrent", by="client", lease=60))
def released(request: HttpRequest) -> HttpResponse:
    """Gives its own lease back before it answers (the work is done: another may start)."""
    from freqguard.integrations.django import guard

    guard().release(request.freqguard.decision)  # type: ignore[attr-defined]
    return HttpResponse("released")


urlpatterns = [
    path("leased", leased, name="leased"),
    path("released", released, name="released"),
    path("streamed", streamed, name="streamed"),
    path("astreamed", astreamed, name="astreamed"),
    path("aleased", aleased, name="aleased"),
    path("plain", plain, name="plain"),
    path("plain-again", plain),  # unnamed: counted under the view's dotted path
    path("sync", sync_capped, name="sync"),
    path("async", async_capped, name="async"),
    path("key", by_api_key, name="key"),
    path("user", by_user, name="user"),
    path("exempt", exempted, name="exempt"),
    path("class", ClassCapped.as_view(), name="class"),
    path("async-class", AsyncClassCapped.as_view(), name="async-class"),
    path("method", MethodCapped.as_view(), name="method"),
    path("api/orders", drf_views.Orders.as_view(), name="orders"),
    path("api/scoped", drf_views.Scoped.as_view(), name="scoped"),
    path("api/other-scoped", drf_views.OtherScoped.as_view(), name="other-scoped"),
    path("api/plain", drf_views.Plain.as_view(), name="drf-plain"),
]
