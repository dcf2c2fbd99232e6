"""The calls under ``/v1/policies``, dispatched from ASGI straight to their handlers.

Starlette's way to a hit (its middleware, the router trying each route, the exception
wrappers) cost about as much as the service's own checks. :class:`Calls` splits the path
once and awaits the handler it finds there, read off the app's own routes; anything else
(another path or method, a trailing slash, a ``root_path``) goes on to the Starlette app,
whose answers (404, 405 with ``Allow``) stay as they were.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from freqguard.service.problems import Problem

__all__ = ["PREFIX", "Calls"]

PREFIX = "/v1/policies/"
_POLICY = PREFIX + "{policy}/"

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
        path: str = scope["path"]
        if not path.startswith(PREFIX) or scope.get("root_path"):
            return None
        parts = path[len(PREFIX) :].split("/")
        if len(parts) == 2:
            params = {"policy": parts[0]}
        elif len(parts) == 3:
            params = {"policy": parts[0], "rule": parts[2]}
        else:
            return None
        if not all(parts):  # an empty name: Starlette's route would not match it either
            return None
        handler = self._handlers.get((parts[1], len(parts) == 3, scope["method"]))
        return None if handler is None else (handler, params)

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
