"""Django REST framework: ``FreqGuardThrottle``, a throttle class on the Django
integration's guard (``FREQGUARD_BACKEND``)::

    class BurstThrottle(FreqGuardThrottle):
        rate = "10/minute; 1000/day"  # decided in one hit: give one throttle every rate

    class OrderView(APIView):
        throttle_classes = [BurstThrottle]

Usable in ``throttle_classes`` and in ``REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"]``. The
rate is the class's ``rate``, else ``DEFAULT_THROTTLE_RATES[scope]``, else
``FREQGUARD_DEFAULT_LIMITS``. Keys as DRF's: the user's id when authenticated, else the
client's address (behind ``trusted_proxies``). A throttle with a ``scope`` is one budget for
every view using it (policy ``drf.<scope>``); without one each view has its own
(``drf.<throttle class>.<view class>``). ``wait()`` is the decision's exact
``retry_after``; with the freqguard middleware installed the response carries the
rate-limit headers too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rest_framework.exceptions import APIException, ParseError
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from freqguard.decision import Decision
from freqguard.errors import ConfigError
from freqguard.integrations._decide import KeyedRules, Route
from freqguard.integrations._django_state import State, current, notes_of, request_info
from freqguard.integrations._request import KeyFunc
from freqguard.integrations.django import user_or_ip
from freqguard.rates import Rate, parse_rates
from freqguard.rules import fit_name

__all__ = ["FreqGuardThrottle", "Unavailable", "drf_rates"]

_UNITS = {"s": "second", "m": "minute", "h": "hour", "d": "day"}
_DRF_RATE = re.compile(r"\s*(\d+)\s*/\s*([smhd])[a-z]*\s*")


class Unavailable(APIException):
    """The store could not decide and the policy's ``on_error`` is ``"raise"``: 503."""

    status_code = 503
    default_detail = "The rate limiter's store is unavailable."
    default_code = "unavailable"


def drf_rates(rate: str) -> tuple[Rate, ...]:
    """A rate as DRF writes it (``"100/h"``, ``"5/min"``), or as freqguard does
    (``"10/minute; 1000/day"``).

    Raises:
        ConfigError: a rate that does not parse.
    """
    found = _DRF_RATE.fullmatch(rate)
    if found is not None:
        return parse_rates(f"{found[1]}/{_UNITS[found[2]]}")
    return parse_rates(rate)


class FreqGuardThrottle(BaseThrottle):
    """A DRF throttle deciding on freqguard's guard.

    Attributes:
        rate: the rates (``"100/hour"``, several with ``;``, decided in one hit).
        scope: a budget shared by the views using it; its rate may come from
            ``DEFAULT_THROTTLE_RATES``.
        trusted_proxies: the proxies whose ``X-Forwarded-For`` is believed.
        cost: what one request costs.
    """

    rate: str | None = None
    scope: str | None = None
    trusted_proxies: Sequence[str] = ()
    cost: int = 1

    def __init__(self) -> None:
        self.decision: Decision | None = None

    def key(self) -> KeyFunc:
        """The key function: :func:`~freqguard.integrations.django.user_or_ip`."""
        return user_or_ip(self.trusted_proxies)

    def rates(self) -> tuple[Rate, ...]:
        """The rates this throttle decides.

        Raises:
            ConfigError: no rate given anywhere, or one that does not parse.
        """
        if self.rate is not None:
            return drf_rates(self.rate)
        configured = api_settings.DEFAULT_THROTTLE_RATES or {}
        scoped = configured.get(self.scope) if self.scope is not None else None
        if isinstance(scoped, str):
            return drf_rates(scoped)
        state = current()
        if state.settings.defaults:
            return state.settings.defaults
        where = f"DEFAULT_THROTTLE_RATES[{self.scope!r}], " if self.scope else ""
        raise ConfigError(
            f"{type(self).__name__} has no rate: set its rate, {where}or FREQGUARD_DEFAULT_LIMITS"
        )

    def _route(self, state: State, view: Any) -> Route:
        found = state.throttles.get((type(self), type(view)))
        if found is None:
            if self.scope is not None:
                name = fit_name(f"drf.{self.scope}")
            else:
                owner = type(view)
                name = fit_name(f"drf.{type(self).__name__}.{owner.__module__}.{owner.__name__}")
            parts = (KeyedRules(self.key(), self.rates()),)
            found = state.throttles[type(self), type(view)] = Route(name, parts, self.cost)
        return found

    def allow_request(self, request: Request, view: Any) -> bool:
        """Decide the request: True when admitted.

        Raises:
            ParseError: the key function refuses the request (400).
            Unavailable: the store failed and the policy's ``on_error`` is ``"raise"``.
        """
        state = current()
        if not state.settings.enabled:
            return True
        route = self._route(state, view)
        answer = state.decider().decide(state.guard().hit, route, request_info(request))
        if answer.status == 400:
            raise ParseError(_detail(answer.body))
        if answer.status == 503:
            raise Unavailable()
        self.decision = answer.decision
        if self.decision is None:  # a key function skipped the request
            return True
        notes_of(request).note(answer)
        return self.decision.allowed

    def wait(self) -> float | None:
        """Seconds until the request would be admitted: the decision's ``retry_after``."""
        if self.decision is None or self.decision.allowed:
            return None
        return self.decision.retry_after


def _detail(body: bytes) -> str:
    detail: str = json.loads(body)["detail"]
    return detail
