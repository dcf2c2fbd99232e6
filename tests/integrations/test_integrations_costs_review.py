"""An adversarial review of 33ca5c9 and 92ec053 (design note 107: a cost is judged by the
capacity as decided for its hit: its tier's rate, its per-key limit, less its priority's
reserve) at the integrations' construction-time cost checks and at their requests: the
WSGI middleware's ``Limit``, Flask's ``fg.capped``, Django's ``capped``, a DRF throttle's
``cost`` and Celery's ``capped_task``. Each finding a failing test; memory backend, pinned
time."""

from __future__ import annotations

from typing import Any

import pytest

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend, Policy, Rule, TierRates
from freqguard.integrations.wsgi import FreqGuardMiddleware, Limit
from tests.conftest import START


def _tier() -> Rule:
    return Rule("10/minute", by="user", name="r", rate_for=TierRates("plan", {"pro": "100/minute"}))


def _pro(request: object) -> dict[str, str]:
    return {"user": "u", "plan": "pro"}


def _page(environ: object, start: Any) -> list[bytes]:
    start("200 OK", [("Content-Type", "text/plain")])
    return [b"page"]


def _get(app: Any, path: str) -> tuple[str, str] | str:
    """A GET through a WSGI app: its status and body, or the exception it let out (what
    the server answers as a 500)."""
    got: dict[str, str] = {}

    def start(status: str, headers: object, exc_info: object = None) -> None:
        got["status"] = status

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "REMOTE_ADDR": "1.2.3.4"}
    try:
        body = b"".join(app(environ, start))
    except Exception as exc:  # what a server turns into a 500
        return f"{type(exc).__name__}: {exc}"
    return got["status"], body.decode()[:80]


# -- construction: a cost a tier, or a priority a rule does not bind, takes ---------------------


def test_a_limit_takes_a_cost_its_tier_s_rate_holds() -> None:
    """``Limit("/report", Rule("10/minute", by="user", name="r",
    rate_for=TierRates("plan", {"pro": "100/minute"})), key=..., cost=40)`` raises
    ``ConfigError: Limit('/report'): cost 40 exceeds the capacity 10 of its narrowest rule``:
    ``_rule_items.check_cost`` reads ``Rule.capacity`` as written, the check 33ca5c9 took
    out of the guard ("refused what a tier ... takes"). The guard admits a pro hit of 40
    on that rule. Expected: the Limit is made (a free request of 40 is the guard's to
    refuse, by name)."""
    limit = Limit("/report", _tier(), key=_pro, cost=40)
    assert limit.cost == 40


def test_a_limit_on_a_policy_takes_a_cost_a_rule_for_other_priorities_would_not() -> None:
    """``Limit("/send", Policy("pp", Rule("10/minute", by="user", name="all"),
    Rule("2/minute", by="user", name="low", only=["low"]), priorities=("low", "high")),
    key=<priority "high">, cost=5)`` raises ``ConfigError: Limit('/send'): cost 5 exceeds
    the capacity 2 of its narrowest rule``: the 'low' rule binds low hits only, and the
    guard admits a high hit of 5. Expected: the Limit is made."""
    policy = Policy(
        "pp",
        Rule("10/minute", by="user", name="all"),
        Rule("2/minute", by="user", name="low", only=["low"]),
        priorities=("low", "high"),
    )
    limit = Limit("/send", policy, key=lambda r: {"user": "u", "priority": "high"}, cost=5)
    assert limit.cost == 5


def test_flask_capped_takes_a_cost_its_tier_s_rate_holds() -> None:
    """``fg.capped(Rule("10/minute", ..., rate_for=TierRates("plan", {"pro":
    "100/minute"})), key=..., cost=40)`` raises ``ConfigError: cost 40 exceeds the capacity
    10 of its narrowest rule`` (flask.py ``check_cost(cost, rates)``, the rules as
    written). Expected: the cap is made; a pro request of 40 is admitted by the guard."""
    pytest.importorskip("flask")
    from freqguard.integrations.flask import FreqGuard

    fg = FreqGuard(guard=Guard(MemoryBackend(), clock=ManualClock(START)))
    fg.capped(_tier(), key=_pro, cost=40)


def test_django_capped_takes_a_cost_its_tier_s_rate_holds() -> None:
    """Django's ``capped(Rule("10/minute", ..., rate_for=TierRates("plan", {"pro":
    "100/minute"})), key=..., cost=40)`` raises ``ConfigError: cost 40 exceeds the capacity
    10 of its narrowest rule`` (``_django_caps``: ``check_cost(cost, items)``, as written).
    Expected: the decorator is made."""
    pytest.importorskip("django")
    from tests.integrations import django_site

    django_site.setup()
    from freqguard.integrations.django import capped

    capped(_tier(), key=_pro, cost=40)


# -- requests: a cost the construction accepted, refused by the decision as a 500 --------------


def test_a_route_s_cost_past_a_priority_s_cap_is_not_a_500() -> None:
    """``Limit("/x", Policy("prio", Rule("10/minute", by="user", name="r", caps={"low":
    4}), priorities=("high", "low")), key=<priority "low">, cost=5)`` under the WSGI
    middleware: made (the check reads the rule's 10, not low's 4); every request then lets
    ``ConfigError: cost 5 exceeds the capacity 4 of rule 'r' (policy 'prio') for this
    hit`` out of the middleware (a 500 from the server), for ever. Expected: refused when
    the Limit is made, or answered as a request (a 429), never an exception out of the
    middleware."""
    policy = Policy(
        "prio",
        Rule("10/minute", by="user", name="r", caps={"low": 4}),
        priorities=("high", "low"),
    )
    try:
        limit = Limit("/x", policy, key=lambda r: {"user": "u", "priority": "low"}, cost=5)
    except ConfigError:
        return  # refused where it is made: the fix's other form
    guard = Guard(MemoryBackend(ManualClock(START)))
    app = FreqGuardMiddleware(_page, guard=guard, limits=[limit])
    answer = _get(app, "/x")
    assert isinstance(answer, tuple), answer
    assert answer[0].startswith("429"), answer


def test_a_flask_route_under_a_per_key_limit_below_its_cost_is_not_a_500() -> None:
    """A Flask view ``@fg.capped(Rule("10/minute", by="user", name="r"), key=<user u>,
    cost=5)``: the first GET is a 200. An operator then sets ``u``'s limit, as the service's
    ``PUT /v1/policies/flask.r/limits/r`` or ``freqguard limit set`` would (both accept any
    rate): ``guard.set_limit("flask.r", "r", "3/minute", user="u")``. Every later GET is
    a **500** (the guard's ``ConfigError: cost 5 exceeds the capacity 3 of rule 'r'``
    raised out of the view's hook): 0.3.0 answered it a 429 (denied for ever), and
    33ca5c9's raise now reaches the client as a server error. Expected: a 429 (the
    route's budget for this key admits nothing of that cost)."""
    pytest.importorskip("flask")
    from flask import Flask

    from freqguard.integrations.flask import FreqGuard

    guard = Guard(MemoryBackend(), clock=ManualClock(START))
    app = Flask(__name__)
    fg = FreqGuard(guard=guard)

    @app.get("/r")
    @fg.capped(Rule("10/minute", by="user", name="r"), key=lambda r: {"user": "u"}, cost=5)
    def r() -> str:
        return "ok"

    fg.init_app(app)
    client = app.test_client()
    assert client.get("/r").status_code == 200
    guard.set_limit("flask.r", "r", "3/minute", user="u")
    assert client.get("/r").status_code == 429


def test_a_drf_throttle_whose_cost_its_own_rate_cannot_hold_is_refused_or_checked() -> None:
    """``class Heavy(FreqGuardThrottle): rate = "10/minute"; cost = 50`` is accepted as the
    class is made (``__init_subclass__`` calls ``check_cost(cls.cost, ())``: no rules), and
    ``manage.py check`` says nothing (no freqguard message); every request to a view it
    throttles raises ``ConfigError: cost 50 exceeds the capacity 10 of rule 'sl.10.60s'
    ... for this hit`` out of the view: a 500, known only when traffic comes. Expected:
    refused as the class is made (its rate and cost are both class attributes), or a
    freqguard check message naming the cost."""
    pytest.importorskip("rest_framework")
    from tests.integrations import django_site

    django_site.setup()
    from django.core import checks
    from django.test import override_settings
    from django.urls import path
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from freqguard.integrations.drf import FreqGuardThrottle
    from tests.integrations.drf_rig import REST

    try:

        class Heavy(FreqGuardThrottle):
            rate = "10/minute"
            cost = 50

    except ConfigError as exc:
        refused = str(exc)
    else:
        refused = ""
    if "cost" in refused:
        return  # refused as the class is made: the fix's one form

    class Report(APIView):
        throttle_classes = (Heavy,)

        def get(self, request: object) -> Response:
            return Response("report")

    urls = type("urls", (), {"urlpatterns": [path("report", Report.as_view())]})
    guard = Guard(MemoryBackend(ManualClock(START)))
    with override_settings(ROOT_URLCONF=urls, REST_FRAMEWORK=REST, FREQGUARD_BACKEND=guard):
        from django.urls import resolve
        from rest_framework.test import APIRequestFactory

        with pytest.raises(ConfigError, match="cost 50 exceeds"):  # what the request does
            resolve("/report").func(APIRequestFactory().get("/report"))
        found = [m.msg for m in checks.run_checks() if (m.id or "").startswith("freqguard.")]
    assert any("cost 50" in message for message in found), found


def test_celery_capped_task_refuses_a_cost_it_never_charges() -> None:
    """``capped_task(app, Policy("cp", Rule("10/minute", by="user")), guard=g, cost=5)``:
    ``capped_task`` has no ``cost``; ``check_options`` lets ``cost`` through (no Celery
    option is near it) and ``app.task`` keeps it as an attribute no worker reads: each run
    hits the policy with a cost of 1 (a run leaves 9 of 10). Design note 107: "Options
    accepted and then read by nothing are refused where they are given". Expected: a
    ConfigError at decoration naming ``cost``."""
    pytest.importorskip("celery")
    from celery import Celery

    from freqguard.integrations.celery import capped_task

    app = Celery("costs", broker="memory://", backend="cache+memory://", set_as_current=False)
    app.conf.task_always_eager = True
    app.conf.task_store_eager_result = False
    guard = Guard(MemoryBackend(), clock=ManualClock(START))
    policy = Policy("cp", Rule("10/minute", by="user"))
    try:
        try:
            decorate = capped_task(app, policy, guard=guard, cost=5)
        except ConfigError as exc:
            assert "cost" in str(exc), exc  # noqa: PT017 (refused: its message is the test)
            return

        def send(user: str) -> str:
            return user

        decorate(send).apply(kwargs={"user": "u"})
        remaining = guard.peek("cp", user="u").remaining
        raise AssertionError(f"cost=5 accepted; one run left {remaining} of 10 (charged 1)")
    finally:
        app.close()
