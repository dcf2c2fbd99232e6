"""What the Django middleware's tests share (``test_django.py``,
``test_django_leases.py``): the test site's settings (``django_site.py``, which configures
Django), and GET requests sent through Django's sync and async test clients."""

from __future__ import annotations

import asyncio
from typing import Any

from django.test import AsyncClient, Client

from tests.integrations import django_site

SITE = django_site.SETTINGS


def _get(path: str, times: int = 1, **headers: str) -> list[Any]:
    client = Client(headers=headers)
    return [client.get(path) for _ in range(times)]


def _aget(path: str, times: int = 1, **headers: str) -> list[Any]:
    sent = {name.replace("_", "-"): value for name, value in headers.items()}

    async def run() -> list[Any]:
        client = AsyncClient()
        return [await client.get(path, headers=sent) for _ in range(times)]

    return asyncio.run(run())
