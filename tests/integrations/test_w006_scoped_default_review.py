"""An adversarial review of d26d76c's W006 ("reads the default throttle classes' own
rates", ``_drf_throttles.throttle_checks``). A failing test; memory backend, pinned time,
in process."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site
from tests.integrations.test_unfit_and_quiet_integrations_review import w006_site

django_site.setup()

from django.urls import path  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard.integrations.drf import FreqGuardScopedThrottle  # noqa: E402

SITE = django_site.SETTINGS


class _Uploads(APIView):
    """A view of the scope ``uploads``, throttled by the scoped throttle."""

    throttle_classes = (FreqGuardScopedThrottle,)
    throttle_scope = "uploads"

    def get(self, request: Request) -> Response:
        return Response("ok")


class _Urls:
    urlpatterns: ClassVar[list[Any]] = [path("uploads", _Uploads.as_view())]


def test_w006_is_said_when_the_default_throttle_is_the_scoped_one() -> None:
    """d26d76c's W006: ``fallen`` (a freqguard throttle falls back on
    ``FREQGUARD_DEFAULT_LIMITS``, so W006 is not said) now reads each class of
    ``DEFAULT_THROTTLE_CLASSES`` as ``given(cls.rate, cls.scope, rates)``. The scoped
    throttle, ``FreqGuardScopedThrottle``, has no class ``scope``: it reads each view's
    ``throttle_scope`` (a view without one is not throttled; the walk, ``_drf_walk._use``,
    reads it so), so ``given(None, None, rates)`` is None and every site naming it among
    the defaults is taken to fall back. A site without the middleware,
    ``DEFAULT_THROTTLE_CLASSES = [FreqGuardScopedThrottle]``,
    ``DEFAULT_THROTTLE_RATES = {"uploads": "100/day"}``, its one view of scope
    ``uploads``, and ``FREQGUARD_DEFAULT_LIMITS = "2/minute"``: the default limits cap
    nothing (three GETs admitted, where 2/minute would refuse the third), and no W006.
    Expected: W006, as for ``FreqGuardAnonThrottle`` with its scope's rate."""
    said = w006_site(_Urls, "FreqGuardScopedThrottle", {"uploads": "100/day"}, "/uploads")
    assert "freqguard.W006" in said, said
