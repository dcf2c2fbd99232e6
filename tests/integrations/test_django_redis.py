"""The Django integration on a real Redis (``FREQGUARD_BACKEND = "redis://..."``): sync and
async views count on the server, and N concurrent requests (threads under the sync handler,
tasks under the async one) admit exactly the cap."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.test import AsyncClient, Client, override_settings

from freqguard.integrations import django as fg_django
from tests.conftest import flush
from tests.integrations import django_site  # noqa: F401 -- configures Django
from tests.servers import RedisServer, free_port

CONCURRENT = 24


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    flush([redis_server])
    url = f"redis://127.0.0.1:{redis_server.port}"
    try:
        with override_settings(FREQGUARD_BACKEND=url, FREQGUARD_DEFAULT_LIMITS="3/minute"):
            yield url
    finally:
        fg_django.close()


def _aget(paths: list[str], *, concurrent: bool = False) -> list[int]:
    """GET each path with the async client, in turn or all at once, on one event loop; the
    async guard made on it is closed on it."""

    async def run() -> list[int]:
        client = AsyncClient()
        try:
            if concurrent:
                found = await asyncio.gather(*(client.get(path) for path in paths))
            else:
                found = [await client.get(path) for path in paths]
        finally:
            await fg_django.aclose()
        return [response.status_code for response in found]

    return asyncio.run(run())


def _get(path: str, times: int) -> list[int]:
    client = Client()
    return [client.get(path).status_code for _ in range(times)]


def test_default_limits_and_caps_on_redis(redis_url: str, redis_server: RedisServer) -> None:
    assert _get("/plain", 4) == [200, 200, 200, 429]
    assert _get("/sync", 3) == [200, 200, 429]
    keys = redis_server.client.keys("*")
    assert keys  # the counts live on the server


def test_sync_and_async_sides_count_on_one_server(redis_url: str) -> None:
    assert _get("/async", 1) == [200]
    assert _aget(["/async", "/async"]) == [200, 429]
    assert _aget(["/class", "/async-class"]) == [200, 200]
    assert _get("/async", 1) == [429]


def test_concurrent_async_requests_admit_exactly_the_cap(redis_url: str) -> None:
    codes = _aget(["/async"] * CONCURRENT, concurrent=True)
    assert sorted(codes) == [200] * 2 + [429] * (CONCURRENT - 2)


def test_concurrent_threads_admit_exactly_the_cap(redis_url: str) -> None:
    def one(_: int) -> int:
        return Client().get("/plain").status_code

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(one, range(CONCURRENT)))
    assert sorted(codes) == [200] * 3 + [429] * (CONCURRENT - 3)


def test_a_drf_throttle_on_redis(redis_url: str) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    codes = [client.get("/api/orders").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]


def test_a_store_that_is_down_answers_503_with_retry_after() -> None:
    """Nothing listens on the port and the guard's ``on_error`` is ``"raise"``: the
    middleware (sync and async) and the DRF throttle answer 503, never a bare 500."""
    from rest_framework.test import APIClient

    async def aget() -> Any:
        try:
            return await AsyncClient().get("/plain")
        finally:
            await fg_django.aclose()

    down = f"redis://127.0.0.1:{free_port()}"
    try:
        with override_settings(FREQGUARD_BACKEND=down, FREQGUARD_DEFAULT_LIMITS="3/minute"):
            responses = [Client().get("/plain"), asyncio.run(aget())]
        with override_settings(FREQGUARD_BACKEND=down):  # the throttle alone decides
            throttled = APIClient().get("/api/orders")
    finally:
        fg_django.close()
    for response in responses:
        assert response.status_code == 503
        assert response["Content-Type"] == "application/problem+json"
        assert int(response["Retry-After"]) >= 1
    assert throttled.status_code == 503
