"""A DRF throttle whose rate is set per request (a user's plan: ``self.rate`` in
``allow_request``, or ``get_rate()``), as DRF's docs and projects write it: every request is
decided at exactly the rate its throttle had, while threads of other plans decide at once on
the same scope, and the scope stays one budget per user whatever their plan. Each decision
is checked against a reference sliding log per user, on memory and on a real Redis, time
pinned (the race is the registry's, not the clock's)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import pytest

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend
from freqguard.backends.redis import RedisBackend

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site

django_site.setup()
from django.test import override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.test import APIClient, APIRequestFactory  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard.integrations import django as fg_django  # noqa: E402
from freqguard.integrations import drf  # noqa: E402

#: each plan's rates, and their (limit, window in seconds) for the reference
PLANS = {"gold": "6/minute", "tin": "2/30s", "lead": "3/hour", "duo": "4/minute; 5/hour"}
LIMITS = {
    "gold": [(6, 60)],
    "tin": [(2, 30)],
    "lead": [(3, 3600)],
    "duo": [(4, 60), (5, 3600)],
}


def plan_of(user: str) -> str:
    return user.split("-")[0]  # "gold-2": a gold user


class PlanThrottle(drf.FreqGuardThrottle):
    """DRF's recipe: the rate set at each request by the user's plan."""

    scope = "plan"

    def allow_request(self, request: Request, view: Any) -> bool:
        self.rate = PLANS[plan_of(str(getattr(request.user, "pk", "")))]
        return super().allow_request(request, view)


class PlanByGetRate(drf.FreqGuardThrottle):
    """The other recipe: ``get_rate()`` overridden, the plan noted in ``allow_request``."""

    scope = "plan-by-get-rate"

    def allow_request(self, request: Request, view: Any) -> bool:
        self.plan = plan_of(str(getattr(request.user, "pk", "")))
        return super().allow_request(request, view)

    def get_rate(self) -> str:
        return PLANS[self.plan]


class RollingPlan(PlanThrottle):
    scope = "rolling-plan"
    strategy = "rolling-window"


class Bare(drf.FreqGuardThrottle):
    """A throttle of no code of its own, given its rate by the view (below)."""

    scope = "bare"


def _view(throttle: type[Any]) -> Any:
    def get(self: APIView, request: Request) -> Response:
        return Response("ok")

    def get_throttles(self: APIView) -> list[Any]:  # the view sets the instance's rate
        made = Bare()
        made.rate = PLANS[plan_of(str(getattr(self.request.user, "pk", "")))]
        return [made]

    own = {"get_throttles": get_throttles} if throttle is Bare else {}
    made: type[APIView] = type(
        "View", (APIView,), {"throttle_classes": [throttle], "get": get, **own}
    )
    return made.as_view()


class Lockstep(Guard):
    """A guard whose hits wait for one another: every request of a round has chosen its
    throttle's route (and registered what it registers) before any is decided."""

    def __init__(self, backend: Any, clock: ManualClock, parties: int) -> None:
        super().__init__(backend, clock=clock)
        self.barrier = threading.Barrier(parties, timeout=20)

    def hit(self, policy: str, cost: int = 1, **ctx: object) -> Any:
        self.barrier.wait()
        return super().hit(policy, cost, **ctx)


@pytest.fixture(params=["memory", "redis", "cluster"])
def store(request: pytest.FixtureRequest, clock: ManualClock) -> Any:
    if request.param == "memory":
        return MemoryBackend(clock)
    found: RedisBackend = request.getfixturevalue(f"{request.param}_backend")
    return found


@pytest.fixture
def settle() -> Iterator[None]:
    yield
    fg_django.close()


class Reference:
    """Each user's admitted requests, as an exact sliding log of their plan decides."""

    def __init__(self) -> None:
        self.admitted: dict[str, list[float]] = {}

    def round(self, user: str, now: float, asked: int) -> int:
        """How many of ``asked`` requests at ``now`` the user's plan admits (every rate)."""
        times = self.admitted.setdefault(user, [])
        granted = asked
        for limit, window in LIMITS[plan_of(user)]:
            held = sum(1 for at in times if at > now - window)
            granted = max(0, min(granted, limit - held))
        times.extend([now] * granted)
        return granted


def _request(view: Any, user: str) -> int:
    response = view(APIRequestFactory().get("/", HTTP_X_USER=user))
    return int(response.status_code)


@pytest.mark.parametrize("throttle", [PlanThrottle, PlanByGetRate, RollingPlan, Bare])
def test_two_plans_deciding_at_once_are_each_decided_at_their_own_rate(
    store: Any, clock: ManualClock, settle: None, throttle: type[Any]
) -> None:
    """Each round a gold, a tin and a duo user's requests are decided together (their hits
    wait for one another): each must be admitted as its own plan's sliding log admits, every
    round (duo's two rates, in one hit, beside plans of one)."""
    guard = Lockstep(store, clock, 3)
    view, reference = _view(throttle), Reference()
    users = ["gold-1", "tin-1", "duo-1"]
    with override_settings(FREQGUARD_BACKEND=guard), ThreadPoolExecutor(3) as pool:
        for turn in range(20):
            codes = list(pool.map(lambda user: _request(view, user), users))
            for user, code in zip(users, codes, strict=True):
                expected = reference.round(user, clock.now(), 1)
                assert code == (200 if expected else 429), (turn, user, code)
            clock.advance(7)


@pytest.mark.parametrize("throttle", [PlanThrottle, RollingPlan])
def test_many_threads_of_many_plans_against_a_reference(
    store: Any, clock: ManualClock, settle: None, throttle: type[Any]
) -> None:
    """Threads free to interleave: users of three plans, several requests each a round, all
    at once in shuffled order; each user's admitted count a round is the reference's."""
    guard = Guard(store, clock=clock)
    view, reference, draw = _view(throttle), Reference(), random.Random(115)
    users = [f"{plan}-{n}" for plan in PLANS for n in range(2)]
    with override_settings(FREQGUARD_BACKEND=guard), ThreadPoolExecutor(8) as pool:
        for turn in range(30):
            asked = {user: draw.randint(0, 3) for user in users}
            order = [user for user, times in asked.items() for _ in range(times)]
            draw.shuffle(order)
            codes = list(pool.map(lambda user: _request(view, user), order))
            now = clock.now()
            for user in users:
                got = sum(
                    1 for who, code in zip(order, codes, strict=True) if who == user and code == 200
                )
                assert got == reference.round(user, now, asked[user]), (turn, user)
            clock.advance(7)


@pytest.mark.parametrize("throttle", [PlanThrottle, RollingPlan])
def test_a_user_who_changes_plan_keeps_one_budget(
    store: Any, clock: ManualClock, settle: None, throttle: type[Any]
) -> None:
    """The scope is one budget a user, whatever their plan: two tin requests, then the user
    upgraded to gold in the same minute has four left of gold's six."""
    global PLANS
    view = _view(throttle)
    with override_settings(FREQGUARD_BACKEND=Guard(store, clock=clock)):
        assert [_request(view, "tin-9") for _ in range(3)] == [200, 200, 429]
        original, PLANS = PLANS, {**PLANS, "tin": PLANS["gold"]}  # upgraded
        try:
            assert [_request(view, "tin-9") for _ in range(5)] == [200] * 4 + [429]
        finally:
            PLANS = original


def test_a_plan_throttle_registers_its_policy_once(
    store: Any, clock: ManualClock, settle: None
) -> None:
    """Plans alternating request by request are tiers of one policy, registered once, and
    once more for a plan of more rates (never again for one of fewer): the registry's
    entry for the scope is not replaced as they alternate."""
    guard = Guard(store, clock=clock)
    view = _view(PlanThrottle)
    with override_settings(FREQGUARD_BACKEND=guard):
        _request(view, "gold-1")
        first = guard.policies["drf.plan"]
        for user in ["tin-1", "lead-1", "gold-1", "tin-2"] * 3:
            _request(view, user)
        assert guard.policies["drf.plan"] is first
        _request(view, "duo-1")
        grown = guard.policies["drf.plan"]
        assert [rule.id for rule in grown.rules] == ["plan", "plan.2"]
        for user in ["tin-1", "duo-1", "gold-1", "duo-2"] * 3:
            _request(view, user)
        assert guard.policies["drf.plan"] is grown


class Noting(PlanThrottle):
    """The plan throttle, keeping each instance that decided (for its ``wait()``)."""

    scope = "noting"
    seen: ClassVar[list[drf.FreqGuardThrottle]] = []

    def allow_request(self, request: Request, view: Any) -> bool:
        Noting.seen.append(self)
        return super().allow_request(request, view)


class NotingView(APIView):
    throttle_classes = (Noting,)

    def get(self, request: Request) -> Response:
        return Response("ok")


urlpatterns = [path("plan", NotingView.as_view())]


def test_headers_and_wait_are_each_plans_own(clock: ManualClock, settle: None) -> None:
    """The rate-limit headers (the middleware's) and ``wait()`` of a request are those of
    its plan's rate, under the rule's one name (the scope's), whatever plan came first."""
    Noting.seen.clear()
    guard = Guard(MemoryBackend(clock), clock=clock)
    with override_settings(FREQGUARD_BACKEND=guard, ROOT_URLCONF=__name__):
        gold, tin = APIClient(headers={"x-user": "gold-1"}), APIClient(headers={"x-user": "tin-1"})
        first = gold.get("/plan")
        assert first["RateLimit-Policy"] == '"noting";q=6;w=60'
        assert first["RateLimit"] == '"noting";r=5;t=60'
        tins = [tin.get("/plan") for _ in range(3)]
        assert [r.status_code for r in tins] == [200, 200, 429]
        assert tins[0]["RateLimit-Policy"] == '"noting";q=2;w=30'
        assert tins[2]["Retry-After"] == "30"
        assert Noting.seen[-1].wait() == 30.0
        clock.advance(10)
        assert gold.get("/plan")["RateLimit"] == '"noting";r=4;t=60'
        assert Noting.seen[-1].wait() is None  # admitted


class OtherPlan(drf.FreqGuardThrottle):
    """A second class of the plan scope, its own code giving its rate too."""

    scope = "plan"

    def get_rate(self) -> str:
        return PLANS["gold"]


class Plain(drf.FreqGuardThrottle):
    scope = "plan"
    rate = "2/30s"


def test_two_per_request_throttles_of_one_scope_are_one_budget(
    clock: ManualClock, settle: None
) -> None:
    """Two classes whose code gives the rate count one budget, each request at its own
    throttle's rate; a class whose rate is its own beside them is two sets of rules for
    one budget, refused naming both."""
    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock), clock=clock)):
        assert [_request(_view(PlanThrottle), "tin-1") for _ in range(2)] == [200, 200]
        assert [_request(_view(OtherPlan), "tin-1") for _ in range(5)] == [200] * 4 + [429]
        assert _request(_view(PlanThrottle), "tin-1") == 429
        with pytest.raises(ConfigError, match=r"drf\.plan.*rate is the request's.*Plain\.rate"):
            _request(_view(Plain), "tin-1")


def test_a_plan_changed_keeps_what_its_rates_need(clock: ManualClock, settle: None) -> None:
    """docs/django.md: a user moved from an hour's plan to a minute's has the hour's older
    requests forgotten a minute on (as DRF's history is trimmed); a plan that also has the
    longest window among its rates keeps it; and a plan of fewer rates beside one of two is
    decided with its last rate read again (listed twice, the same numbers)."""
    global PLANS
    Noting.seen.clear()
    original = PLANS
    try:
        with override_settings(
            FREQGUARD_BACKEND=Guard(MemoryBackend(clock), clock=clock), ROOT_URLCONF=__name__
        ):
            user = APIClient(headers={"x-user": "lead-7"})
            assert [user.get("/plan").status_code for _ in range(4)] == [200] * 3 + [429]
            PLANS = {**original, "lead": "6/minute; 100/hour"}  # moved, the hour kept
            clock.advance(10)
            moved = user.get("/plan")
            assert moved["RateLimit-Policy"] == '"noting";q=6;w=60, "noting.2";q=100;w=3600'
            PLANS = original
            clock.advance(100)
            assert user.get("/plan").status_code == 429  # back: the hour still counted
            PLANS = {**original, "lead": "6/minute"}  # moved, the hour not kept
            clock.advance(3600)
            assert [user.get("/plan").status_code for _ in range(3)] == [200] * 3
            assert user.get("/plan")["RateLimit-Policy"] == (
                '"noting";q=6;w=60, "noting.2";q=6;w=60'  # one rate, read again
            )
            PLANS = original
            clock.advance(100)
            assert [user.get("/plan").status_code for _ in range(3)] == [200] * 3  # forgotten
    finally:
        PLANS = original


def test_a_class_given_its_rate_by_some_views_only_is_refused_naming_both(
    clock: ManualClock, settle: None
) -> None:
    """A class whose rate one view sets on the instance and another leaves to the settings
    gives one budget two sets of rules (tiers, and the setting's rate): refused naming
    both, never decided on whichever was registered last."""
    rest = {**django_site.SETTINGS["REST_FRAMEWORK"], "DEFAULT_THROTTLE_RATES": {"bare": "2/min"}}
    with override_settings(
        FREQGUARD_BACKEND=Guard(MemoryBackend(clock), clock=clock), REST_FRAMEWORK=rest
    ):
        assert _request(_view(Bare), "gold-1") == 200  # the view sets the rate
        plain: type[APIView] = type(
            "Plain", (APIView,), {"throttle_classes": [Bare], "get": lambda s, r: Response()}
        )
        with pytest.raises(ConfigError, match=r"drf\.bare.*rate is the request's.*'bare'"):
            _request(plain.as_view(), "gold-1")
