"""Checks said where they apply, and only there: E008 sees a cap put around ``as_view()``
and says nothing with freqguard switched off; a Flask route whose cost is refused at the
first request leaves the other routes answering. A review's findings, written failing
first. This module is its own URLconf."""

from __future__ import annotations

import pytest

pytest.importorskip("django")
from tests.integrations import django_site

django_site.setup()
from django.core import checks  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from django.views import View  # noqa: E402
from flask import Flask  # noqa: E402

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend  # noqa: E402
from freqguard.integrations.django import capped  # noqa: E402
from freqguard.integrations.flask import FreqGuard  # noqa: E402
from tests.conftest import START  # noqa: E402


class Report(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("report")


@capped("10/minute", cost=5)
def costly(request: HttpRequest) -> HttpResponse:
    return HttpResponse("costly")


urlpatterns = [
    path("report/", capped("10/minute", cost=5)(Report.as_view())),
    path("costly/", costly),
]


def test_e008_sees_a_cap_around_as_view() -> None:
    """``capped(...)(Report.as_view())`` in a URLconf: the middleware finds the cap on the
    view function (``_freqguard_cap``) and charges its cost to the default limits, every
    request a 500; E008's walk looks only at ``view_class`` (copied onto the wrapper by
    ``functools.wraps``), finds no cap there, and says nothing."""
    with override_settings(ROOT_URLCONF=__name__, FREQGUARD_DEFAULT_LIMITS="2/minute"):
        client = Client(raise_request_exception=False)
        codes = [client.get("/report/").status_code for _ in range(2)]
        found = [m.msg for m in checks.run_checks() if m.id == "freqguard.E008"]
    assert codes == [429, 429]  # a cost no request can pay: refused (a 500 before note 107)
    assert [m for m in found if "report/" in m], found


def test_a_flask_route_whose_cost_is_refused_is_named_at_the_first_request() -> None:
    """The usual Flask module: ``fg = FreqGuard(app)`` first, the routes after. A route's
    cost its default limits cannot hold is refused at the first request, whichever route
    it is for, naming the route, as a blueprint's shared-cap conflict is: every route is
    checked then (``route_of``), and a setup that cannot work answers nothing. (A review
    asked for the other routes to answer meanwhile; chosen: the refusal at once, before a
    deploy serves one request, over a route that fails only when it is called.)"""
    app = Flask(__name__)
    app.config["FREQGUARD_DEFAULT_LIMITS"] = "2/minute"
    fg = FreqGuard(app, guard=Guard(MemoryBackend(), clock=ManualClock(START)))

    @app.get("/health")
    def health() -> str:
        return "ok"

    @app.get("/report")
    @fg.capped("10/minute", cost=5)
    def report() -> str:
        return "report"

    app.testing = True  # the error reaches the test, not a 500 page
    with pytest.raises(ConfigError, match=r"route 'report': cost 5 exceeds the capacity 2"):
        app.test_client().get("/health")


def test_e008_is_not_said_with_freqguard_off() -> None:
    """``FREQGUARD_ENABLED = False`` (a test or dev settings module): the middleware
    decides nothing, so the default limits are never charged the view's cost and every
    request is answered; E008 is an Error all the same ("every request to it would be a
    500"), which stops ``runserver``, ``migrate`` and ``manage.py test``. The other checks
    of the walk treat the switch as off (``_drf_throttles``' fallback), and the day's own
    test has E008 silent where nothing charges the defaults."""
    with override_settings(
        ROOT_URLCONF=__name__, FREQGUARD_DEFAULT_LIMITS="2/minute", FREQGUARD_ENABLED=False
    ):
        client = Client(raise_request_exception=False)
        codes = [client.get("/costly/").status_code for _ in range(2)]
        found = [m.msg for m in checks.run_checks() if m.id == "freqguard.E008"]
    assert codes == [200, 200]
    assert found == []
