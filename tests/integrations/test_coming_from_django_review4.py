"""A fourth review, as a user arriving from django-ratelimit: what an earlier pass found
and left. A class-based view's ``as_view()`` capped without the middleware named its policy
after Django's inner function, ``...View.as_view.<locals>.view``, not after the view."""

from __future__ import annotations

import pytest

pytest.importorskip("django", reason="the django extra is not installed")
from tests.integrations import django_site

django_site.setup()
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import RequestFactory, override_settings  # noqa: E402
from django.views import View  # noqa: E402

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend  # noqa: E402
from freqguard.integrations import django as fg_django  # noqa: E402
from freqguard.integrations.django import capped  # noqa: E402


class InvoicesReview4(View):
    __module__ = "billing.views"  # a project's: the name fits whole

    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("invoices")


def test_an_as_view_capped_is_named_after_its_view_class() -> None:
    """``capped("1/m")(InvoicesReview4.as_view())``: its policy was
    ``django.view.django.views.generic.base.View.as_view.<locals>.view`` (cut to fit),
    read in ``freqguard inspect`` and the store's keys as no view of the project."""
    guard = Guard(MemoryBackend(ManualClock(1_700_000_000)))
    view = capped("1/m")(InvoicesReview4.as_view())
    with override_settings(FREQGUARD_BACKEND=guard, MIDDLEWARE=[]):
        codes = [view(RequestFactory().get("/")).status_code for _ in range(2)]
    fg_django.close()
    assert codes == [200, 429]
    assert list(guard.policies) == ["django.view.billing.views.InvoicesReview4"]


def test_a_misspelt_method_is_still_refused() -> None:
    """The check is shared with Flask and Starlette now: Django's still holds."""
    with pytest.raises(ConfigError, match=r"'POTS' is not an HTTP method.*'POST'"):
        capped("5/m", methods=["POTS"])
