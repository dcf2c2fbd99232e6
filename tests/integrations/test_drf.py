"""``FreqGuardThrottle``: DRF's throttle on freqguard's guard, with APIClient; rates from the
class, ``DEFAULT_THROTTLE_RATES`` or ``FREQGUARD_DEFAULT_LIMITS``; keys as DRF's; ``wait()``
the decision's exact ``retry_after``; on memory with a ManualClock. What ``manage.py check``
says of DRF throttles is in ``test_drf_checks.py`` and ``test_drf_check_walk.py``; the
settings and the guard they share are in ``drf_rig.py``."""

from __future__ import annotations

import pytest

from freqguard import Guard, ManualClock, MemoryBackend
from freqguard.errors import ConfigError
from freqguard.rates import parse_rates

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site

django_site.setup()  # done on import already: DRF's modules below read the settings
from django.test import override_settings  # noqa: E402
from django.urls import get_resolver, resolve  # noqa: E402
from rest_framework.exceptions import ParseError  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.settings import api_settings  # noqa: E402
from rest_framework.test import APIClient, APIRequestFactory  # noqa: E402
from rest_framework.throttling import BaseThrottle  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard.integrations._django_state import current  # noqa: E402
from freqguard.integrations._request import KeyFunc  # noqa: E402
from freqguard.integrations.django import exempt, header  # noqa: E402
from freqguard.integrations.drf import FreqGuardThrottle, drf_rates  # noqa: E402
from tests.integrations import drf_views  # noqa: E402
from tests.integrations.drf_rig import REST  # noqa: E402
from tests.integrations.drf_rig import guard as guard  # noqa: E402


def _codes(path: str, times: int, **headers: str) -> list[int]:
    client = APIClient(headers=headers)
    return [client.get(path).status_code for _ in range(times)]


def test_a_throttles_rates_are_decided_in_one_hit(guard: Guard, clock: ManualClock) -> None:
    assert _codes("/api/orders", 4) == [200, 200, 200, 429]
    clock.advance(60)
    assert _codes("/api/orders", 1) == [200]
    policy = "drf.Burst.tests.integrations.drf_views.Orders"
    assert [rule.id for rule in guard.policies[policy].rules] == ["sl.3.60s", "sl.10.86400s"]


def test_the_429_carries_retry_after_and_the_rate_limit_headers(guard: Guard) -> None:
    client = APIClient()
    responses = [client.get("/api/orders") for _ in range(4)]
    assert responses[0]["RateLimit"] == '"sl.3.60s";r=2;t=60'  # the middleware adds them
    denied = responses[3]
    assert denied.status_code == 429
    assert denied["Retry-After"] == "60"
    assert denied["RateLimit"] == '"sl.3.60s";r=0;t=60'
    assert denied["Content-Type"] == "application/json"  # DRF's own body, not a problem


def test_users_and_anonymous_addresses_are_keyed_apart(guard: Guard) -> None:
    assert _codes("/api/orders", 4, x_user="ann") == [200, 200, 200, 429]
    assert _codes("/api/orders", 3, x_user="bob") == [200] * 3
    assert _codes("/api/orders", 4) == [200, 200, 200, 429]


def test_a_scope_is_one_budget_across_views_at_its_configured_rate(guard: Guard) -> None:
    assert _codes("/api/scoped", 1) == [200]
    assert _codes("/api/other-scoped", 2) == [200, 429]  # "2/min" from DEFAULT_THROTTLE_RATES
    assert "drf.orders" in guard.policies


def test_without_a_rate_the_default_limits_each_view_its_own(clock: ManualClock) -> None:
    with override_settings(
        FREQGUARD_BACKEND=Guard(MemoryBackend(clock)),
        FREQGUARD_DEFAULT_LIMITS="5/minute",
        ROOT_URLCONF="tests.integrations.drf_check_urls",  # Unrated: the generic throttle
    ):
        # the middleware's default limits count too (5/minute): the throttle's come first
        assert _codes("/unrated/0", 6) == [200] * 5 + [429]
        assert _codes("/unrated/1", 1) == [200]  # another view: its own budget


def test_it_serves_as_the_default_throttle_class(guard: Guard) -> None:
    rest = {**REST, "DEFAULT_THROTTLE_CLASSES": ["tests.integrations.drf_views.Burst"]}
    with override_settings(REST_FRAMEWORK=rest):
        # imported from its dotted path (the stubs type the setting as the strings given)
        found: list[type[BaseThrottle]] = api_settings.DEFAULT_THROTTLE_CLASSES  # type: ignore[assignment]

        class Late(APIView):
            # what APIView itself takes when DRF is first imported, as in a project
            throttle_classes = found

            def get(self, request: Request) -> Response:
                return Response({"late": True})

        view = Late.as_view()
        factory = APIRequestFactory()
        codes = [view(factory.get("/late")).status_code for _ in range(4)]
    assert found == [drf_views.Burst]
    assert codes == [200, 200, 200, 429]


def test_wait_is_the_decisions_exact_retry_after(guard: Guard, clock: ManualClock) -> None:
    request = Request(APIRequestFactory().get("/api/orders"))
    view = drf_views.Orders()
    throttles = [drf_views.Burst() for _ in range(4)]  # DRF makes one per request
    assert [t.allow_request(request, view) for t in throttles] == [True, True, True, False]
    assert throttles[0].wait() is None
    clock.advance(10.25)
    late = drf_views.Burst()
    assert late.allow_request(request, view) is False
    assert late.decision is not None
    assert late.wait() == late.decision.retry_after == pytest.approx(49.75)


def test_no_rate_anywhere_is_refused_naming_where_to_set_one(guard: Guard) -> None:
    class Scoped(FreqGuardThrottle):
        scope = "nowhere"

    with pytest.raises(ConfigError, match=r"DEFAULT_THROTTLE_RATES\['nowhere'\]"):
        Scoped().rates()


def test_the_switch_turns_the_throttle_off(clock: ManualClock) -> None:
    with override_settings(FREQGUARD_BACKEND=Guard(MemoryBackend(clock)), FREQGUARD_ENABLED=False):
        assert _codes("/api/orders", 5) == [200] * 5


@pytest.mark.parametrize(
    ("drf", "ours"),
    [
        ("100/h", "100/hour"),
        ("5/min", "5/minute"),
        ("7/s", "7/second"),
        ("3/day", "3/day"),
        ("10/minute; 100/day", "10/minute; 100/day"),
    ],
)
def test_drfs_rate_spelling_is_read(drf: str, ours: str) -> None:
    assert drf_rates(drf) == parse_rates(ours)


def test_a_rate_that_does_not_parse_is_refused() -> None:
    with pytest.raises(ConfigError):
        drf_rates("often")


def test_a_key_that_refuses_the_request_is_a_400(guard: Guard) -> None:
    class ByApiKey(FreqGuardThrottle):
        rate = "1/minute"

        def key(self) -> KeyFunc:
            return header("x-api-key")

    view = drf_views.Orders()
    factory = APIRequestFactory()
    with pytest.raises(ParseError, match="x-api-key"):
        ByApiKey().allow_request(Request(factory.get("/")), view)
    keyed = Request(factory.get("/", HTTP_X_API_KEY="k"))
    assert [ByApiKey().allow_request(keyed, view) for _ in range(2)] == [True, False]


def test_an_exempt_api_view_leaves_the_default_limits_to_its_throttle(clock: ManualClock) -> None:
    @exempt
    class Open(APIView):
        def get(self, request: Request) -> Response:
            return Response({"open": True})

    found = resolve("/api/orders")
    with override_settings(
        FREQGUARD_BACKEND=Guard(MemoryBackend(clock)), FREQGUARD_DEFAULT_LIMITS="1/minute"
    ):
        state = current()
        resolver = get_resolver()
        assert state.view_route("open", Open.as_view(), resolver) is None  # nothing caps it
        assert state.view_route(found.view_name, found.func, resolver) is not None
