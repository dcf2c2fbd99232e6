"""``freqguard.E008`` (``manage.py check``): a view's ``@capped(..., cost=5)`` decided with
default limits that cannot hold it (charged the cost too, in one hit) is an error, where
freqguard's middleware decides the views; not where no middleware charges the defaults,
and never a crash of the checks. Each a review's finding, written failing first. This
module is its own URLconf."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("django")
from tests.integrations import django_site

django_site.setup()
from django.core import checks  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.urls import path  # noqa: E402

from freqguard.integrations.django import FreqGuardMiddleware, capped  # noqa: E402

OURS = "freqguard.integrations.django.FreqGuardMiddleware"


class CompanyMiddleware(FreqGuardMiddleware):
    """A project's own middleware over freqguard's (a hook added, the deciding unchanged)."""


@capped("10/minute", cost=5)
def report(request: HttpRequest) -> HttpResponse:
    return HttpResponse("report")


urlpatterns = [path("report/", report)]


def _run(middleware: list[str]) -> tuple[list[int], list[str]]:
    """Two requests to the view and E008's messages, with ``middleware`` and default limits
    of 2/minute."""
    with override_settings(
        ROOT_URLCONF=__name__, MIDDLEWARE=middleware, FREQGUARD_DEFAULT_LIMITS="2/minute"
    ):
        client = Client(raise_request_exception=False)
        codes = [client.get("/report/").status_code for _ in range(2)]
        found = [m.msg for m in checks.run_checks() if m.id == "freqguard.E008"]
    return codes, found


def test_without_the_middleware_the_defaults_are_not_charged() -> None:
    """No middleware decides the view with the default limits: the cap is decided on its
    own ("10/minute" holds a cost of 5), every request answered; E008 said otherwise, an
    Error that stopped ``runserver`` and ``migrate``."""
    middleware = [m for m in django_site.SETTINGS["MIDDLEWARE"] if m != OURS]
    assert _run(middleware) == ([200, 200], [])


@pytest.mark.parametrize(
    "listed",
    [f"{__name__}.CompanyMiddleware", f"{__name__}.FreqGuardMiddleware"],
    ids=["a subclass", "re-exported"],
)
def test_the_middleware_is_seen_by_another_path(listed: str) -> None:
    """A subclass, or the class re-exported by a project's module, decides every view with
    the default limits all the same (every request refused: a 429 since design note 107,
    a 500 before): E008 is said (it compared the dotted path as a string)."""
    middleware = [listed if m == OURS else m for m in django_site.SETTINGS["MIDDLEWARE"]]
    codes, found = _run(middleware)
    assert codes == [429, 429]
    assert len(found) == 1, found
    assert "cost 5 exceeds the capacity 2" in found[0]


def test_a_middleware_failing_as_it_is_imported_leaves_the_checks_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E008 imports each ``MIDDLEWARE`` entry to read its MRO; one whose module raises as it
    is imported (``ImproperlyConfigured`` for a setting the environment lacks) made
    freqguard's check raise out of ``run_checks``: every command that runs the checks
    stopped. Such an entry is Django's to report."""
    (tmp_path / "strict_middleware.py").write_text(
        "from django.core.exceptions import ImproperlyConfigured\n"
        "raise ImproperlyConfigured('STRICT_AUDIT_URL is not set')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    middleware = ["strict_middleware.AuditMiddleware", *django_site.SETTINGS["MIDDLEWARE"]]
    with override_settings(MIDDLEWARE=middleware):
        found = checks.run_checks()
    assert not [m for m in found if m.id == "freqguard.E008"]
