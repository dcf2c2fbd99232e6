"""Limits that silently did not apply: a route pattern must match what the framework routes
on (the path below ``root_path`` and below a ``Mount``), with every Starlette convertor; a
pattern that can match nothing is refused when the Limit is made; two routes never share a
default name (their counters)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from freqguard import AsyncGuard, ConfigError, ManualClock, MemoryBackend
from freqguard.integrations.starlette import FreqGuardMiddleware, Limit, header
from freqguard.integrations.wsgi import FreqGuardMiddleware as WSGIMiddleware


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _statuses(app: object, paths: Sequence[str], root_path: str = "") -> list[int]:
    async def main() -> list[int]:
        transport = httpx.ASGITransport(app=app, root_path=root_path)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return [(await http.get(path)).status_code for path in paths]

    return asyncio.run(main())


def _limited(app: object, *limits: Limit) -> FreqGuardMiddleware:
    guard = AsyncGuard(MemoryBackend(), clock=ManualClock(1000))
    return FreqGuardMiddleware(app, guard=guard, limits=limits)  # type: ignore[arg-type]


def test_behind_a_root_path_the_limit_matches_the_routed_path() -> None:
    """``uvicorn --root-path /v1``: the server puts /v1 in both ``root_path`` and ``path``;
    the app routes on /sms, and so must the limit (12 of 12 were admitted on 3/minute)."""
    app = Starlette(routes=[Route("/sms", _ok)])
    limited = _limited(app, Limit("/sms", "3/minute"))
    assert _statuses(limited, ["/v1/sms"] * 5, root_path="/v1") == [200] * 3 + [429] * 2


def test_in_a_mounted_app_the_limit_matches_the_path_below_the_mount() -> None:
    inner = Starlette(routes=[Route("/sms", _ok)])
    limited = _limited(inner, Limit("/sms", "3/minute"))
    outer = Starlette(routes=[Mount("/api", app=limited)])
    assert _statuses(outer, ["/api/sms"] * 5) == [200] * 3 + [429] * 2


def test_at_the_root_of_a_mount_the_route_path_is_the_slash() -> None:
    inner = Starlette(routes=[Route("/", _ok)])
    limited = _limited(inner, Limit("/", "1/minute"))
    outer = Starlette(routes=[Mount("/api", app=limited)])
    assert _statuses(outer, ["/api/", "/api/"]) == [200, 429]


def test_a_wsgi_app_under_a_script_name_matches_path_info() -> None:
    """WSGI already splits the two (the sibling that holds): SCRIPT_NAME is where the app is
    mounted, PATH_INFO what it routes on, and the limit matches PATH_INFO."""
    from wsgiref.util import setup_testing_defaults

    from freqguard import Guard
    from freqguard.integrations.wsgi import Limit as WSGILimit

    def app(environ: dict[str, object], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    guard = Guard(MemoryBackend(), clock=ManualClock(1000))
    limited = WSGIMiddleware(app, guard=guard, limits=[WSGILimit("/sms", "2/minute")])
    statuses: list[str] = []
    for _ in range(3):
        environ: dict[str, Any] = {"SCRIPT_NAME": "/v1", "PATH_INFO": "/sms"}
        setup_testing_defaults(environ)
        limited(environ, lambda status, headers, *_: statuses.append(status))
    assert [int(status[:3]) for status in statuses] == [200, 200, 429]


@pytest.mark.parametrize(
    ("pattern", "path", "other"),
    [
        ("/users/{id:int}", "/users/42", "/users/abc"),
        ("/users/{name:str}", "/users/bob", "/users/bob/x"),
        ("/files/{u:uuid}", "/files/0f8fad5b-d9cb-469f-a165-70867728950e", "/files/0f8fad5b"),
        ("/price/{f:float}", "/price/3.25", "/price/3.x"),
        ("/static/{rest:path}", "/static/a/b.css", "/other/a"),
    ],
)
def test_every_starlette_convertor_matches_as_starlette_does(
    pattern: str, path: str, other: str
) -> None:
    app = Starlette(routes=[Route(pattern, _ok), Route(other, _ok)])
    limited = _limited(app, Limit(pattern, "2/minute"))
    assert _statuses(limited, [path] * 3 + [other] * 3) == [200, 200, 429] + [200] * 3


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("/users/{id:integer}", r"unknown convertor 'integer'.*str, path, int, float, uuid"),
        ("/users/{id", "unbalanced"),
        ("/users/id}", "unbalanced"),
        ("/users/{}", "parameter name"),
        ("/users/{1d}", "parameter name"),
        ("/a/{x}/b/{x}", "'x' twice"),
        # a glob (nginx's habit) matched only a path with a star in it: found by a new
        # user's first hour
        ("/api/*", r"'\*' is no wildcard here: write /api/\{rest:path\}"),
        ("/api/*/items", r"write /api/\{part\}/items"),
        # a glob's '**' (any segments): the hint was /api/{part}*, refused again (review)
        ("/api/**", r"write /api/\{rest:path\} "),
        ("/api/**/items", r"write /api/\{rest:path\}/items "),
    ],
)
def test_a_pattern_that_cannot_match_is_refused_when_the_limit_is_made(
    pattern: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Limit(pattern, "1/minute")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("/user/profile", "/user-profile"),
        ("/a/" + "x" * 80, "/a/" + "x" * 79 + "y"),
        ("/users/{id}", "/users/{id:int}"),
    ],
)
def test_two_routes_never_share_a_default_name(first: str, second: str) -> None:
    one, two = Limit(first, "3/minute"), Limit(second, "5/minute")
    assert one.name != two.name
    assert len(one.name) <= 64
    assert Limit(first, "9/hour").name == one.name  # stable: it names the keys in Redis


def test_two_routes_with_names_alike_keep_their_own_counters() -> None:
    app = Starlette(routes=[Route("/user/profile", _ok), Route("/user-profile", _ok)])
    limited = _limited(
        app,
        Limit("/user/profile", "2/minute", key=header("x-user", missing="share")),
        Limit("/user-profile", "3/minute", key=header("x-user", missing="share")),
    )
    paths = ["/user/profile"] * 3 + ["/user-profile"] * 4
    assert _statuses(limited, paths) == [200, 200, 429] + [200] * 3 + [429]


@pytest.mark.parametrize(
    ("pattern", "hint"),
    [
        ("/users/<uid>", "/users/{uid}"),
        ("/users/<string:name>", "/users/{name}"),
        ("/users/<int:uid>", "/users/{uid:int}"),
        ("/price/<float:amount>", "/price/{amount:float}"),
        ("/files/<uuid:file_id>", "/files/{file_id:uuid}"),
        ("/static/<path:rest>", "/static/{rest:path}"),
        ("/u/<int:uid>/posts/<int(signed=True):pid>", "/u/{uid:int}/posts/{pid:int}"),
        ("/<any(a, b):kind>/x", "/{kind}/x"),
        ("/<custom:c>", "/{c}"),
    ],
)
def test_a_werkzeug_converter_is_refused_naming_the_freqguard_spelling(
    pattern: str, hint: str
) -> None:
    """A Flask user's pattern, /users/<int:uid>, matched only that literal text: the route was
    never capped (found by a new user coming from Flask-Limiter). Every werkzeug converter is
    refused when the Limit is made, naming the pattern to write instead."""
    with pytest.raises(ConfigError, match="werkzeug") as refused:
        Limit(pattern, "1/minute")
    assert f"write {hint} " in str(refused.value)
    assert pattern in str(refused.value)
    Limit(hint, "1/minute")  # the spelling named is accepted


def test_a_wsgi_limit_in_freqguard_spelling_caps_a_flask_converter_route() -> None:
    from flask import Flask

    from freqguard import Guard
    from freqguard.integrations.wsgi import Limit as WSGILimit

    app = Flask("w")
    app.add_url_rule("/users/<int:uid>", "u", lambda uid: str(uid))
    guard = Guard(MemoryBackend(), clock=ManualClock(1000))
    limits = [WSGILimit("/users/{uid:int}", "1/minute")]
    app.wsgi_app = WSGIMiddleware(app.wsgi_app, guard=guard, limits=limits)  # type: ignore[method-assign]
    with app.test_client() as client:
        assert [client.get("/users/7").status_code for _ in range(2)] == [200, 429]


@pytest.mark.parametrize("pattern", ["/a<b", "/a/<>", "/cmp/<1x>", "/x/<a b>", "/x/a>b"])
def test_an_angle_bracket_that_is_no_converter_stays_a_literal(pattern: str) -> None:
    assert Limit(pattern, "1/minute").path == pattern


def test_a_pattern_matches_the_path_as_sent_so_a_trailing_slash_matters() -> None:
    """Against the FastAPI route /items/, Limit('/items') capped only the 307 redirect to
    /items/, never the route (found by a new user coming from slowapi, whose limit sits on
    the route). The pattern matches the path as sent, as Starlette's router does: the route's
    own path caps it, redirected requests included, and the redirect is not counted."""
    from fastapi import FastAPI

    def app() -> FastAPI:
        api = FastAPI()
        api.get("/items/")(lambda: 1)
        return api

    sent = ["/items/", "/items/", "/items", "/items"]
    assert _statuses(_limited(app(), Limit("/items", "1/minute")), sent) == [200, 200, 307, 429]
    assert _statuses(_limited(app(), Limit("/items/", "1/minute")), sent) == [200, 429, 307, 307]
