"""The Flask extension's answers to errors (a denial, a request its key refuses, the store
down), and the app's own handlers beside them.

Flask keeps one handler a class and scope, the last registered: a handler the app registered
for ``CapExceeded`` before ``init_app`` (Flask-Limiter's ``on_breach``, as freqguard spells
it) would be replaced by the extension's, silently. So the extension registers its own only
where the app has none, and the app's wins whichever came first. A handler for the status
429 (Flask-Limiter's denial is an HTTP 429 error) never sees freqguard's denials, which are
``CapExceeded``: :func:`warn_unseen` names the fix once setup is over.

Flask has no public way to read the handlers registered: its ``error_handler_spec``
(``{scope: {code: {class: handler}}}`` in every Flask freqguard supports) is read here
alone, and an app without it is taken to have registered none (the extension's handlers
then registered, as they always were).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask, Response, current_app, g, request

from freqguard.decision import Decision
from freqguard.engine.requests import Unfit
from freqguard.errors import BackendUnavailable, CapExceeded
from freqguard.headers import combined_headers, merge_into
from freqguard.integrations._decide import Answer, Decider, Route, bad_request, unavailable
from freqguard.integrations._request import BadRequest

__all__ = ["add_headers", "decided", "register_handlers", "warn_unseen"]

_log = logging.getLogger("freqguard")


def decided(hit: Callable[..., Decision], route: Route, ctx: Mapping[str, object]) -> Decision:
    """``hit``'s decision of ``route`` for this request; of a cost past the request's
    capacity (``Unfit``), the denial it carries, noted: its 429 sends no ``Retry-After``."""
    try:
        return hit(route.name, route.cost, **ctx)
    except Unfit as unfit:
        g.freqguard_unfit = unfit
        return unfit.decision


def add_headers(response: Response, decisions: list[Decision], profile: str) -> None:
    """The rate-limit headers of every rule the request met (nearest exhaustion first), or
    the view's own where nearer (:func:`~freqguard.headers.merge_into`)."""
    ours = combined_headers(decisions, profile)
    if "freqguard_unfit" in g:  # a denial no retry turns: no Retry-After
        ours.pop("Retry-After", None)
    merge_into(response.headers, ours, response.status_code)


def _denied(error: CapExceeded) -> Response:
    decider: Decider = current_app.extensions["freqguard"].decider
    unfit = g.get("freqguard_unfit")  # a cost past the request's capacity (flask._hit)
    unfit = unfit if unfit is not None and unfit.decision is error.decision else None
    return _response(decider.answer(error.decision, request.path, None, unfit))


def _bad_request(error: BadRequest) -> Response:
    return _response(bad_request(error, request.path))


def _unavailable(error: BackendUnavailable) -> Response:
    """The store failed and the route's ``on_error`` is ``"raise"``: a 503, not a 500."""
    return _response(unavailable(error, request.path))


def _response(answer: Answer) -> Response:
    return Response(answer.body, answer.status, headers=answer.headers)


_HANDLERS: dict[type[Exception], Callable[[Any], Response]] = {
    CapExceeded: _denied,
    BadRequest: _bad_request,
    BackendUnavailable: _unavailable,
}


def register_handlers(app: Flask) -> None:
    """Register the extension's handlers on ``app``, each unless the app has its own for
    that class (registered before ``init_app``; one registered after replaces it)."""
    for error, handler in _HANDLERS.items():
        if _registered(app, None, error) is None:
            app.register_error_handler(error, handler)


def warn_unseen(app: Flask) -> None:
    """Warn when the app answers the status 429 but not ``CapExceeded``: a habit from
    Flask-Limiter that would pass unseen."""
    scopes = list(_spec(app))  # the app (None) and every blueprint with a handler
    answers_429 = any(_registered(app, scope, 429) for scope in scopes)
    mine = [_registered(app, scope, CapExceeded) for scope in scopes]
    if answers_429 and all(handler in (None, _denied) for handler in mine):
        _log.warning(
            "app %r has an error handler for 429, which freqguard's denials never reach: "
            "they raise freqguard.CapExceeded (its .decision has retry_after, denied_by, "
            "policy). Register it with @app.errorhandler(CapExceeded) too; the rate-limit "
            "headers and Retry-After are added to its response",
            app.name,
        )


def _spec(app: Flask) -> Mapping[Any, Any]:
    spec = getattr(app, "error_handler_spec", None)
    return spec if isinstance(spec, Mapping) else {}


def _registered(app: Flask, scope: str | None, error: type[Exception] | int) -> object:
    """The handler ``scope`` (None: the app) registered for ``error``, a class (not an HTTP
    error's) or a status code (any class of it); None: none."""
    by_code = _spec(app).get(scope)
    if not isinstance(by_code, Mapping):
        return None
    by_class = by_code.get(error if isinstance(error, int) else None)
    if not isinstance(by_class, Mapping):
        return None
    return next(iter(by_class.values()), None) if isinstance(error, int) else by_class.get(error)
