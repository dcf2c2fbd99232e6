"""What DRF users bring: one scoped throttle read through each view's ``throttle_scope``,
DRF's anon and user throttles, settings and rates changed at run time taking effect, a
rate of ``None`` switching a scope off, rates in freqguard's grammar (months included) or
DRF's, and the rate-limit headers of every policy a request met."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from freqguard import Guard, ManualClock, MemoryBackend
from freqguard.errors import ConfigError

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site

django_site.setup()
from django.test import override_settings  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.test import APIClient, APIRequestFactory  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard.integrations.drf import (  # noqa: E402
    FreqGuardAnonThrottle,
    FreqGuardScopedThrottle,
    FreqGuardThrottle,
    FreqGuardUserThrottle,
)
from tests.integrations.django_users import HeaderUser  # noqa: E402

REST = django_site.SETTINGS["REST_FRAMEWORK"]


class XView(APIView):
    throttle_classes = (FreqGuardScopedThrottle,)
    throttle_scope = "x"

    def get(self, request: Request) -> Response:
        return Response("x")


class YView(APIView):
    throttle_classes = (FreqGuardScopedThrottle,)
    throttle_scope = "y"

    def get(self, request: Request) -> Response:
        return Response("y")


class UnscopedView(APIView):
    throttle_classes = (FreqGuardScopedThrottle,)

    def get(self, request: Request) -> Response:
        return Response("unscoped")


@pytest.fixture
def guard(clock: ManualClock) -> Iterator[Guard]:
    guard = Guard(MemoryBackend(clock))
    with override_settings(FREQGUARD_BACKEND=guard):
        yield guard


def _rates(**rates: str | None) -> Any:
    return override_settings(REST_FRAMEWORK={**REST, "DEFAULT_THROTTLE_RATES": rates})


def _codes(view: type[APIView], times: int, user: str | None = None) -> list[int]:
    factory = APIRequestFactory()
    request = factory.get("/", HTTP_X_USER=user) if user else factory.get("/")
    return [view.as_view()(request).status_code for _ in range(times)]


def test_one_scoped_throttle_reads_each_views_throttle_scope(
    guard: Guard, clock: ManualClock
) -> None:
    """DRF's ScopedRateThrottleTests, on freqguard's throttle."""
    with _rates(x="3/min", y="1/min"):
        assert _codes(XView, 4) == [200, 200, 200, 429]
        assert _codes(YView, 2) == [200, 429]
        assert _codes(UnscopedView, 10) == [200] * 10  # no throttle_scope: not throttled
        clock.advance(60)
        assert _codes(XView, 4) == [200, 200, 200, 429]
        assert _codes(YView, 2) == [200, 429]
    assert {"drf.x", "drf.y"} <= set(guard.policies)


def test_a_scope_without_a_rate_is_refused_naming_where_to_set_it(guard: Guard) -> None:
    with _rates(y="1/min"), pytest.raises(ConfigError, match=r"DEFAULT_THROTTLE_RATES\['x'\]"):
        _codes(XView, 1)


def test_a_changed_rest_framework_setting_takes_effect(guard: Guard) -> None:
    with _rates(x="2/min"):
        assert _codes(XView, 3) == [200, 200, 429]
        with _rates(x="4/min"):  # the same budget, read at its new rate
            assert _codes(XView, 3) == [200, 200, 429]
        assert _codes(XView, 1) == [429]
    assert [rule.id for rule in guard.policies["drf.x"].rules] == ["sl.2.60s"]


def test_a_rate_of_none_switches_the_scope_off(guard: Guard) -> None:
    """DRF: a rate of None throttles nothing."""
    with _rates(x=None):
        assert _codes(XView, 5) == [200] * 5


class Changing(FreqGuardThrottle):
    rate = "1/minute"


class ChangingView(APIView):
    throttle_classes = (Changing,)

    def get(self, request: Request) -> Response:
        return Response("changing")


def test_a_rate_changed_at_run_time_takes_effect(
    guard: Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _codes(ChangingView, 2) == [200, 429]
    monkeypatch.setattr(Changing, "rate", "3/minute")
    assert _codes(ChangingView, 3) == [200, 200, 429]


def test_two_throttles_giving_one_scope_two_rates_are_refused_naming_both(guard: Guard) -> None:
    class First(FreqGuardThrottle):
        scope = "shared"
        rate = "1/minute"

    class Second(FreqGuardThrottle):
        scope = "shared"
        rate = "2/minute"

    class Both(APIView):
        throttle_classes = (First, Second)

        def get(self, request: Request) -> Response:
            return Response("both")

    with pytest.raises(ConfigError, match=r"drf\.shared.*First.*Second"):
        _codes(Both, 1)


def test_a_month_is_a_month(guard: Guard) -> None:
    class Monthly(FreqGuardThrottle):
        rate = "1/month"

    class View(APIView):
        throttle_classes = (Monthly,)

        def get(self, request: Request) -> Response:
            return Response("monthly")

    assert _codes(View, 2) == [200, 429]
    [policy] = [p for name, p in guard.policies.items() if name.startswith("drf.Monthly.")]
    assert policy.rules[0].rate.window_seconds == 30 * 86_400


class AnonView(APIView):
    throttle_classes = (FreqGuardAnonThrottle,)

    def get(self, request: Request) -> Response:
        return Response("anon")


class UserView(APIView):
    throttle_classes = (FreqGuardUserThrottle,)

    def get(self, request: Request) -> Response:
        return Response("user")


def test_the_anon_throttle_leaves_authenticated_users_alone(guard: Guard) -> None:
    with _rates(anon="2/min"):
        assert _codes(AnonView, 3) == [200, 200, 429]
        assert _codes(AnonView, 5, user="ann") == [200] * 5
    assert HeaderUser("ann").is_authenticated


def test_the_user_throttle_keys_users_and_addresses_apart(guard: Guard) -> None:
    with _rates(user="2/min"):
        assert _codes(UserView, 3, user="ann") == [200, 200, 429]
        assert _codes(UserView, 2, user="bob") == [200, 200]
        assert _codes(UserView, 3) == [200, 200, 429]
    assert "drf.user" in guard.policies


def test_the_headers_show_every_policy_the_request_met(clock: ManualClock) -> None:
    """The middleware's default limits count a DRF view's request too: its headers list
    their rules beside the throttle's, and name the one nearest exhaustion."""
    with override_settings(
        FREQGUARD_BACKEND=Guard(MemoryBackend(clock)), FREQGUARD_DEFAULT_LIMITS="5/minute"
    ):
        client = APIClient()
        first = client.get("/api/orders")
        responses = [client.get("/api/orders") for _ in range(3)]
    assert first["RateLimit-Policy"] == (
        '"default.sl.5.60s";q=5;w=60, "sl.3.60s";q=3;w=60, "sl.10.86400s";q=10;w=86400'
    )
    assert first["RateLimit"] == '"sl.3.60s";r=2;t=60'
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[-1]["RateLimit"] == '"sl.3.60s";r=0;t=60'
