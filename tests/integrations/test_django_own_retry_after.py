"""A view's own ``Retry-After`` (a 3xx or 2xx may carry one: RFC 9110 10.2.3) is the
view's: the middleware's headers leave it be (a review: every answer under 400 lost it,
the middleware deleting the header whoever had set it)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

pytest.importorskip("django")
from tests.integrations import django_site

django_site.setup()

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.urls import path  # noqa: E402

from freqguard import Guard, ManualClock, MemoryBackend  # noqa: E402
from freqguard.integrations import django as fg_django  # noqa: E402
from tests.conftest import START  # noqa: E402


def moved(request: HttpRequest) -> HttpResponse:
    answer = HttpResponseRedirect("/elsewhere")
    answer["Retry-After"] = "5"
    return answer


class Urls:
    urlpatterns: ClassVar[list[Any]] = [path("moved", moved)]


def test_a_views_own_retry_after_is_kept() -> None:
    with override_settings(
        ROOT_URLCONF=Urls,
        MIDDLEWARE=django_site.SETTINGS["MIDDLEWARE"],
        FREQGUARD_BACKEND=Guard(MemoryBackend(), clock=ManualClock(START)),
        FREQGUARD_DEFAULT_LIMITS="10/minute",
    ):
        response = Client().get("/moved")
    fg_django.close()
    assert response.status_code == 302
    assert response["Retry-After"] == "5"
    assert "RateLimit" in response  # the middleware's own, beside it
