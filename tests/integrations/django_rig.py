"""What the Django middleware's tests share (``test_django.py``,
``test_django_leases.py``): the test site's settings (``django_site.py``, which configures
Django), and GET requests sent through Django's sync and async test clients."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from django.test import AsyncClient, Client, override_settings

from freqguard import Guard, ManualClock, MemoryBackend
from freqguard.integrations import django as fg_django
from tests.integrations import django_site

SITE = django_site.SETTINGS


def site_guard(clock: ManualClock) -> Iterator[Guard]:
    """The site's guard on ``clock`` for a test (as ``FREQGUARD_BACKEND``), its state closed
    after (a fixture's body: ``yield from site_guard(clock)``)."""
    made = Guard(MemoryBackend(clock))
    with override_settings(FREQGUARD_BACKEND=made):
        yield made
    fg_django.close()


def _get(path: str, times: int = 1, **headers: str) -> list[Any]:
    client = Client(headers=headers)
    return [client.get(path) for _ in range(times)]


def _aget(path: str, times: int = 1, **headers: str) -> list[Any]:
    sent = {name.replace("_", "-"): value for name, value in headers.items()}

    async def run() -> list[Any]:
        client = AsyncClient()
        return [await client.get(path, headers=sent) for _ in range(times)]

    return asyncio.run(run())
