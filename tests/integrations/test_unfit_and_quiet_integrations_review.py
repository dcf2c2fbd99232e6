"""An adversarial review of e0cdb82 (a cost past the capacity as decided for a hit raised as
``Unfit``, which "the HTTP integrations answer as that denial, a 429"), 15a9145 (Django:
W006/W007 in ``_django_budgets.middleware_checks``; Flask's default Rules named
``default.<id>``) and 29d1a61 (quiet hours "no quota of a billion"). Each finding a failing
test; memory backend, pinned time, in process."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any, ClassVar

import httpx
import pytest

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site

django_site.setup()

from django.core import checks  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import Client, RequestFactory, override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard import (  # noqa: E402
    AsyncGuard,
    ConfigError,
    Decision,
    Guard,
    ManualClock,
    MemoryBackend,
    Policy,
    QuietHours,
    Rule,
)
from freqguard.integrations import django as fg_django  # noqa: E402
from freqguard.integrations.django import capped, client_ip, header  # noqa: E402
from tests.conftest import START  # noqa: E402

SITE = django_site.SETTINGS


def _page(environ: object, start: Any) -> list[bytes]:
    start("200 OK", [("Content-Type", "text/plain")])
    return [b"page"]


class _Seen:
    """An observer that keeps every decision it is told of."""

    def __init__(self) -> None:
        self.decisions: list[Decision] = []

    def decided(self, decision: Decision, context: object, seconds: float) -> None:
        self.decisions.append(decision)

    def failed(self, error: object, policy: str, backend: str) -> None:
        pass


# -- Unfit answered as a 429 -------------------------------------------------------------------


def test_a_429_answered_from_unfit_is_told_to_the_guards_observers() -> None:
    """WSGI ``FreqGuardMiddleware(app, guard=Guard(..., observers=[seen]),
    limits=[Limit("/r", Policy("p", Rule("10/minute", by="user", name="r")), key=lambda
    request: {"user": "u"}, cost=5)])``, and ``guard.set_limit("p", "r", "3/minute",
    user="u")``. ``GET /r`` is answered 429 (e0cdb82: the store's denial carried by
    ``Unfit``, answered by ``Decider.decide``), yet the guard's observers were told of no
    decision: ``PolicyPlan.decide`` raises before ``Hits.hit_done`` tells them, so the
    metrics (``freqguard_decisions_total``, the service's ``/v1/stats``) count none of the
    429s the site sent. Expected: the observers told of the denial the response answers
    (one decision, not allowed)."""
    from freqguard.integrations.wsgi import FreqGuardMiddleware, Limit

    seen = _Seen()
    clock = ManualClock(START)
    guard = Guard(MemoryBackend(clock), clock=clock, observers=[seen])
    policy = Policy("p", Rule("10/minute", by="user", name="r"))
    limit = Limit("/r", policy, key=lambda request: {"user": "u"}, cost=5)
    app = FreqGuardMiddleware(_page, guard=guard, limits=[limit])
    guard.set_limit("p", "r", "3/minute", user="u")
    statuses: list[str] = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/r", "REMOTE_ADDR": "1.2.3.4"}
    b"".join(app(environ, lambda status, headers, exc_info=None: statuses.append(status)))
    assert statuses == ["429 Too Many Requests"]
    assert [d.allowed for d in seen.decisions] == [False]


def test_fastapis_enforce_answers_a_cost_past_a_per_key_limit_as_a_429() -> None:
    """``freqguard.integrations.fastapi.enforce`` ("answers as the middleware does"):
    ``Policy("p", Rule("10/minute", by="user", name="r"))`` on an ``AsyncGuard``,
    ``set_limit("p", "r", "3/minute", user="u")``, then ``await enforce(guard, "p", 5,
    user="u")``. e0cdb82 answers that hit as the store's denial (429) in the middleware,
    ``limit_dependency`` and every ``Decider``; ``enforce`` calls ``guard.hit`` itself and
    catches only ``BackendUnavailable``, so ``Unfit`` (a ``ConfigError``) escapes the
    endpoint: a 500. Expected: ``Refused`` with status 429, as a denial."""
    from freqguard.integrations.fastapi import Refused, enforce

    clock = ManualClock(START)
    guard = AsyncGuard(MemoryBackend(clock), [Policy("p", Rule("10/minute", by="user", name="r"))])

    async def run() -> object:
        await guard.set_limit("p", "r", "3/minute", user="u")
        try:
            await enforce(guard, "p", 5, user="u")
        except Refused as refused:
            return refused.status_code
        except ConfigError as error:
            return f"ConfigError: {error}"
        return "admitted"

    assert asyncio.run(run()) == 429


# -- Flask: default Rules named default.<id> -----------------------------------------------------


def test_a_default_rule_whose_name_has_no_room_for_default_is_not_a_500() -> None:
    """15a9145 names a Flask default Rule ``default.<id>`` (``Route.build``, by
    ``rekeyed``). ``FREQGUARD_DEFAULT_LIMITS = [Rule("10/minute", by="client",
    name="n" * 60)]`` (a valid name: up to 64 characters) passes ``init_app``, whose check
    (``_flask_habits.default_limits``) builds the policy without the prefix; every request
    then builds ``Rule(..., name="default." + "n" * 60)``, 68 characters: ``ConfigError:
    rule name must be 1 to 64 characters``, a 500 on every route. Expected: the request
    served (200), or the name refused at ``init_app``."""
    from flask import Flask

    from freqguard.integrations.flask import FreqGuard

    fg = FreqGuard(guard=Guard(MemoryBackend(ManualClock(START))))
    app = Flask("review_r4")
    app.config["FREQGUARD_DEFAULT_LIMITS"] = [Rule("10/minute", by="client", name="n" * 60)]
    app.add_url_rule("/b", "b", lambda: "ok")
    try:
        fg.init_app(app)
    except ConfigError:
        return  # refused where it is given: as expected
    assert app.test_client().get("/b").status_code == 200


# -- the service: quiet hours ----------------------------------------------------------------


def test_the_service_shows_no_quota_of_a_billion_for_quiet_hours() -> None:
    """29d1a61: quiet hours are "no quota of a billion in headers or inspect" (the
    pseudo-rule's rate is no one's). The decision service, on ``Policy("q",
    Rule("10/minute", by="u", name="r"), quiet=QuietHours("21:00", "08:00", tz="UTC"))``
    at noon UTC: ``POST /v1/policies/q/hit {"context": {"u": "a"}}`` answers, among its
    ``rules``, ``{"rule": "quiet-hours", "remaining": 1000000000, "limit": 1000000000}``
    (``service/schema.decision`` reads ``rule.capacity``), and ``POST
    /v1/policies/q/limits`` ``{"quiet-hours": "1000000000/day"}``, while ``GET
    /v1/policies`` writes the same rule ``"quiet hours"``. Expected: no 1000000000 in
    either answer."""
    from freqguard.service import create_app

    noon = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc).timestamp()
    clock = ManualClock(noon)
    policy = Policy(
        "q", Rule("10/minute", by="u", name="r"), quiet=QuietHours("21:00", "08:00", tz="UTC")
    )
    guard = AsyncGuard(MemoryBackend(clock), [policy], clock=clock)

    async def run() -> list[str]:
        transport = httpx.ASGITransport(app=create_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            body = {"context": {"u": "a"}}
            return [
                (await http.post(f"/v1/policies/q/{call}", json=body)).text
                for call in ("hit", "limits")
            ]

    hit, limits = asyncio.run(run())
    assert "1000000000" not in hit, hit
    assert "1000000000" not in limits, limits


# -- Django: peek and hit(request, name) of a cap answered 429 by Unfit ---------------------------


@capped("10/minute", key=client_ip(), name="review-r4-costly", cost=5)
def costly(request: HttpRequest) -> HttpResponse:
    return HttpResponse("costly")


def test_peek_answers_what_the_named_cap_answers_under_a_per_key_limit() -> None:
    """``@capped("10/minute", key=client_ip(), name="review-r4-costly", cost=5)`` and a
    per-key limit of 3/minute for the client (``guard.set_limit("review-r4-costly",
    "sl.10.60s", "3/minute", client="127.0.0.1")``): the view answers 429 (e0cdb82, as the
    store's denial), but ``peek(request, "review-r4-costly")``, "what ``request`` would
    get from the caps named ``name``" (django-ratelimit's ``is_ratelimited``), raises
    ``Unfit`` (a ``ConfigError``: its docstring lists only "no cap of that name"); a login
    view asking ``peek`` first answers a 500. Expected: a decision, not allowed, as the
    cap's."""
    guard = Guard(MemoryBackend(ManualClock(START)))
    with override_settings(FREQGUARD_BACKEND=guard):
        try:
            request = RequestFactory().get("/")
            first = fg_django.peek(request, "review-r4-costly")
            assert first.allowed
            guard.set_limit(first.policy, "sl.10.60s", "3/minute", client="127.0.0.1")
            assert costly(RequestFactory().get("/")).status_code == 429
            try:
                found: object = fg_django.peek(request, "review-r4-costly").allowed
            except ConfigError as error:
                found = f"ConfigError: {error}"
        finally:
            fg_django.close()
    assert found is False


@capped("5/minute", key=header("X-Api-Key"), name="review-r4-keyed")
def keyed(request: HttpRequest) -> HttpResponse:
    return HttpResponse("keyed")


def test_peek_while_switched_off_answers_as_the_cap_does_for_a_request_it_cannot_key() -> None:
    """15a9145: ``peek(request, name)`` "with ``FREQGUARD_ENABLED = False``, allowed, every
    rule whole, as the caps are then". ``@capped("5/minute", key=header("X-Api-Key"),
    name="review-r4-keyed")``, switched off, and a request without the header: the view
    answers 200 (a switched-off cap asks no key), but ``peek`` and ``hit(request,
    "review-r4-keyed")`` raise ``BadRequest: header 'X-Api-Key' is required here``:
    ``_named`` runs the caps' key function (``Decider.prepare``) before it looks at the
    switch. A login view asking ``not peek(...).allowed`` (django-ratelimit's
    ``is_ratelimited``, False while ``RATELIMIT_ENABLE = False``) answers a 400 or a 500.
    Expected: both answer allowed, as the cap does."""
    guard = Guard(MemoryBackend(ManualClock(START)))
    request = RequestFactory().get("/")
    found: list[object] = []
    with override_settings(FREQGUARD_BACKEND=guard, FREQGUARD_ENABLED=False):
        try:
            assert keyed(request).status_code == 200
            for call in (fg_django.peek, fg_django.hit):
                try:
                    found.append(call(request, "review-r4-keyed").allowed)
                except Exception as error:  # what the view would let out
                    found.append(f"{type(error).__name__}: {error}")
        finally:
            fg_django.close()
    assert found == [True, True]


# -- Django: freqguard.W006 ------------------------------------------------------------------


class _Anonymous(APIView):
    """DEFAULT_THROTTLE_CLASSES apply."""

    def get(self, request: Request) -> Response:
        return Response("ok")


class _Urls:
    urlpatterns: ClassVar[list[Any]] = [path("anon", _Anonymous.as_view())]


def test_w006_is_said_when_the_default_throttle_has_a_rate_of_its_own() -> None:
    """15a9145's W006: ``FREQGUARD_DEFAULT_LIMITS`` set and neither the middleware "nor a
    freqguard DRF throttle without a rate of its own (it falls back on them)". A site
    without the middleware, ``DEFAULT_THROTTLE_CLASSES = [FreqGuardAnonThrottle]`` and
    ``DEFAULT_THROTTLE_RATES["anon"] = "100/day"``, ``FREQGUARD_DEFAULT_LIMITS =
    "2/minute"``: the throttle reads its scope's rate, never the default limits, so they
    cap nothing (shown: three GETs of an APIView admitted). No W006: ``throttle_checks``
    passes ``fallen = default or ...``, ``default`` being any freqguard class in
    ``DEFAULT_THROTTLE_CLASSES`` whatever its rate. Expected: W006."""
    said = w006_site(_Urls, "FreqGuardAnonThrottle", {"anon": "100/day"}, "/anon")
    assert "freqguard.W006" in said, said


def w006_site(urls: object, throttle: str, rates: dict[str, str], path: str) -> list[str]:
    """The check's messages for a site of ``urls`` without freqguard's middleware, whose
    default DRF throttle (``freqguard.integrations.drf.<throttle>``) reads ``rates``, and
    ``FREQGUARD_DEFAULT_LIMITS`` of 2 a minute; three GETs of ``path`` are all admitted
    first (the default limits cap nothing there)."""
    rest = {
        **SITE["REST_FRAMEWORK"],
        "DEFAULT_THROTTLE_CLASSES": [f"freqguard.integrations.drf.{throttle}"],
        "DEFAULT_THROTTLE_RATES": rates,
    }
    settings = {
        "ROOT_URLCONF": urls,
        "MIDDLEWARE": ["tests.integrations.django_users.HeaderUserMiddleware"],
        "FREQGUARD_DEFAULT_LIMITS": "2/minute",
        "REST_FRAMEWORK": rest,
    }
    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(ManualClock(START))), **settings):
        try:
            client = Client()
            assert [client.get(path).status_code for _ in range(3)] == [200, 200, 200]
        finally:
            fg_django.close()
        return [m.id for m in checks.run_checks() if m.id and m.id.startswith("freqguard.")]
