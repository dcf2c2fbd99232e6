"""A django-ratelimit user's second review of docs/coming-from/django-ratelimit.md and
docs/django.md, porting a project's class-based views and settings: each test is an idiom
carried over where freqguard answered otherwise than the pages (or django-ratelimit) said.
Each failed on the code it was written against, for the reason its docstring gives."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("django_ratelimit", reason="django-ratelimit is not installed")
import django_ratelimit.core
from django.core import checks
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from django_ratelimit.decorators import ratelimit

from freqguard import Guard, ManualClock, MemoryBackend
from freqguard.integrations import django as fg_django
from freqguard.integrations.django import capped, client_ip
from freqguard.options import fit_name
from tests.conftest import flush
from tests.integrations import django_site
from tests.servers import RedisServer

SITE = django_site.SETTINGS
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def guard(clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Guard]:
    """The site's guard on the test's clock; django-ratelimit's on it too."""
    monkeypatch.setattr(django_ratelimit.core, "time", types.SimpleNamespace(time=clock.now))
    cache.clear()
    made = Guard(MemoryBackend(clock))
    with override_settings(FREQGUARD_BACKEND=made):
        yield made
    fg_django.close()


# --- the views: class-based, decorated as django-ratelimit's docs and Django's show ---


@method_decorator(capped("2/m", key=client_ip()), name="dispatch")
class DispatchA(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("a")


@method_decorator(capped("2/m", key=client_ip()), name="dispatch")
class DispatchB(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("b")


class TheirLimitedPost:
    """A mixin of a project's forms (login, signup): their POSTs at 2 a minute."""

    @method_decorator(ratelimit(key="ip", rate="2/m", method="POST"))
    def post(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse(type(self).__name__)


class OurLimitedPost:
    """The same mixin ported as the coming-from page's first row writes it."""

    @method_decorator(capped("2/m", key=client_ip(), methods=["POST"]))
    def post(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse(type(self).__name__)


@method_decorator(csrf_exempt, name="dispatch")
class TheirLogin(TheirLimitedPost, View):
    pass


@method_decorator(csrf_exempt, name="dispatch")
class TheirSignup(TheirLimitedPost, View):
    pass


@method_decorator(csrf_exempt, name="dispatch")
class OurLogin(OurLimitedPost, View):
    pass


@method_decorator(csrf_exempt, name="dispatch")
class OurSignup(OurLimitedPost, View):
    pass


class Urls:
    urlpatterns: ClassVar[list[Any]] = [
        path("dispatch-a", DispatchA.as_view(), name="dispatch-a"),
        path("dispatch-b", DispatchB.as_view(), name="dispatch-b"),
        path("their-login", TheirLogin.as_view(), name="their-login"),
        path("their-signup", TheirSignup.as_view(), name="their-signup"),
        path("our-login", OurLogin.as_view(), name="our-login"),
        path("our-signup", OurSignup.as_view(), name="our-signup"),
    ]


def _site(**more: Any) -> Any:
    return override_settings(ROOT_URLCONF=Urls, MIDDLEWARE=SITE["MIDDLEWARE"], **more)


def _statuses(method: str, *paths: str) -> list[int]:
    client = Client(raise_request_exception=False)
    return [getattr(client, method)(p).status_code for p in paths]


# --- the tests ------------------------------------------------------------------------


def test_a_dispatch_cap_is_named_after_its_view_whatever_was_asked_first(guard: Guard) -> None:
    """Django's way to decorate a class-based view is ``@method_decorator(dec,
    name="dispatch")``; django-ratelimit's users write ``@method_decorator(ratelimit(key="ip",
    rate="5/m"), name="dispatch")`` and port it as ``capped("5/m", key=client_ip())``.
    docs/django.md: "A method's cap (``method_decorator``) is decided [...] on a policy of
    its own (``django.view.<module>.<class>.<method>``, or its ``name=``)". The policy is
    named after the function decorated, Django's own ``View.dispatch``, numbered in the
    order the process first served the views (``...View.dispatch``, ``...dispatch.2``): the
    view asked second here gets the plain name another worker may have given the other
    view (see the Redis test below). Expected: each view's cap on its own class's name."""
    with _site():
        assert _statuses("get", "/dispatch-b", "/dispatch-a") == [200, 200]
    expected = {fit_name(f"django.view.{__name__}.Dispatch{view}.dispatch") for view in "AB"}
    assert expected <= set(guard.policies), sorted(guard.policies)


WORKER = """
import sys
from django.test import Client, override_settings
from tests.integrations import django_site
from tests.integrations.test_coming_from_django_ratelimit_review2 import Urls
with override_settings(ROOT_URLCONF=Urls, FREQGUARD_BACKEND=sys.argv[1]):
    client = Client(raise_request_exception=False)
    print(*[client.get(path).status_code for path in sys.argv[2:]])
"""


def _worker(url: str, *paths: str) -> list[int]:
    """A Django process of the site on the Redis at ``url`` (a worker of gunicorn's, say),
    serving ``paths`` in turn: their statuses."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ran = subprocess.run(
        [sys.executable, "-c", WORKER, url, *paths],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    return [int(status) for status in ran.stdout.split()]


@pytest.mark.slow
def test_two_workers_on_redis_keep_each_dispatch_caps_budget_apart(
    redis_server: RedisServer,
) -> None:
    """Two workers of one site on one Redis (docs/django.md: "use Redis when several
    workers serve the site"), two class-based views capped on ``dispatch`` as above, 2 a
    minute each. Worker 1 first serves ``/dispatch-a`` twice; worker 2's first request is
    ``/dispatch-b``, which this client has never asked for: django-ratelimit (its group is
    the view's class and method) and freqguard's page (a policy per view) both admit it.
    Each worker named the cap of the view it served first ``...View.dispatch``, so worker
    2's ``/dispatch-b`` is decided on ``/dispatch-a``'s spent budget: 429."""
    flush([redis_server])
    url = f"redis://127.0.0.1:{redis_server.port}"
    assert _worker(url, "/dispatch-a", "/dispatch-a") == [200, 200]
    assert _worker(url, "/dispatch-b", "/dispatch-a") == [200, 429]


def test_a_mixins_method_cap_is_each_views_own_budget(guard: Guard) -> None:
    """A mixin whose ``post`` is capped, shared by a login and a signup view.
    django-ratelimit's group is the view's class and the method
    (``fn.__self__.__class__``), so each view has its own 2 a minute; the page's first row
    says ``@capped("5/m", key=client_ip())`` gives "the same answers to a burst", and
    docs/django.md that a method's cap is a policy of its own, ``<class>.<method>``.
    freqguard names the cap once, after the mixin (``OurLimitedPost.post``): one budget
    for every view using it, so two logins spend the signup's attempts (429)."""
    with _site():
        theirs = _statuses("post", "/their-login", "/their-login", "/their-signup")
        ours = _statuses("post", "/our-login", "/our-login", "/our-signup")
    assert theirs == [200, 200, 200]
    assert ours == theirs


def test_their_ip_meta_key_warning_names_the_key_a_cap_is_given() -> None:
    """django-ratelimit's ``RATELIMIT_IP_META_KEY = "HTTP_X_REAL_IP"`` (behind a proxy)
    changes what every ``key="ip"`` reads. The page ports ``key="ip"`` as
    ``key=client_ip()``; ``manage.py check`` warns of the setting with "set FREQGUARD_KEY".
    A user who does so (``FREQGUARD_KEY = client_ip(["10.0.0.0/8"], header="x-real-ip")``)
    keeps every ported ``@capped(..., key=client_ip())`` keyed on the proxy's address,
    one budget for all clients: ``FREQGUARD_KEY`` is read only by caps given no ``key=``.
    Expected: the warning says where django-ratelimit's setting went, the caps' ``key=``
    too (``client_ip([...], header=...)``), not only ``FREQGUARD_KEY``."""
    with override_settings(RATELIMIT_IP_META_KEY="HTTP_X_REAL_IP"):
        [said] = [m.msg for m in checks.run_checks() if m.id == "freqguard.W001"]
    assert "key=" in said.replace("FREQGUARD_KEY", ""), said
    assert "header=" in said, said
