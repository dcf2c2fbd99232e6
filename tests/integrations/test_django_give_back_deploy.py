"""A refused request's give-back under a deploy (an adversarial review of leases and
refunds under every exit): what earlier hits took goes back best effort, and a refund a
deploy since refuses is no 500 in place of the 429."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

pytest.importorskip("rest_framework", reason="the drf extra is not installed")
from tests.integrations import django_site
from tests.integrations.django_rig import site_guard

django_site.setup()

from django.test import Client, override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework.request import Request  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from freqguard import Guard, ManualClock, Policy, Rule  # noqa: E402
from freqguard.integrations.django import capped  # noqa: E402
from freqguard.integrations.drf import FreqGuardThrottle  # noqa: E402

SITE = django_site.SETTINGS
_GUARD: list[Guard] = []


@pytest.fixture
def guard(clock: ManualClock) -> Iterator[Guard]:
    """The site's guard, on the test's clock."""
    for made in site_guard(clock):
        _GUARD[:] = [made]
        yield made


class OnePerMinute(FreqGuardThrottle):
    rate = "1/minute"


@capped("2/hour", name="deploy-orders")
class DeployedOrders(APIView):
    """A named cap, then a throttle; each request first deploys the cap's policy anew at
    a raised rate (a rollout landing between the cap's hit and the throttle)."""

    throttle_classes = (OnePerMinute,)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        guard = _GUARD[0]
        (name,) = [n for n in guard.policies if "deploy-orders" in n]
        old = guard.policies[name]
        rule = old.rules[0]
        raised = Rule(f"{rule.rate.limit + 1}/hour", by=rule.by, name=rule.name)
        guard.add_policy(Policy(old.name, raised), replace=True)
        super().initial(request, *args, **kwargs)

    def get(self, request: Request) -> Response:
        return Response("orders")


class Urls:
    urlpatterns: ClassVar[list[Any]] = [
        path("deploy-orders", DeployedOrders.as_view(), name="deploy-orders"),
    ]


def test_a_throttles_refusal_after_a_deploy_is_a_429(guard: Guard) -> None:
    """The throttle refuses the second request; giving back the named cap's hit is
    refused (a deploy since: its rate units are the new policy's), which was raised
    through the view: a 500. Best effort, as for a store that fails: a 429."""
    with override_settings(ROOT_URLCONF=Urls, MIDDLEWARE=SITE["MIDDLEWARE"]):
        client = Client()
        assert [client.get("/deploy-orders").status_code for _ in range(2)] == [200, 429]
