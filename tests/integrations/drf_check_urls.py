"""A URLconf for the DRF throttle checks (tests/integrations/test_drf_checks.py and
test_drf_check_walk.py): views whose freqguard throttles read a scope
``DEFAULT_THROTTLE_RATES`` does not name, or a rate that
does not parse, reached through an include, an ``@api_view`` function and a router's
ViewSet (four views reading the rate that does not parse, two a throttle's own rate
that does not); six views on freqguard's anon throttle, whose scope is named nowhere; and a view
naming its throttle by a dotted path; two choosing their throttles in ``get_throttles()``;
four views on freqguard's generic throttle and one on a subclass, with neither a rate nor a
scope (``FREQGUARD_DEFAULT_LIMITS`` or nothing), and one whose throttle gives its rate in code.
The tests' rates:
``{"upload": "10/hour", "reports": "5/min", "slow": "3/minit", "off": None}``."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from rest_framework.decorators import action, api_view, throttle_classes
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView
from rest_framework.viewsets import ViewSet

from freqguard.integrations.drf import (
    FreqGuardAnonThrottle,
    FreqGuardScopedThrottle,
    FreqGuardThrottle,
)


class Uploads(APIView):
    throttle_classes = (FreqGuardScopedThrottle,)
    throttle_scope = "uploads"  # the rates name "upload"

    def get(self, request: Request) -> Response:
        return Response("uploaded")


class UploadsToo(Uploads):  # the same misspelt scope: each view's own to fix
    pass


class Anonymous(APIView):
    throttle_classes = (FreqGuardAnonThrottle,)  # reads "anon", which the rates do not name

    def get(self, request: Request) -> Response:
        return Response("anonymous")


#: The anon throttle's views: six, one scope to name.
ANONYMOUS: list[type[APIView]] = [
    Anonymous,
    *(type(f"Anonymous{n}", (Anonymous,), {}) for n in range(1, 6)),
]


class ExportsScope(FreqGuardThrottle):
    scope = "exports"  # named nowhere


@api_view(["GET"])
@throttle_classes([ExportsScope])
def export(request: Request) -> Response:
    return Response("exported")


class SlowScope(FreqGuardThrottle):
    scope = "slow"  # "3/minit": DRF reads the first letter, freqguard the word


class Slow(APIView):
    throttle_classes = (SlowScope,)

    def get(self, request: Request) -> Response:
        return Response("slow")


#: The views reading "slow": four, one rate to fix.
SLOW: list[type[APIView]] = [Slow, *(type(f"Slow{n}", (Slow,), {}) for n in range(1, 4))]


class OffScope(FreqGuardThrottle):
    scope = "off"  # None: not throttled, as in DRF


class Off(APIView):
    throttle_classes = (OffScope,)

    def get(self, request: Request) -> Response:
        return Response("off")


class MisspeltRate(FreqGuardThrottle):
    rate = "3/minit"


class Misspelt(APIView):
    throttle_classes = (MisspeltRate,)

    def get(self, request: Request) -> Response:
        return Response("misspelt")


class MisspeltToo(Misspelt):  # the same throttle's rate: one to fix
    pass


class Dotted(APIView):
    # a dotted path where DRF wants the class: DRF imports strings only in the settings
    throttle_classes = ("tests.integrations.drf_check_urls.ExportsScope",)  # type: ignore[assignment]

    def get(self, request: Request) -> Response:
        return Response("dotted")


class Chosen(APIView):
    throttle_classes = (FreqGuardScopedThrottle,)
    throttle_scope = "chosen"  # named nowhere, and not what runs: get_throttles() chooses

    def get_throttles(self) -> list[BaseThrottle]:
        return [] if self.request.method == "GET" else super().get_throttles()

    def get(self, request: Request) -> Response:
        return Response("chosen")


class ChosenToo(Chosen):  # the override inherited
    pass


class Reports(ViewSet):
    throttle_classes = (FreqGuardScopedThrottle,)
    throttle_scope = "reports"

    def list(self, request: Request) -> Response:
        return Response([])

    @action(detail=False, throttle_scope="reports-csv")  # named nowhere
    def csv(self, request: Request) -> Response:
        return Response("a,b")


class Unrated(APIView):
    throttle_classes = (FreqGuardThrottle,)  # no rate, no scope: FREQGUARD_DEFAULT_LIMITS'

    def get(self, request: Request) -> Response:
        return Response("unrated")


#: The generic throttle's views: four, one throttle to give a rate.
UNRATED: list[type[APIView]] = [
    Unrated,
    *(type(f"Unrated{n}", (Unrated,), {}) for n in range(1, 4)),
]


class Costly(FreqGuardThrottle):
    cost = 2  # no rate, no scope either


class Heavy(APIView):
    throttle_classes = (Costly,)

    def get(self, request: Request) -> Response:
        return Response("heavy")


class RatedInCode(FreqGuardThrottle):
    def __init__(self) -> None:
        super().__init__()
        self.rate = "5/minute"  # given at the request: the check cannot see it, nor judge it


class Coded(APIView):
    throttle_classes = (RatedInCode,)

    def get(self, request: Request) -> Response:
        return Response("coded")


class ScopedInCode(FreqGuardThrottle):
    scope = "placeholder"  # named nowhere: the code below chooses the scope at the request

    def allow_request(self, request: Request, view: Any) -> bool:
        self.scope = "upload"
        return super().allow_request(request, view)


class CodedScope(APIView):
    throttle_classes = (ScopedInCode,)

    def get(self, request: Request) -> Response:
        return Response("coded scope")


def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("plain")


router = SimpleRouter()
router.register("reports", Reports, basename="reports")

urlpatterns = [
    path("api/", include([path("uploads", Uploads.as_view()), path("export", export)])),
    path("unscoped", Uploads.as_view(throttle_scope=None)),  # not throttled: not reported
    path("slow", Slow.as_view()),
    *(path(f"slow/{n}", view.as_view()) for n, view in enumerate(SLOW[1:], 1)),
    path("off", Off.as_view()),
    path("misspelt", Misspelt.as_view()),
    path("misspelt-too", MisspeltToo.as_view()),
    path("plain", plain),
    path("dotted", Dotted.as_view()),
    path("dotted-nowhere", Dotted.as_view(throttle_classes=["nowhere.Burst"])),
    path("", include(router.urls)),
    path("uploads-too", UploadsToo.as_view()),
    *(path(f"anonymous/{n}", view.as_view()) for n, view in enumerate(ANONYMOUS)),
    path("anonymous-again", Anonymous.as_view()),  # one view at two URLs: counted once
    path("chosen", Chosen.as_view()),
    path("chosen-too", ChosenToo.as_view()),
    path("chosen-again", Chosen.as_view()),
    *(path(f"unrated/{n}", view.as_view()) for n, view in enumerate(UNRATED)),
    path("heavy", Heavy.as_view()),
    path("coded", Coded.as_view()),
    path("coded-scope", CodedScope.as_view()),
]
