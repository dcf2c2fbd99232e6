"""A third review, as a user arriving from django-ratelimit and DRF's throttles: their
idioms tried one by one, where a cap or a throttle could quietly not apply, or the error
did not name the fix. Each failed on the code it was written against, for the reason its
docstring gives."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site

django_site.setup()
from django.core import checks  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import Client, RequestFactory, override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.throttling import ScopedRateThrottle  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend  # noqa: E402
from freqguard.integrations import django as fg_django  # noqa: E402
from freqguard.integrations.django import capped  # noqa: E402
from freqguard.integrations.drf import (  # noqa: E402
    FreqGuardScopedThrottle,
    FreqGuardThrottle,
    FreqGuardUserThrottle,
)
from tests.integrations.drf_rig import REST  # noqa: E402

OURS = ["freqguard.integrations.drf.FreqGuardUserThrottle"]
RATES = {**REST["DEFAULT_THROTTLE_RATES"], "user": "5/minute"}


def _ours(**settings: Any) -> list[checks.CheckMessage]:
    with override_settings(**settings):
        return [m for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("DEFAULT_THROTTLE_CLASS", "DEFAULT_THROTTLE_CLASSES"),
        ("DEFAULT_THROTTLES", "DEFAULT_THROTTLE_CLASSES"),
        ("THROTTLE_CLASSES", "DEFAULT_THROTTLE_CLASSES"),
    ],
)
def test_a_misspelt_throttle_classes_setting_is_a_check_error(typed: str, meant: str) -> None:
    """``REST_FRAMEWORK = {"DEFAULT_THROTTLE_CLASS": [...freqguard's...]}``: DRF reads no
    key it does not know, so every view of the site is quietly unthrottled, and
    ``manage.py check`` said nothing (a view quietly unlimited)."""
    rest = {**REST, typed: OURS, "DEFAULT_THROTTLE_RATES": RATES}
    found = [m for m in _ours(REST_FRAMEWORK=rest) if m.id == "freqguard.E009"]
    [message] = found
    assert f"REST_FRAMEWORK[{typed!r}]" in message.msg
    assert f"did you mean {meant!r}" in message.msg


def test_a_misspelt_rates_setting_is_named_itself() -> None:
    """``"DEFAULT_THROTTLE_RATE"``: the rates are not read; the check named each view's
    scope missing from ``DEFAULT_THROTTLE_RATES`` (E004), never the key misspelt."""
    rest = {**REST, "DEFAULT_THROTTLE_RATE": RATES}
    rest.pop("DEFAULT_THROTTLE_RATES")
    [message] = [m for m in _ours(REST_FRAMEWORK=rest) if m.id == "freqguard.E009"]
    assert "did you mean 'DEFAULT_THROTTLE_RATES'" in message.msg


@pytest.mark.parametrize("name", ["DEFAULT_THROTTLE_CLASSES", "DEFAULT_THROTTLE_RATES"])
def test_a_throttle_setting_outside_rest_framework_is_a_check_error(name: str) -> None:
    """DRF reads its settings inside ``REST_FRAMEWORK`` only: one written at the top of
    ``settings.py`` throttles nothing, without a word."""
    value = OURS if name.endswith("CLASSES") else RATES
    [message] = [m for m in _ours(**{name: value}) if m.id == "freqguard.E009"]
    assert f"{name} is read by DRF inside REST_FRAMEWORK" in message.msg


def test_a_misspelt_rest_framework_setting_is_a_check_error() -> None:
    """``REST_FRAMEWORKS = {"DEFAULT_THROTTLE_CLASSES": [...]}``: DRF reads none of it."""
    rest = {"DEFAULT_THROTTLE_CLASSES": OURS, "DEFAULT_THROTTLE_RATES": RATES}
    [message] = [m for m in _ours(REST_FRAMEWORKS=rest) if m.id == "freqguard.E009"]
    assert "REST_FRAMEWORKS" in message.msg
    assert "did you mean 'REST_FRAMEWORK'" in message.msg


def test_drfs_own_settings_are_not_taken_for_misspellings() -> None:
    """Every key DRF reads (its throttles' among them) passes without a word."""
    from rest_framework.settings import DEFAULTS

    rest = {**DEFAULTS, **REST, "DEFAULT_THROTTLE_CLASSES": OURS, "DEFAULT_THROTTLE_RATES": RATES}
    assert not [m for m in _ours(REST_FRAMEWORK=rest) if m.id == "freqguard.E009"]


MISSPELT = [("POTS", "POST"), ("GTE", "GET"), ("DELTE", "DELETE")]


@pytest.mark.parametrize(("typed", "meant"), MISSPELT)
def test_a_misspelt_method_is_refused_at_decoration(typed: str, meant: str) -> None:
    """``@capped("5/m", methods=["POTS"])`` matched no request: every POST reached the
    view uncapped, without a word (docs/django.md promises a bad method is a
    ConfigError at decoration)."""
    with pytest.raises(ConfigError, match=rf"'{typed}' is not an HTTP method.*'{meant}'"):
        capped("5/m", methods=[typed])


@pytest.mark.parametrize("method", ["PURGE", "PROPFIND", "REPORT", "SEARCH", "MKCOL"])
def test_an_extension_method_is_capped(method: str) -> None:
    """Methods beyond RFC 9110's (WebDAV's, a cache's ``PURGE``) are a cap's to count."""
    clock = ManualClock(1_700_000_000)

    @capped("1/m", methods=[method])
    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock)), MIDDLEWARE=[]):
        made = RequestFactory().generic(method, "/")
        again = RequestFactory().generic(method, "/")
        assert [view(made).status_code, view(again).status_code] == [200, 429]
    fg_django.close()


def test_their_dotted_key_path_names_the_function_to_pass() -> None:
    """django-ratelimit imports a key given as a dotted path
    (``key="myapp.keys.by_tenant"``); the refusal named no way to port it."""
    with pytest.raises(ConfigError, match=r"dotted path.*key=by_tenant"):
        capped("5/m", key="myapp.keys.by_tenant")  # type: ignore[arg-type]


def test_client() -> None:  # the site still answers: nothing above changed its settings
    assert Client().get("/plain").status_code == 200


class _Anyone(FreqGuardUserThrottle):
    pass


class _OwnCode(FreqGuardThrottle):
    def allow_request(self, request: Any, view: Any) -> bool:  # may read view.throttle_scope
        return True


def _api(scope: str, throttles: list[type]) -> type[APIView]:
    class Uploads(APIView):
        throttle_classes = throttles
        throttle_scope = scope

        def post(self, request: Any) -> Response:
            return Response(status=201)

    Uploads.__qualname__ = Uploads.__name__ = f"Uploads{len(throttles)}{scope}"
    return Uploads


urlpatterns = [
    path("unread/", _api("uploads", [_Anyone]).as_view()),
    path("none/", _api("exports", []).as_view()),
    path("scoped/", _api("a", [FreqGuardScopedThrottle]).as_view()),
    path("theirs/", _api("b", [ScopedRateThrottle]).as_view()),
    path("own-code/", _api("c", [_OwnCode]).as_view()),
]


def test_a_throttle_scope_no_throttle_reads_is_a_check_warning() -> None:
    """DRF's classic slip: ``throttle_scope = "uploads"`` on a view whose throttles
    (``DEFAULT_THROTTLE_CLASSES`` without ``ScopedRateThrottle``, or its own list) read no
    view's scope: the scope's rate applies to nothing, and the view is quietly unthrottled
    by it, as in DRF; ``manage.py check`` said nothing. A view with a throttle that reads
    it (freqguard's or DRF's scoped one, or one deciding in its own code) is not named."""
    rest = {**REST, "DEFAULT_THROTTLE_RATES": {**RATES, "uploads": "1/m", "exports": "1/m"}}
    found = [
        m.msg for m in _ours(ROOT_URLCONF=__name__, REST_FRAMEWORK=rest) if m.id == "freqguard.W008"
    ]
    assert len(found) == 2, found
    unread, none = sorted(found, key=lambda text: "unread/" not in text)
    assert "'unread/'" in unread
    assert "'uploads'" in unread
    assert "FreqGuardScopedThrottle" in unread
    assert "'none/'" in none
    assert "'exports'" in none
