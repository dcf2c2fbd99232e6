"""Flask: ``FreqGuard(app)`` or ``fg.init_app(app)``, per-view ``@fg.capped(...)``.

Configuration (``app.config``):

* ``FREQGUARD_BACKEND``: a backend URL (default ``"memory://"``), unless a guard is given.
* ``FREQGUARD_DEFAULT_LIMITS``: a rate string applied to every view not exempt (default none).
* ``FREQGUARD_HEADERS``: the header profile (default ``"ietf"``).

State lives in ``app.extensions["freqguard"]``, never on the extension object, so one
``FreqGuard`` serves several apps. Denials answer 429 with an RFC 9457 problem body.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

from flask import Flask, Response, current_app, g, request

from freqguard.backends.urls import backend_from_url
from freqguard.decision import Decision
from freqguard.errors import CapExceeded
from freqguard.guard import Guard
from freqguard.headers import check_profile
from freqguard.integrations._http import (
    BadRequest,
    KeyFunc,
    Limit,
    RequestInfo,
    bad_request_body,
    client_ip,
    context_of,
    header,
    problem_body,
)
from freqguard.integrations.wsgi import request_info

__all__ = ["BadRequest", "FreqGuard", "client_ip", "header", "remote_address"]

P = ParamSpec("P")
R = TypeVar("R")


_peer = client_ip()


def remote_address(request_info: RequestInfo) -> dict[str, object]:
    """The peer address as Flask sees it, normalised as :func:`client_ip` does (IPv6 by
    its /64). Behind proxies use ``client_ip(trusted_proxies, header=...)`` instead."""
    return _peer(request_info)  # type: ignore[return-value]


@dataclass
class _State:
    guard: Guard
    profile: str
    default: Limit | None
    exempt: set[str] = field(default_factory=set)


class FreqGuard:
    """The Flask extension.

    Args:
        app: the app, or None to call :meth:`init_app` later.
        guard: a Guard to use (default: one on ``FREQGUARD_BACKEND``).
        key: the default key function (default: :func:`remote_address`).
    """

    def __init__(
        self, app: Flask | None = None, *, guard: Guard | None = None, key: KeyFunc | None = None
    ) -> None:
        self._guard = guard
        self._key: KeyFunc = key or remote_address
        self._exempt: set[str] = set()
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        guard = self._guard or Guard(
            backend_from_url(app.config.get("FREQGUARD_BACKEND", "memory://"))
        )
        default = app.config.get("FREQGUARD_DEFAULT_LIMITS")
        state = _State(
            guard,
            check_profile(app.config.get("FREQGUARD_HEADERS", "ietf")),
            Limit("/{rest:path}", default, key=self._key, name="flask.default")
            if default
            else None,
            self._exempt,
        )
        app.extensions["freqguard"] = state
        app.before_request(self._before)
        app.after_request(self._after)
        app.register_error_handler(CapExceeded, self._denied)
        app.register_error_handler(BadRequest, self._bad_request)

    @staticmethod
    def _state() -> _State:
        state: _State = current_app.extensions["freqguard"]
        return state

    def _hit(self, limit: Limit) -> None:
        state = self._state()
        ctx = context_of(limit.key, request_info(request.environ, dict(request.view_args or {})))
        policy = limit.policy_for(tuple(ctx))
        state.guard.add_policy(policy)
        decision = state.guard.hit(policy.name, limit.cost, **ctx)
        decisions: list[Decision] = g.setdefault("freqguard_decisions", [])
        decisions.append(decision)
        if not decision.allowed:
            raise CapExceeded(decision)

    def _before(self) -> None:
        state = self._state()
        if state.default is None or request.endpoint is None:
            return
        view = current_app.view_functions.get(request.endpoint)
        if request.endpoint in state.exempt or getattr(view, "_freqguard_exempt", False):
            return
        self._hit(state.default)

    def _after(self, response: Response) -> Response:
        decisions: list[Decision] = g.get("freqguard_decisions", [])
        if decisions:
            tightest = min(decisions, key=lambda d: (d.allowed, d.remaining))
            response.headers.update(tightest.headers(self._state().profile))
        return response

    def _denied(self, error: CapExceeded) -> Response:
        state = self._state()
        response = Response(
            problem_body(error.decision, request.path), 429, mimetype="application/problem+json"
        )
        response.headers.update(error.decision.headers(state.profile))
        return response

    @staticmethod
    def _bad_request(error: BadRequest) -> Response:
        body = bad_request_body(error, request.path)
        return Response(body, 400, mimetype="application/problem+json")

    def capped(
        self, rule: str, *, key: KeyFunc | None = None, cost: int = 1, name: str | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Cap one view: ``@fg.capped("5/minute")`` under ``@app.route(...)``."""

        def decorate(view: Callable[P, R]) -> Callable[P, R]:
            limit = Limit(
                "/{rest:path}",
                rule,
                key=key or self._key,
                cost=cost,
                name=name or f"flask.{view.__name__}",
            )

            @functools.wraps(view)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                self._hit(limit)
                return view(*args, **kwargs)

            return wrapper

        return decorate

    def exempt(self, view: Callable[P, R]) -> Callable[P, R]:
        """Exempt a view from ``FREQGUARD_DEFAULT_LIMITS``."""
        view._freqguard_exempt = True  # type: ignore[attr-defined]
        return view

    @staticmethod
    def guard_of(app: Flask) -> Guard:
        """The Guard an app uses."""
        state: _State = app.extensions["freqguard"]
        return state.guard
