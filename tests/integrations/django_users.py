"""Users from an ``X-User`` header, for the Django and DRF tests: anyone, without a
session or a database."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest


class HeaderUser:
    """A user named by the ``X-User`` header."""

    is_authenticated = True

    def __init__(self, pk: str) -> None:
        self.pk = pk


class HeaderUserMiddleware:
    """``request.user`` from ``X-User`` (None without it), as AuthenticationMiddleware
    would set it from a session."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        name = request.headers.get("x-user")
        request.user = HeaderUser(name) if name else None  # type: ignore[assignment]
        return self.get_response(request)


class HeaderAuthentication:
    """DRF authentication from ``X-User``."""

    def authenticate(self, request: Any) -> tuple[HeaderUser, None] | None:
        name = request._request.headers.get("x-user")
        return (HeaderUser(name), None) if name else None
