"""A DRF throttle's ``cost`` past the capacity of the rate its scope gives it refuses every
request (the class's own ``rate`` was checked as the class was made; a scope's rate, read
from the settings, by nothing): ``manage.py check`` says so (``freqguard.E003``), naming
the cost, the rate and where it is given (found by a DRF user's review)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site

django_site.setup()

from django.core import checks  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard.integrations.drf import FreqGuardScopedThrottle  # noqa: E402
from tests.integrations.drf_rig import REST  # noqa: E402


class Costly(FreqGuardScopedThrottle):
    cost = 5


class Report(APIView):
    throttle_classes = (Costly,)
    throttle_scope = "reports"

    def get(self, request: Request) -> Response:
        return Response("report")


class Urls:
    urlpatterns: ClassVar[list[Any]] = [path("report", Report.as_view())]


def _errors(rate: str) -> list[str]:
    rest = {**REST, "DEFAULT_THROTTLE_RATES": {"reports": rate}}
    with override_settings(ROOT_URLCONF=Urls, REST_FRAMEWORK=rest):
        return [m.msg for m in checks.run_checks() if m.id == "freqguard.E003"]


def test_a_cost_past_its_scopes_rate_is_a_check_error() -> None:
    [error] = _errors("3/min")
    assert "cost 5 exceeds the capacity 3" in error, error
    assert "['DEFAULT_THROTTLE_RATES']['reports'] = '3/min'" in error, error
    assert "Costly" in error, error


def test_a_cost_the_rate_holds_is_no_error() -> None:
    assert _errors("5/min") == []
