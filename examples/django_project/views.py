"""The example project's views: one under the default limits only, an async view with a
cap of its own, a class-based view keyed by an API key."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import View

from freqguard.integrations.django import capped, header


def index(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok\n")


@capped("5/minute")  # with the default limits, in one hit, before the view runs
async def send_sms(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"sent": True})


@capped("3/minute", key=header("x-api-key"))  # each API key its own budget
class Quote(View):
    def get(self, request: HttpRequest) -> JsonResponse:
        return JsonResponse({"quote": 42})
