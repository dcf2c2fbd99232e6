"""The calls under ``/v1/policies``, dispatched from ASGI straight to their handlers.

Starlette's way to a hit (its middleware, the router trying each route, the exception
wrappers) cost about as much as the service's own checks. :class:`Calls` splits the path
once and awaits the handler it finds there, read off the app's own routes; anything else
(another path or method, a trailing slash, a ``root_path``) goes on to the Starlette app,
whose answers (404, 405 with ``Allow``) stay as they were.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from freqguard.service.problems import Problem

__all__ = ["PREFIX", "Calls"]

PREFIX = "/v1/policies/"
_POLICY = PREFIX + "{policy}/"
#: A call's path: the policy, the action and (for a rule's call) the rule, as Starlette's
#: ``{name}`` matches each: one or more characters but ``/``.
_CALL = re.compile(re.escape(PREFIX) + r"([^/]+)/([^/]+)(?:/([^/]+))?")

Handler = Callable[[Request], Awaitable[Response]]


class Calls:
    """An ASGI app that answers the calls of ``routes`` under :data:`PREFIX` itself (the
    routes ``/v1/policies/{policy}/<action>`` and ``.../<action>/{rule}``), and passes
    everything else to ``app``."""

    def __init__(self, app: Any, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        # by the action, whether a rule follows it, and the method
        self._handlers: dict[tuple[str, bool, str], Handler] = {}
        for route in routes:
            if isinstance(route, Route) and route.path.startswith(_POLICY):
                action = route.path[len(_POLICY) :]
                ruled = action.endswith("/{rule}")
                action = action.removesuffix("/{rule}")
                if "{" in action or "/" in action:
                    raise ValueError(f"a call's route {route.path!r} is not one Calls finds")
                # awaited as it is: an endpoint with more around it (a sync function run
                # in a thread, middleware of its own) would lose it here
                bare = inspect.iscoroutinefunction(route.endpoint) and inspect.isfunction(route.app)
                if not bare:
                    raise ValueError(f"a call's route {route.path!r} is not a bare async endpoint")
                for method in route.methods or ():
                    self._handlers[action, ruled, method] = route.endpoint

    @property
    def routes(self) -> list[BaseRoute]:
        """The app's routes: every one the service serves (those it finds among them)."""
        routes: list[BaseRoute] = self.app.routes
        return routes

    def _find(self, scope: Any) -> tuple[Handler, dict[str, str]] | None:
        found = _CALL.fullmatch(scope["path"])
        if found is None or scope.get("root_path"):
            return None
        policy, action, rule = found.groups()
        handler = self._handlers.get((action, rule is not None, scope["method"]))
        if handler is None:
            return None
        return handler, {"policy": policy} if rule is None else {"policy": policy, "rule": rule}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        found = self._find(scope) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        handler, scope["path_params"] = found
        request = Request(scope, receive, send)
        try:
            response = await handler(request)
        except Problem as problem:  # the handlers' refusals; they turn all else into one
            response = problem.response(request)
        await response(scope, receive, send)
