"""FastAPI's ``enforce`` path (examples/fastapi_app.py ``GET /users/{user_id}``) answers as
every other integration does: the rate-limit headers on its 200s, an ``instance`` in its
429, and a bad id's validation error once."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from examples.fastapi_app import build


def _get(*paths: str) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=build(), client=("9.9.9.9", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return [await http.get(path) for path in paths]

    return asyncio.run(run())


def test_an_admitted_request_carries_the_rate_limit_headers() -> None:
    [response] = _get("/users/7")
    assert response.status_code == 200
    assert response.headers["ratelimit"] == '"sl.5.60s";r=4;t=60'
    assert response.headers["ratelimit-policy"] == '"sl.5.60s";q=5;w=60'


def test_a_denial_names_its_instance() -> None:
    denied = _get(*["/users/7"] * 6)[-1]
    assert denied.status_code == 429
    assert denied.json()["instance"] == "/users/7"
    assert denied.headers["retry-after"] == "60"


def test_a_bad_id_is_one_validation_error() -> None:
    [response] = _get("/users/x")
    assert response.status_code == 422
    assert [error["loc"] for error in response.json()["detail"]] == [["path", "user_id"]]


@settings(max_examples=5)
@given(segment=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1))
def test_any_id_is_an_answer_never_a_500(segment: str) -> None:
    [response] = _get("/users/" + quote(segment, safe=""))
    assert response.status_code in (200, 307, 404, 422)  # 307: a trailing slash
