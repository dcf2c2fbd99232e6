"""DRF views and throttles of the test site (tests/integrations/django_site.py)."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from freqguard.integrations.drf import FreqGuardThrottle


class Burst(FreqGuardThrottle):
    rate = "3/minute; 10/day"  # two rates, one hit


class OrdersScope(FreqGuardThrottle):
    scope = "orders"  # its rate from DEFAULT_THROTTLE_RATES: "2/min"


class Orders(APIView):
    throttle_classes = (Burst,)

    def get(self, request: Request) -> Response:
        return Response({"orders": []})


class Scoped(APIView):
    throttle_classes = (OrdersScope,)

    def get(self, request: Request) -> Response:
        return Response({"scoped": True})


class OtherScoped(APIView):
    throttle_classes = (OrdersScope,)  # the same scope: the same budget

    def get(self, request: Request) -> Response:
        return Response({"scoped": "too"})


class Plain(APIView):  # DEFAULT_THROTTLE_CLASSES (none unless a test sets them)
    def get(self, request: Request) -> Response:
        return Response({"plain": True})
