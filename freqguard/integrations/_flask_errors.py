"""The Flask extension's answers to errors (a denial, a request its key refuses, the store
down), made so that the app's own handlers win, registered before ``init_app`` or after.

Flask keeps one handler a class, and finds the handler of the most specific class on an
error's MRO (an HTTP error's status code before any class). So the extension registers one
handler, for the base of freqguard's errors (:class:`FreqGuardError`), which answers the
three it knows and hands any other back to Flask (a 500, as if unhandled); an app's handler
for ``CapExceeded``, ``BadRequest`` or ``BackendUnavailable`` is more specific, whichever
came first. A denial the extension decides is a :class:`RateLimited`: a ``CapExceeded`` and
werkzeug's ``TooManyRequests`` both, so Flask-Limiter's habit, ``@app.errorhandler(429)``,
answers it too. Public Flask API only (``register_error_handler``).
"""

from __future__ import annotations

from flask import Flask, Response, current_app, request
from werkzeug.exceptions import TooManyRequests

from freqguard.errors import BackendUnavailable, CapExceeded, FreqGuardError
from freqguard.integrations._decide import Answer, Decider, bad_request, unavailable
from freqguard.integrations._request import BadRequest

__all__ = ["RateLimited", "register_handlers"]


class RateLimited(CapExceeded, TooManyRequests):
    """A request the extension refused: a :class:`CapExceeded` (``.decision``) and an HTTP
    429, so a handler for either answers it (Flask-Limiter's ``on_breach``, or its users'
    ``@app.errorhandler(429)``); none: freqguard's problem document."""


def register_handlers(app: Flask) -> None:
    """Register the extension's answer on ``app``, under the app's own handlers."""
    app.register_error_handler(FreqGuardError, _answer)


def _answer(error: FreqGuardError) -> Response:
    path = request.path
    if isinstance(error, CapExceeded):
        decider: Decider = current_app.extensions["freqguard"].decider
        answer: Answer = decider.answer(error.decision, path)
    elif isinstance(error, BadRequest):
        answer = bad_request(error, path)
    elif isinstance(error, BackendUnavailable):  # the route's on_error is "raise": a 503
        answer = unavailable(error, path)
    else:  # not the extension's to answer: Flask's own answer, as if unhandled
        raise error
    return Response(answer.body, answer.status, headers=answer.headers)
