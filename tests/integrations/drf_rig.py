"""What the DRF throttle tests share (``test_drf.py``, ``test_drf_checks.py``,
``test_drf_check_walk.py``): the site's ``REST_FRAMEWORK`` settings, a guard on memory with
a ManualClock as the site's backend, and the one check message naming a thing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from freqguard import Guard, ManualClock, MemoryBackend
from tests.integrations import django_site

REST = django_site.SETTINGS["REST_FRAMEWORK"]


@pytest.fixture
def guard(clock: ManualClock) -> Iterator[Guard]:
    guard = Guard(MemoryBackend(clock))
    with override_settings(FREQGUARD_BACKEND=guard):
        yield guard


def _one(messages: list[str], naming: str) -> str:
    [message] = [m for m in messages if naming in m]
    return message
