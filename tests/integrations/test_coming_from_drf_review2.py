"""A DRF user's second review of docs/coming-from/drf.md and docs/django.md, porting a
project's throttles: each test is an idiom carried over (DRF's own docs, or a habit of DRF
projects) where freqguard answered otherwise than the pages (or DRF) said. Each failed on
the code it was written against, for the reason its docstring gives."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site

django_site.setup()
from django.core import checks  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework import throttling  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.test import APIRequestFactory  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard import ConfigError, Guard, ManualClock, MemoryBackend  # noqa: E402
from freqguard.integrations import django as fg_django  # noqa: E402
from freqguard.integrations import drf  # noqa: E402
from freqguard.integrations._django_state import current  # noqa: E402

REST = django_site.SETTINGS["REST_FRAMEWORK"]


@pytest.fixture
def guard(clock: ManualClock) -> Iterator[Guard]:
    cache.clear()  # DRF's histories
    made = Guard(MemoryBackend(clock))
    with override_settings(FREQGUARD_BACKEND=made):
        yield made
    fg_django.close()


def _timed(throttle: type[Any], clock: ManualClock, **attrs: Any) -> type[Any]:
    """DRF's throttle on the test's clock (DRF's own tests override ``timer`` so)."""
    return type(throttle.__name__, (throttle,), {"timer": lambda self: clock.now(), **attrs})


def _view(throttles: list[type[Any]]) -> Any:
    def get(self: APIView, request: Request) -> Response:
        return Response("ok")

    made: type[APIView] = type("View", (APIView,), {"throttle_classes": throttles, "get": get})
    return made.as_view()


def _codes(view: Any, *users: str) -> list[int]:
    factory = APIRequestFactory()
    return [view(factory.get("/", HTTP_X_USER=user)).status_code for user in users]


def _rates(**rates: str | None) -> Any:
    return override_settings(REST_FRAMEWORK={**REST, "DEFAULT_THROTTLE_RATES": rates})


# --- a rate past the sliding log's 10,000 ----------------------------------------------


class OwnBigRate(drf.FreqGuardThrottle):
    rate = "50000/day"


class UserView(APIView):
    throttle_classes = (drf.FreqGuardUserThrottle,)

    def get(self, request: Request) -> Response:
        return Response("user")


class OwnView(APIView):
    throttle_classes = (OwnBigRate,)

    def get(self, request: Request) -> Response:
        return Response("own")


class Urls:
    urlpatterns: ClassVar[list[Any]] = [
        path("user", UserView.as_view(), name="user"),
        path("own", OwnView.as_view(), name="own"),
    ]


def test_a_rate_past_the_sliding_logs_ceiling_is_a_check_error(
    guard: Guard, clock: ManualClock
) -> None:
    """A busy API's ``DEFAULT_THROTTLE_RATES = {"user": "20000/day"}`` (DRF serves it: its
    history is a list in the cache), ported as the page says, ``FreqGuardUserThrottle``
    reading it unchanged. docs/django.md: a rate freqguard's throttles cannot read is
    ``freqguard.E003`` "instead of a 500 at the first request", and so is a throttle's
    own ``rate``. Both parse, but freqguard's throttles decide on a sliding log, which holds
    at most 10,000: every request to the views fails (ConfigError, a 500) and
    ``manage.py check`` says nothing. Expected: E003 for each, before a request fails."""
    theirs = _timed(throttling.UserRateThrottle, clock, THROTTLE_RATES={"user": "20000/day"})
    assert _codes(_view([theirs]), "ann", "ann") == [200, 200]
    with _rates(user="20000/day"), override_settings(ROOT_URLCONF=Urls):
        with pytest.raises(ConfigError, match="at most 10000"):
            _codes(UserView.as_view(), "ann")
        said = [m.msg for m in checks.run_checks() if m.id == "freqguard.E003"]
    assert any("'user'" in m and "20000/day" in m for m in said), said
    assert any("OwnBigRate" in m and "50000/day" in m for m in said), said


def test_a_throttle_takes_the_strategy_its_rate_needs(guard: Guard) -> None:
    """The 500 above says "use strategy='rolling-window' for the same cap in every window";
    ``@capped`` takes it (``Rule("20000/day", strategy="rolling-window")``), a freqguard DRF
    throttle has no place for it: its ``rate`` is a string, its scope's rate a string of
    the settings. A user follows the message the way a throttle class is configured, a
    class attribute (``strategy = "rolling-window"``): it is ignored and every request
    still fails. Expected: the throttle decides its rates on the strategy it names, so a
    ported 20000/day serves."""
    busy: type[Any] = type("Busy", (drf.FreqGuardUserThrottle,), {"strategy": "rolling-window"})
    with _rates(user="20000/day"):
        assert _codes(_view([busy]), "ann", "ann", "bob") == [200, 200, 200]


# --- DRF's per-request rate: the plan throttle of DRF projects --------------------------


class TheirPlan(throttling.UserRateThrottle):
    """The well-known DRF recipe for a rate per plan: set the rate, parse it, go on."""

    THROTTLE_RATES = {"user": "2/min"}  # noqa: RUF012 -- DRF's own attribute

    def allow_request(self, request: Any, view: Any) -> bool:
        self.rate = "4/min" if request.user and request.user.pk == "gold" else "2/min"
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return bool(super().allow_request(request, view))


class OurPlan(drf.FreqGuardUserThrottle):
    """The same recipe with freqguard's base class, as the page's rows port a class."""

    THROTTLE_RATES: ClassVar[dict[str, str | None] | None] = {"user": "2/min"}

    def allow_request(self, request: Any, view: Any) -> bool:
        self.rate = "4/min" if request.user and request.user.pk == "gold" else "2/min"
        self.num_requests, self.duration = self.parse_rate(self.rate)  # type: ignore[attr-defined, unused-ignore]
        return super().allow_request(request, view)


def test_drfs_per_request_rate_recipe_names_freqguards_way(
    guard: Guard, clock: ManualClock
) -> None:
    """DRF projects give each user's plan its rate by setting ``self.rate`` in
    ``allow_request`` and then ``self.num_requests, self.duration =
    self.parse_rate(self.rate)``, as DRF's ``__init__`` does. The page refuses a class
    *defining* ``parse_rate`` "naming freqguard's way"; one *calling* it fails every
    request with a bare ``AttributeError: 'OurPlan' object has no attribute
    'parse_rate'`` (and setting ``num_requests`` with "property 'num_requests' ... has no
    setter"), a 500 naming nothing. Expected: the error names freqguard's way (``self.rate``
    set in ``allow_request``, and nothing else: it decides the request at that rate)."""
    theirs = _timed(TheirPlan, clock)
    assert _codes(_view([theirs]), "gold", "gold", "gold", "tin", "tin", "tin") == [
        *[200] * 3,
        200,
        200,
        429,
    ]
    with pytest.raises(AttributeError) as found:
        _codes(_view([OurPlan]), "gold")
    assert "set self.rate in allow_request" in str(found.value), str(found.value)

    class Counting(drf.FreqGuardUserThrottle):
        def allow_request(self, request: Any, view: Any) -> bool:
            self.num_requests = 4  # type: ignore[misc, unused-ignore]
            return super().allow_request(request, view)

    with pytest.raises(AttributeError) as found:
        _codes(_view([Counting]), "gold")
    assert "set self.rate in allow_request" in str(found.value), str(found.value)


class Plan(drf.FreqGuardUserThrottle):
    """The recipe as freqguard reads it: ``self.rate`` set at each request."""

    def allow_request(self, request: Any, view: Any) -> bool:
        self.rate = "4/min" if request.user and request.user.pk == "gold" else "2/min"
        return super().allow_request(request, view)


def test_a_rate_per_request_keeps_what_the_process_holds_bounded(
    guard: Guard, clock: ManualClock
) -> None:
    """docs/django.md: the rate "is read at every request" (the page's row: "a class's
    rate changed at run time: both read it at every request"), so the plan recipe ported
    sets ``self.rate`` and serves the right answers. But each change of rate from one
    request to the next makes a new route, registered anew on the guard and kept with its
    header plan for ever: a site whose gold and tin users alternate grows by one route a
    request, without bound (DRF's throttle keeps nothing in the process). Expected: what
    the process holds stays bounded by the rates in use, not the requests."""
    view = _view([Plan])
    assert _codes(view, "gold", "gold", "gold", "tin", "tin", "tin") == [*[200] * 5, 429]
    for turn in range(200):
        clock.advance(30)
        _codes(view, "gold" if turn % 2 else "tin")
    state = current()
    assert len(state.sources) <= 4, len(state.sources)


PLAN_RATES = {"gold": "4/min", "tin": "2/min", "lead": "3/hour"}
SUBSCRIBED: dict[str, str] = {}  # user -> plan, changed by the draws


class TheirPlans(throttling.UserRateThrottle):
    """DRF's recipe on its own throttle, the plan read at each request."""

    THROTTLE_RATES = {"user": "1/min"}  # noqa: RUF012 -- DRF's own attribute

    def allow_request(self, request: Any, view: Any) -> bool:
        self.rate = PLAN_RATES[SUBSCRIBED[request.user.pk]]
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return bool(super().allow_request(request, view))


class OurPlans(drf.FreqGuardUserThrottle):
    """The recipe ported: ``self.rate`` set, the ``parse_rate`` line dropped."""

    def allow_request(self, request: Any, view: Any) -> bool:
        self.rate = PLAN_RATES[SUBSCRIBED[request.user.pk]]
        return super().allow_request(request, view)


@pytest.mark.parametrize("switching", [False, True], ids=["fixed-plans", "plans-change"])
def test_drfs_per_request_rate_recipe_ported_answers_as_drfs(
    guard: Guard, clock: ManualClock, switching: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan recipe ported (``self.rate`` in ``allow_request``) answers every request as
    DRF's own does, users of several plans interleaved, on one pinned clock (800 draws),
    and users changing plans too: DRF keeps one history a user, trimmed to the window of
    the rate at hand and kept in the cache for that window after its last admitted
    request, as freqguard's state is (its cache's expiry on the pinned clock as well)."""
    import random
    import types

    import django.core.cache.backends.base as cache_base
    import django.core.cache.backends.locmem as locmem

    pinned = types.SimpleNamespace(time=clock.now)
    monkeypatch.setattr(cache_base, "time", pinned)
    monkeypatch.setattr(locmem, "time", pinned)

    theirs, ours = _view([_timed(TheirPlans, clock)]), _view([OurPlans])
    draw = random.Random(36 if switching else 35)
    users = ["u1", "u2", "u3", "u4"]
    SUBSCRIBED.update({user: draw.choice(list(PLAN_RATES)) for user in users})
    with _rates(user="1/min"):  # the settings' rate, which the recipe overrides
        for turn in range(800):
            user = draw.choice(users)
            if switching and draw.random() < 0.05:
                SUBSCRIBED[user] = draw.choice(list(PLAN_RATES))
            assert _codes(ours, user) == _codes(theirs, user), (turn, user, SUBSCRIBED[user])
            clock.advance(draw.choice([0, 1, 3, 7, 19]))
